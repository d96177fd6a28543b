"""Leak triage on the corpus of markup shapes (tests/corpus_markup.py), through SGLang's
detectors and the built-in parser: family detection, the two paths, the fallback when sglang is
broken, and what classify_turn records. Whether each text parses, and with which parser, is
checked against SGLang's own detectors in test_triage_parsers.py. The sglang path is not
optional: `make test` installs the extra, and a missing sglang fails these tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.agent import TOOLS
from experiments.markup import MarkupFamily, find_markup, markup_family, render
from experiments.outcomes import Outcome
from experiments.workload.classify import classify_turn
from experiments.workload.triage import ENV, sglang_status, triage_leak
from tests.corpus_markup import CORPUS, FAMILY, C, blk, inv, p

REPO = Path(__file__).resolve().parent.parent


def require_sglang() -> None:
    status = sglang_status()
    if status is not None:
        pytest.fail(f"sglang's detectors do not import ({status}); `make test` installs them")


BACKENDS = ["sglang", "builtin"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "sglang":
        require_sglang()
    return str(request.param)


@pytest.mark.pure
@pytest.mark.parametrize("name", list(FAMILY))
def test_every_shape_is_found_with_its_family(name: str) -> None:
    assert find_markup(CORPUS[name]) is not None, name
    assert markup_family(CORPUS[name]) == FAMILY[name]


@pytest.mark.pure
@pytest.mark.parametrize("name", list(FAMILY))
def test_triage_of_every_shape(name: str, backend: str) -> None:
    triage = triage_leak(CORPUS[name], backend=backend)
    assert triage.family == FAMILY[name]
    # A stray </think> is judged by the built-in rule on both paths (no tool detector reads it).
    assert triage.source == ("builtin" if FAMILY[name] == "think" else backend)
    if triage.form == "well_formed":
        assert triage.reason is None
        assert triage.calls or FAMILY[name] == "think"
        for call in triage.calls:
            assert call["name"] in {tool["function"]["name"] for tool in TOOLS}
    else:
        assert triage.form == "malformed" and triage.reason  # no parser known: no mismatch


@pytest.mark.pure
@pytest.mark.parametrize("name", list(FAMILY))
def test_both_paths_agree(name: str) -> None:
    require_sglang()
    text = CORPUS[name]
    real, builtin = triage_leak(text, backend="sglang"), triage_leak(text, backend="builtin")
    assert (real.form, real.family, real.calls, real.parsed_as) == (
        builtin.form, builtin.family, builtin.calls, builtin.parsed_as)


@pytest.mark.pure
def test_well_formed_calls_carry_the_arguments(backend: str) -> None:
    text = blk("tool_calls", inv() + inv("search_code", p("query", "x") + p("canary", C)))
    triage = triage_leak(text, backend=backend)
    assert triage.calls == [
        {"name": "read_file", "arguments": {"path": "a.py", "canary": C}},
        {"name": "search_code", "arguments": {"query": "x", "canary": C}},
    ]


@pytest.mark.pure
@pytest.mark.parametrize("family", list(MarkupFamily))
def test_what_the_twin_leaks_is_well_formed(family: MarkupFamily, backend: str) -> None:
    text = render(family, "read_file", {"path": "a", "canary": C})
    assert triage_leak(text, backend=backend).form == "well_formed"
    assert triage_leak(text[: len(text) // 2], backend=backend).form == "malformed"


@pytest.mark.pure
def test_clean_text_is_no_family() -> None:
    triage = triage_leak("Nothing to see <b>here</b>.", backend="builtin")
    assert (triage.form, triage.family, triage.calls) == ("malformed", None, [])


@pytest.mark.pure
def test_tools_decide_which_names_are_known(backend: str) -> None:
    text = blk("function_calls", inv("deploy", p("canary", C)))
    assert triage_leak(text, backend=backend).form == "malformed"
    tools = [{"type": "function", "function": {"name": "deploy", "parameters": {}}}]
    assert triage_leak(text, tools, backend=backend).form == "well_formed"


@pytest.mark.pure
def test_env_forces_the_builtin_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "builtin")
    assert triage_leak(blk("function_calls", inv())).source == "builtin"
    monkeypatch.setenv(ENV, "sglang")
    if sglang_status() is None:
        assert triage_leak(blk("function_calls", inv())).source == "sglang"
    else:
        with pytest.raises(RuntimeError, match="do not import"):
            triage_leak(blk("function_calls", inv()))
    monkeypatch.setenv(ENV, "guess")
    with pytest.raises(ValueError, match=ENV):
        triage_leak(blk("function_calls", inv()))


@pytest.mark.pure
def test_auto_uses_sglang_when_it_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    require_sglang()
    monkeypatch.delenv(ENV, raising=False)
    assert triage_leak(blk("function_calls", inv())).source == "sglang"


BROKEN_SGLANG = {
    "raises": "raise RuntimeError('CUDA driver not found')\n",
    "empty": "",  # a package without sglang.srt: ImportError on the detectors
}


@pytest.mark.real
@pytest.mark.parametrize("kind", list(BROKEN_SGLANG))
def test_a_broken_sglang_falls_back_to_builtin(tmp_path: Path, kind: str) -> None:
    # A real broken package ahead of any installed sglang on the path, in a fresh interpreter.
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text(BROKEN_SGLANG[kind])
    script = (
        "import json; from experiments.workload.triage import sglang_status, triage_leak\n"
        f"t = triage_leak({blk('function_calls', inv())!r})\n"
        "print(json.dumps([sglang_status(), t.source, t.form]))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    env.pop(ENV, None)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    status, source, form = json.loads(done.stdout)
    assert status and (source, form) == ("builtin", "well_formed")


FAKE_SGLANG = {  # a detector that imports torch at module level, and what the load reads
    "srt/function_call/function_call_parser.py": (
        "from sglang.srt.function_call.deepseekv4_detector import DeepSeekV4Detector\n"
        "class FunctionCallParser:\n"
        "    ToolCallParserEnum = {'deepseekv4': DeepSeekV4Detector}\n"),
    "srt/function_call/deepseekv4_detector.py": "import torch\nclass DeepSeekV4Detector: ...\n",
    "srt/entrypoints/openai/protocol.py": "from pydantic import BaseModel\n" + "".join(
        f"class {name}(BaseModel): pass\n"
        for name in ("Function", "Tool", "ToolChoiceFuncName", "ToolChoice")),
}


@pytest.mark.real
def test_a_detector_that_needs_torch_falls_back_to_builtin_naming_it(tmp_path: Path) -> None:
    for name, text in FAKE_SGLANG.items():
        (tmp_path / "sglang" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "sglang" / name).write_text(text)
    (tmp_path / "sglang" / "__init__.py").write_text("raise RuntimeError('never run')\n")
    script = (
        "import json, sys; from experiments.workload.triage import sglang_status, triage_leak\n"
        f"t = triage_leak({blk('tool_calls', inv())!r})\n"
        "print(json.dumps([sglang_status(), t.source, t.form, 'torch' in sys.modules,\n"
        "                  'sglang' in sys.modules]))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    env.pop(ENV, None)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    status, source, form, torch, stand_in = json.loads(done.stdout)
    assert status.startswith("deepseekv4 (sglang.srt.function_call.deepseekv4_detector): ")
    assert "torch is refused" in status
    assert (source, form, torch, stand_in) == ("builtin", "well_formed", False, False)


@pytest.mark.real
def test_threads_that_triage_at_once_all_get_sglangs_detectors() -> None:
    """A pool actor warms the triage up in a thread while its first leaks arrive: every thread
    that asks during the narrow import waits for it, none falls back to the built-in parser."""
    require_sglang()
    script = (
        "import json, threading\n"
        "from experiments.workload.triage import triage_leak, parsers\n"
        "from experiments.workload.triage_sglang import parser_table\n"
        "got = []\n"
        f"work = [lambda: got.append(triage_leak({blk('tool_calls', inv())!r}).source),\n"
        "        lambda: got.append(len(parser_table())), lambda: got.append(len(parsers()))]\n"
        "threads = [threading.Thread(target=work[i % 3]) for i in range(12)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "print(json.dumps(sorted(map(str, got))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(ENV, None)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    got = json.loads(done.stdout)
    assert got.count("sglang") == 4 and got.count("6") == 4, got  # six triage parsers
    assert "0" not in got


@pytest.mark.pure
def test_classify_turn_records_the_triage(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, backend)
    for text, form in ((blk("tool_calls", inv()), "well_formed"), (inv()[:30], "malformed")):
        response = {"choices": [{"message": {"role": "assistant", "content": text}}]}
        verdict = classify_turn(response, C, TOOLS)
        assert verdict.outcome is Outcome.LEAK
        assert (verdict.leak_form, verdict.leak_parser) == (form, backend)
        assert verdict.leak_family == ("dsml" if form == "malformed" else "v4")


@pytest.mark.pure
def test_classify_turn_without_a_canary_skips_the_check() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": "a", "canary": "Z"})},
    }
    response = {
        "choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]
    }
    assert classify_turn(response, "X", TOOLS).outcome is Outcome.LOST_PLOT
    verdict = classify_turn(response, None, TOOLS)
    assert verdict.outcome is Outcome.OK and verdict.leak_form is None
