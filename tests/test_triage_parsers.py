"""Leak triage against the server's ``--tool-call-parser``, checked against SGLang itself: every
text of tests/corpus_markup.py is labelled here by running SGLang's own detectors (one-shot
``detect_and_parse``, as the server parses a non-streamed reply), and the triage must agree for
every text and every parser, on both paths (sglang's detectors and the built-in parser).

The detectors are SGLang's classes from SGLang's own source, imported as triage imports them
(sglang_narrow.py: without sglang's ``__init__``, torch or openai). That the whole package, as
a server imports it, has the same classes and parses every text alike is
test_triage_ordinary_import.py's (real: a child process, for the seconds torch takes).

sglang is not optional here: `make test` installs the extra, and a missing one fails."""

from __future__ import annotations

import importlib.util
import json
import runpy
import timeit
from functools import cache, partial
from pathlib import Path

import pytest

from experiments.agent import TOOLS
from experiments.markup import find_markup, markup_family
from experiments.outcomes import Outcome
from experiments.workload import triage_sglang
from experiments.workload.classify import classify_turn
from experiments.workload.triage import (
    FAMILY_PARSERS,
    check_parser,
    parser_of,
    parsers,
    pool_parser,
    serving,
    sglang_status,
    triage_leak,
)
from experiments.workload.triage_builtin import PARSERS as BUILTIN_PARSERS
from experiments.workload.triage_builtin import count_openings
from tests.corpus_markup import B31, E31, TRUNCATED, WHOLE, blk, c3, c31, inv
from tests.support.sglang_ordinary import calls_of, tool_texts

pytestmark = pytest.mark.pure

DEEPSEEK = ("deepseekv3", "deepseekv31", "deepseekv32", "deepseekv4", "deepseekv41")


@pytest.fixture(scope="module", autouse=True)
def sglang_required() -> None:
    status = sglang_status()
    if status is not None:
        pytest.fail(f"sglang's detectors do not import ({status}); `make test` installs them")


# ---- the oracle: SGLang's detectors, called directly -----------------------------------------


@cache
def sglang_calls(parser: str, text: str) -> tuple[str, ...]:
    """What SGLang's detector for ``parser`` returns as calls (JSON, hashable for the cache)."""
    loaded = triage_sglang.load()
    assert loaded.detectors is not None and loaded.tool is not None, loaded.error
    return tuple(json.dumps(call) for call in calls_of(loaded.detectors[parser], loaded.tool,
                                                        text))


def sglang_parses(parser: str, text: str) -> bool:
    """SGLang's detector returns every call the text opens, and no markup inside them."""
    calls = [json.loads(c) for c in sglang_calls(parser, text)]
    family = markup_family(text)
    assert family not in (None, "think")
    inner = find_markup(json.dumps([c["arguments"] for c in calls], ensure_ascii=False))
    return bool(calls) and len(calls) >= count_openings(family, text) and inner is None


def expected(text: str, server: str | None) -> tuple[str, set[str]]:
    """(form, the parsers that parse it) as SGLang's detectors decide."""
    parsed = {name for name in parsers() if sglang_parses(name, text)}
    if server is None:
        return ("well_formed" if parsed else "malformed"), parsed
    if server in parsed:
        return "well_formed", {server}
    return ("parser_mismatch" if parsed else "malformed"), parsed


TOOL_TEXTS = tool_texts()
SERVERS = [None, *DEEPSEEK, "hermes"]


@pytest.mark.parametrize("backend", ["sglang", "builtin"])
@pytest.mark.parametrize("name", list(TOOL_TEXTS))
def test_triage_agrees_with_sglang_for_every_parser(name: str, backend: str) -> None:
    text = TOOL_TEXTS[name]
    for server in SERVERS:
        triage = triage_leak(text, backend=backend, parser=server)
        form, parsed = expected(text, server)
        assert (triage.form, set(triage.parsed_as)) == (form, parsed), (server, triage)
        assert triage.parser == server and triage.source == backend
        if form != "malformed":
            # The calls are those the first parser named would return.
            first = [json.loads(c) for c in sglang_calls(triage.parsed_as[0], text)]
            assert triage.calls == first
        else:
            assert triage.reason


def test_the_corpus_covers_every_shape_and_both_verdicts() -> None:
    # Each parser parses something and fails on something; truncations of every whole shape.
    for server in parsers():
        forms = {triage_leak(t, backend="sglang", parser=server).form
                 for t in TOOL_TEXTS.values()}
        assert forms == {"well_formed", "parser_mismatch", "malformed"}, server
    assert {n.rsplit("_cut", 1)[0] for n in TRUNCATED} == set(WHOLE)


# ---- sglang's table, read from its source ----------------------------------------------------


def test_the_parser_table_is_sglangs() -> None:
    # SGLang's list of names, read from its file: a module of its own without imports, whose
    # package's __init__ (an ordinary import runs it) would pull torch and transformers
    spec = importlib.util.find_spec("sglang")  # found, not imported
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations)))
    names = runpy.run_path(str(root / "srt/function_call/parser_names.py"))[
        "TOOL_CALL_PARSER_NAMES"]
    table = triage_sglang.parser_table()
    assert sorted(table) == sorted(names)  # sglang checks this list vs its enum
    assert table["deepseekv4"] == ("sglang.srt.function_call.deepseekv4_detector",
                                   "DeepSeekV4Detector")
    assert table["deepseekv3"][1] == "DeepSeekV3Detector"
    assert parsers() == (*DEEPSEEK, "hermes") == tuple(BUILTIN_PARSERS)
    for family, names in FAMILY_PARSERS.items():
        assert set(names) <= set(parsers()), family


def test_parser_names_are_checked() -> None:
    assert check_parser("deepseekv32") == "deepseekv32"
    with pytest.raises(ValueError, match="does not judge against; known: deepseekv3"):
        check_parser("qwen25")  # sglang knows it; triage does not ask its detector
    with pytest.raises(ValueError, match="not a parser sglang knows"):
        check_parser("deepseek-v4")
    with pytest.raises(ValueError, match="not a parser"):
        triage_leak(blk("tool_calls", inv()), parser="nope")


# ---- labels ------------------------------------------------------------------------------------


def test_a_wrong_parser_flag_is_a_parser_mismatch() -> None:
    v31 = B31 + c31() + E31
    triage = triage_leak(v31, parser="deepseekv3")
    assert triage.form == "parser_mismatch"
    assert triage.label == "parser mismatch: parses as deepseekv31, the server runs deepseekv3"
    assert triage.calls == [{"name": "read_file", "arguments": {"path": "a.py", "canary": "X1"}}]
    # The case: a DSML block the V4 detector parses, the V3.2 one does not.
    unclosed = "<｜DSML｜function_calls>" + inv()
    triage = triage_leak(unclosed, parser="deepseekv32")
    assert triage.label == "parser mismatch: parses as deepseekv4, the server runs deepseekv32"
    assert triage.as_dict()["form"] == "parser_mismatch"
    # Unknown parser: every detector is asked, and the label says which parsed it.
    assert triage_leak(unclosed).label == "parses as deepseekv4"
    assert triage_leak(B31 + c3() + E31).label == "parses as deepseekv3"


def test_labels_for_the_servers_own_parser_and_for_none() -> None:
    v4 = blk("tool_calls", inv())
    assert triage_leak(v4, parser="deepseekv4").label == "parses as deepseekv4, the server's parser"
    cut = triage_leak(v4[:40], parser="deepseekv4").label
    assert cut.startswith("malformed: deepseekv4: ") and cut.endswith("no other detector parses it")
    assert triage_leak(v4[:40]).label.startswith("malformed: no detector parses it (")
    assert triage_leak("plain text").label == "no tool-call markup"


# ---- where the parser comes from --------------------------------------------------------------


def test_the_parser_of_a_command_line() -> None:
    base = ["python", "-m", "sglang.launch_server", "--model-path", "m"]
    assert parser_of(base) is None
    assert parser_of([*base, "--tool-call-parser", "deepseekv31"]) == "deepseekv31"
    assert parser_of([*base, "--tool-call-parser=deepseekv4"]) == "deepseekv4"
    # A factor's flags come after the base command's: the last one given wins, as in argparse.
    assert parser_of([*base, "--tool-call-parser", "deepseekv3",
                      "--tool-call-parser", "deepseekv32"]) == "deepseekv32"
    # A parser triage does not judge against: unknown, so every detector is asked.
    assert parser_of([*base, "--tool-call-parser", "qwen25"]) is None
    assert parser_of([*base, "--tool-call-parser"]) is None
    # A pool: the one parser its services set; none, or two that disagree: not known.
    router = ["python", "-m", "sglang_router.launch_router"]
    assert pool_parser([router, [*base, "--tool-call-parser", "deepseekv4"]]) == "deepseekv4"
    assert pool_parser([router, base]) is None
    assert pool_parser([[*base, "--tool-call-parser=deepseekv4"],
                        [*base, "--tool-call-parser", "deepseekv32"]]) is None


def test_serving_sets_the_parser_of_every_triage_inside() -> None:
    response = {"choices": [{"message": {"role": "assistant", "content": B31 + c31() + E31}}]}
    with serving("deepseekv3"):
        verdict = classify_turn(response, "X1", TOOLS)
    assert verdict.outcome is Outcome.LEAK and verdict.leak_form == "parser_mismatch"
    assert verdict.leak_label == (
        "parser mismatch: parses as deepseekv31, the server runs deepseekv3")
    verdict = classify_turn(response, "X1", TOOLS)  # outside: not known
    assert (verdict.leak_form, verdict.leak_label) == ("well_formed", "parses as deepseekv31")
    with pytest.raises(ValueError, match="not a parser"), serving("v3"):
        pass


def test_one_triage_costs_little() -> None:
    """Triage runs once per leaked response, never on a clean one. Every detector asked (the
    parser unknown) still costs well under a millisecond or so per leak."""
    text = "<｜DSML｜function_calls>" + inv()
    for server in (None, "deepseekv32", "deepseekv4"):
        runs = timeit.repeat(partial(triage_leak, text, parser=server), number=50, repeat=5)
        per_call = sorted(runs)[len(runs) // 2] / 50
        assert per_call < 0.02, (server, per_call)  # generous: a shared 2-core CI machine
