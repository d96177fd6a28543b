"""Leak triage on a corpus of real markup shapes, through SGLang's detectors and the built-in
parser. The sglang path is not optional in CI: `make test` installs the extra, and under CI=true a
missing sglang fails these tests instead of skipping them."""

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

REPO = Path(__file__).resolve().parent.parent


def require_sglang() -> None:
    """Skip on a developer machine without the extra; fail in CI, where it must be there."""
    status = sglang_status()
    if status is None:
        return
    message = f"sglang's detectors do not import ({status}); `make test` installs them"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


C = "X1"
ARGS = {"path": "a.py", "canary": C}
A = json.dumps(ARGS)
B31, E31 = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"


def c31(name="read_file", args=A):
    return f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"


D = "｜DSML｜"


def p(k, v, s="true", d=D):
    return f'<{d}parameter name="{k}" string="{s}">{v}</{d}parameter>'


def inv(name="read_file", body=None, d=D):
    body = p("path", "a.py", d=d) + p("canary", C, d=d) if body is None else body
    return f'<{d}invoke name="{name}">{body}</{d}invoke>'


def blk(w, inner, d=D):
    return f"<{d}{w}>{inner}</{d}{w}>"


V41 = "｜DSML｜ "


def p41(k, v):
    return f'<｜DSML｜ parameter name="{k}" string="true">{v}</｜DSML｜ parameter>'


inv41 = (
    f'<｜DSML｜ invoke name="read_file">{p41("path", "a.py")}{p41("canary", C)}</｜DSML｜ invoke>'
)
TC = json.dumps({"name": "read_file", "arguments": ARGS})
# (id, family, form, text): every shape in FACTS.md and SGLang 0.5.23 detectors, whole, cut
# short and broken. Expectations are what SGLang 0.5.23 does (checked on both paths below).
CORPUS = [
    ("v31", "v31", "well_formed", B31 + c31() + E31),
    (
        "v31_two",
        "v31",
        "well_formed",
        B31 + c31() + c31("search_code", json.dumps({"query": "x", "canary": C})) + E31,
    ),
    ("v31_no_calls_end", "v31", "well_formed", B31 + c31()),
    ("v31_prose_first", "v31", "well_formed", "Let me look.\n\n" + B31 + c31() + E31),
    (
        "v3_fenced",
        "v31",
        "well_formed",
        B31
        + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>read_file"
        + f"\n```json\n{A}\n```<｜tool▁call▁end｜>"
        + E31,
    ),
    (
        "v31_cut_in_args",
        "v31",
        "malformed",
        B31 + "<｜tool▁call▁begin｜>read_file<｜tool▁sep｜>" + A[:9],
    ),
    ("v31_bad_json", "v31", "malformed", B31 + c31(args='{"path": a.py}') + E31),
    ("v31_one_bad_of_two", "v31", "malformed", B31 + c31() + c31(args="{oops") + E31),
    ("v31_no_calls_begin", "v31", "malformed", c31() + E31),
    ("v31_unknown_function", "v31", "malformed", B31 + c31("rm_rf") + E31),
    ("v31_lone_sep", "v31", "malformed", "read_file<｜tool▁sep｜>" + A),
    ("v31_cut_token", "v31", "malformed", "I will call <｜tool▁calls▁"),
    ("dsml", "dsml", "well_formed", blk("function_calls", inv())),
    (
        "dsml_pretty",
        "dsml",
        "well_formed",
        'Reading it.\n\n<｜DSML｜function_calls>\n  <｜DSML｜invoke name="read_file">\n  '
        + p("path", " a.py ")
        + "\n  "
        + p("canary", C)
        + "\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    ),
    (
        "dsml_string_false",
        "dsml",
        "well_formed",
        blk(
            "function_calls",
            inv(body=p("query", "x") + p("canary", json.dumps(C), "false"), name="search_code"),
        ),
    ),
    ("dsml_json_body", "dsml", "well_formed", blk("function_calls", inv(body=" " + A + " "))),
    ("dsml_bare_invoke", "dsml", "well_formed", "ok " + inv()),
    (
        "dsml_two",
        "dsml",
        "well_formed",
        blk("function_calls", inv() + inv("run_tests", p("target", "all") + p("canary", C))),
    ),
    (
        "dsml_self_closing",
        "dsml",
        "well_formed",
        blk("function_calls", '<｜DSML｜invoke name="run_tests"/>'),
    ),
    (
        "dsml_second_unclosed",
        "dsml",
        "malformed",
        blk("function_calls", inv() + '<｜DSML｜invoke name="run_tests">' + p("target", "x")),
    ),
    ("dsml_block_unclosed", "dsml", "malformed", "<｜DSML｜function_calls>" + inv()),
    ("dsml_cut_in_param", "dsml", "malformed", "<｜DSML｜function_calls>" + inv()[:40]),
    (
        "dsml_param_unclosed",
        "dsml",
        "malformed",
        blk(
            "function_calls",
            inv(body='<｜DSML｜parameter name="path" string="true">a.py' + p("canary", C)),
        ),
    ),
    (
        "dsml_param_no_string_attr",
        "dsml",
        "malformed",
        blk("function_calls", inv(body='<｜DSML｜parameter name="path">a.py</｜DSML｜parameter>')),
    ),
    ("dsml_json_body_nan", "dsml", "malformed", blk("function_calls", inv(body='{"path": NaN}'))),
    ("dsml_json_body_list", "dsml", "malformed", blk("function_calls", inv(body="[1, 2]"))),
    ("dsml_unknown_function", "dsml", "malformed", blk("function_calls", inv("rm_rf"))),
    ("dsml_plain_no_marker", "dsml", "malformed", blk("function_calls", inv(d=""), d="")),
    ("dsml_plain_bare_invoke", "dsml", "malformed", inv(d="")),
    ("dsml_lone_close", "dsml", "malformed", "done</｜DSML｜invoke>"),
    ("dsml_cut_marker", "dsml", "malformed", "calling <｜DSML｜"),
    ("v4", "v4", "well_formed", blk("tool_calls", inv())),
    (
        "v4_two",
        "v4",
        "well_formed",
        blk("tool_calls", inv() + inv("search_code", p("query", "x") + p("canary", C))),
    ),
    ("v4_json_body", "v4", "well_formed", blk("tool_calls", inv(body=A))),
    ("v4_unclosed", "v4", "malformed", "<｜DSML｜tool_calls>" + inv()),
    (
        "v4_wrong_closer",
        "v4",
        "malformed",
        "<｜DSML｜tool_calls>" + inv() + "</｜DSML｜function_calls>",
    ),
    (
        "v4_invoke_unclosed",
        "v4",
        "malformed",
        blk("tool_calls", '<｜DSML｜invoke name="read_file">' + p("path", "a")),
    ),
    ("v41", "v41", "well_formed", f"<｜DSML｜ calls>{inv41}</｜DSML｜ calls>"),
    ("v41_unclosed", "v41", "malformed", f"<｜DSML｜ calls>{inv41}"),
    ("tool_call", "tool_call", "well_formed", f"<tool_call>{TC}</tool_call>"),
    ("tool_call_newlines", "tool_call", "well_formed", f"<tool_call>\n{TC}\n</tool_call>"),
    ("tool_call_unterminated", "tool_call", "well_formed", f"<tool_call>{TC}"),
    ("tool_call_list", "tool_call", "well_formed", f"<tool_call>[{TC}, {TC}]</tool_call>"),
    ("tool_call_cut_json", "tool_call", "malformed", f"<tool_call>{TC[:20]}"),
    ("tool_call_not_object", "tool_call", "malformed", '<tool_call>"read_file"</tool_call>'),
    (
        "tool_call_unknown",
        "tool_call",
        "malformed",
        '<tool_call>{"name": "rm", "arguments": {}}</tool_call>',
    ),
    ("tool_call_lone_close", "tool_call", "malformed", "done</tool_call>"),
    ("think_stray", "think", "well_formed", "The user wants a.py.</think>Reading it now."),
    ("think_paired", "think", "well_formed", "<think>plan</think>Reading it now."),
    ("think_twice", "think", "malformed", "plan</think>more</think>text"),
    ("think_reopened", "think", "malformed", "plan</think><think>again"),
    ("think_then_dsml", "dsml", "well_formed", "plan</think>\n\n" + blk("function_calls", inv())),
    ("think_then_v31_cut", "v31", "malformed", "plan</think>" + B31 + "<｜tool▁call▁begin｜>read_"),
]

BACKENDS = ["sglang", "builtin"]
IDS = [case[0] for case in CORPUS]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "sglang":
        require_sglang()
    return str(request.param)


@pytest.mark.parametrize(("name", "family", "form", "text"), CORPUS, ids=IDS)
def test_every_shape_is_found_with_its_family(name: str, family: str, form: str, text: str) -> None:
    assert find_markup(text) is not None, name
    assert markup_family(text) == family


@pytest.mark.parametrize(("name", "family", "form", "text"), CORPUS, ids=IDS)
def test_triage_of_every_shape(name: str, family: str, form: str, text: str, backend: str) -> None:
    triage = triage_leak(text, backend=backend)
    assert (triage.form, triage.family) == (form, family), triage
    # A stray </think> is judged by the built-in rule on both paths (no tool detector reads it).
    assert triage.source == ("builtin" if family == "think" else backend)
    if form == "well_formed":
        assert triage.reason is None
        assert triage.calls or family == "think"
        for call in triage.calls:
            assert call["name"] in {tool["function"]["name"] for tool in TOOLS}
    else:
        assert triage.reason


@pytest.mark.parametrize(("name", "family", "form", "text"), CORPUS, ids=IDS)
def test_both_paths_agree(name: str, family: str, form: str, text: str) -> None:
    require_sglang()
    real, builtin = triage_leak(text, backend="sglang"), triage_leak(text, backend="builtin")
    assert (real.form, real.family, real.calls) == (builtin.form, builtin.family, builtin.calls)


def test_well_formed_calls_carry_the_arguments(backend: str) -> None:
    text = blk("tool_calls", inv() + inv("search_code", p("query", "x") + p("canary", C)))
    triage = triage_leak(text, backend=backend)
    assert triage.calls == [
        {"name": "read_file", "arguments": {"path": "a.py", "canary": C}},
        {"name": "search_code", "arguments": {"query": "x", "canary": C}},
    ]


@pytest.mark.parametrize("family", list(MarkupFamily))
def test_what_the_twin_leaks_is_well_formed(family: MarkupFamily, backend: str) -> None:
    text = render(family, "read_file", {"path": "a", "canary": C})
    assert triage_leak(text, backend=backend).form == "well_formed"
    assert triage_leak(text[: len(text) // 2], backend=backend).form == "malformed"


def test_clean_text_is_no_family() -> None:
    triage = triage_leak("Nothing to see <b>here</b>.", backend="builtin")
    assert (triage.form, triage.family, triage.calls) == ("malformed", None, [])


def test_tools_decide_which_names_are_known(backend: str) -> None:
    text = blk("function_calls", inv("deploy", p("canary", C)))
    assert triage_leak(text, backend=backend).form == "malformed"
    tools = [{"type": "function", "function": {"name": "deploy", "parameters": {}}}]
    assert triage_leak(text, tools, backend=backend).form == "well_formed"


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


def test_auto_uses_sglang_when_it_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    require_sglang()
    monkeypatch.delenv(ENV, raising=False)
    assert triage_leak(blk("function_calls", inv())).source == "sglang"


BROKEN_SGLANG = {
    "raises": "raise RuntimeError('CUDA driver not found')\n",
    "empty": "",  # a package without sglang.srt: ImportError on the detectors
}


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


def test_classify_turn_records_the_triage(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, backend)
    for text, form in ((blk("tool_calls", inv()), "well_formed"), (inv()[:30], "malformed")):
        response = {"choices": [{"message": {"role": "assistant", "content": text}}]}
        verdict = classify_turn(response, C, TOOLS)
        assert verdict.outcome is Outcome.LEAK
        assert (verdict.leak_form, verdict.leak_parser) == (form, backend)
        assert verdict.leak_family == ("dsml" if form == "malformed" else "v4")


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
