"""Leaked texts of every tool-call markup shape in ../shared/FACTS.md and SGLang 0.5.23's
detectors: V3.1 and V3 special tokens, V3.2 DSML ``function_calls``, V4 ``tool_calls``, V4.1
``" calls"``, the generic ``<tool_call>`` and a stray ``</think>``; whole, broken by hand, and
(``TRUNCATED``) every whole one cut short before and inside each of its tags, as a stream that
ended early leaves them.

The texts carry no verdict: test_triage_parsers.py labels each by running SGLang's own
detectors. ``FAMILY`` is bisect's own markup detection (experiments/markup.py), not SGLang's.
"""

from __future__ import annotations

import json

C = "X1"
ARGS = {"path": "a.py", "canary": C}
A = json.dumps(ARGS)
B31, E31 = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
D = "｜DSML｜"


def c31(name: str = "read_file", args: str = A) -> str:
    return f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"


def c3(name: str = "read_file", args: str = A) -> str:
    """V3: a type before the separator, the arguments fenced as ```json."""
    fenced = f"\n```json\n{args}\n```"
    return f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}{fenced}<｜tool▁call▁end｜>"


def p(k: str, v: str, s: str = "true", d: str = D) -> str:
    return f'<{d}parameter name="{k}" string="{s}">{v}</{d}parameter>'


def inv(name: str = "read_file", body: str | None = None, d: str = D) -> str:
    body = p("path", "a.py", d=d) + p("canary", C, d=d) if body is None else body
    return f'<{d}invoke name="{name}">{body}</{d}invoke>'


def blk(w: str, inner: str, d: str = D) -> str:
    return f"<{d}{w}>{inner}</{d}{w}>"


def p41(k: str, v: str) -> str:
    return f'<｜DSML｜ parameter name="{k}" string="true">{v}</｜DSML｜ parameter>'


INV41 = (f'<｜DSML｜ invoke name="read_file">{p41("path", "a.py")}{p41("canary", C)}'
         "</｜DSML｜ invoke>")
TC = json.dumps({"name": "read_file", "arguments": ARGS})
SEARCH = json.dumps({"query": "x", "canary": C})

# id -> (family by bisect's detection, text). Whole shapes first: these are cut below.
WHOLE: dict[str, tuple[str, str]] = {
    "v31": ("v31", B31 + c31() + E31),
    "v31_two": ("v31", B31 + c31() + c31("search_code", SEARCH) + E31),
    "v31_prose_first": ("v31", "Let me look.\n\n" + B31 + c31() + E31),
    "v3_fenced": ("v31", B31 + c3() + E31),
    "v3_fenced_two": ("v31", B31 + c3() + c3("search_code", SEARCH) + E31),
    "dsml": ("dsml", blk("function_calls", inv())),
    "dsml_pretty": ("dsml", 'Reading it.\n\n<｜DSML｜function_calls>\n  <｜DSML｜invoke name="read_'
                    'file">\n  ' + p("path", " a.py ") + "\n  " + p("canary", C)
                    + "\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"),
    "dsml_string_false": ("dsml", blk("function_calls", inv(
        "search_code", p("query", "x") + p("canary", json.dumps(C), "false")))),
    "dsml_json_body": ("dsml", blk("function_calls", inv(body=" " + A + " "))),
    "dsml_two": ("dsml", blk("function_calls", inv()
                             + inv("run_tests", p("target", "all") + p("canary", C)))),
    "dsml_self_closing": ("dsml", blk("function_calls", '<｜DSML｜invoke name="run_tests"/>')),
    "v4": ("v4", blk("tool_calls", inv())),
    "v4_two": ("v4", blk("tool_calls", inv() + inv("search_code", p("query", "x")
                                                    + p("canary", C)))),
    "v4_json_body": ("v4", blk("tool_calls", inv(body=A))),
    "v41": ("v41", f"<｜DSML｜ calls>{INV41}</｜DSML｜ calls>"),
    "tool_call": ("tool_call", f"<tool_call>{TC}</tool_call>"),
    "tool_call_list": ("tool_call", f"<tool_call>[{TC}, {TC}]</tool_call>"),
}

BROKEN: dict[str, tuple[str, str]] = {
    "v31_no_calls_end": ("v31", B31 + c31()),
    "v31_cut_in_args": ("v31", B31 + "<｜tool▁call▁begin｜>read_file<｜tool▁sep｜>" + A[:9]),
    "v31_bad_json": ("v31", B31 + c31(args='{"path": a.py}') + E31),
    "v31_one_bad_of_two": ("v31", B31 + c31() + c31(args="{oops") + E31),
    "v31_no_calls_begin": ("v31", c31() + E31),
    "v31_unknown_function": ("v31", B31 + c31("rm_rf") + E31),
    "v31_lone_sep": ("v31", "read_file<｜tool▁sep｜>" + A),
    "v31_cut_token": ("v31", "I will call <｜tool▁calls▁"),
    "v3_and_v31_mixed": ("v31", B31 + c31() + c3("search_code", SEARCH) + E31),
    "dsml_bare_invoke": ("dsml", "ok " + inv()),
    "dsml_second_unclosed": ("dsml", blk("function_calls", inv()
                                         + '<｜DSML｜invoke name="run_tests">' + p("target", "x"))),
    "dsml_block_unclosed": ("dsml", "<｜DSML｜function_calls>" + inv()),
    "dsml_param_unclosed": ("dsml", blk("function_calls", inv(
        body='<｜DSML｜parameter name="path" string="true">a.py' + p("canary", C)))),
    "dsml_param_no_string_attr": ("dsml", blk("function_calls", inv(
        body='<｜DSML｜parameter name="path">a.py</｜DSML｜parameter>'))),
    "dsml_json_body_nan": ("dsml", blk("function_calls", inv(body='{"path": NaN}'))),
    "dsml_json_body_list": ("dsml", blk("function_calls", inv(body="[1, 2]"))),
    "dsml_unknown_function": ("dsml", blk("function_calls", inv("rm_rf"))),
    "dsml_plain_no_marker": ("dsml", blk("function_calls", inv(d=""), d="")),
    "dsml_plain_bare_invoke": ("dsml", inv(d="")),
    "dsml_lone_close": ("dsml", "done</｜DSML｜invoke>"),
    "dsml_cut_marker": ("dsml", "calling <｜DSML｜"),
    "v4_unclosed": ("v4", "<｜DSML｜tool_calls>" + inv()),
    "v4_wrong_closer": ("v4", "<｜DSML｜tool_calls>" + inv() + "</｜DSML｜function_calls>"),
    "v4_invoke_unclosed": ("v4", blk("tool_calls", '<｜DSML｜invoke name="read_file">'
                                     + p("path", "a"))),
    "v4_in_v32_block": ("dsml", blk("function_calls", blk("tool_calls", inv()))),
    "v41_unclosed": ("v41", f"<｜DSML｜ calls>{INV41}"),
    "v41_without_space": ("dsml", blk("calls", inv())),
    "tool_call_newlines": ("tool_call", f"<tool_call>\n{TC}\n</tool_call>"),
    "tool_call_unterminated": ("tool_call", f"<tool_call>{TC}"),
    "tool_call_cut_json": ("tool_call", f"<tool_call>{TC[:20]}"),
    "tool_call_not_object": ("tool_call", '<tool_call>"read_file"</tool_call>'),
    "tool_call_unknown": ("tool_call", '<tool_call>{"name": "rm", "arguments": {}}</tool_call>'),
    "tool_call_lone_close": ("tool_call", "done</tool_call>"),
    "think_stray": ("think", "The user wants a.py.</think>Reading it now."),
    "think_paired": ("think", "<think>plan</think>Reading it now."),
    "think_twice": ("think", "plan</think>more</think>text"),
    "think_reopened": ("think", "plan</think><think>again"),
    "think_then_dsml": ("dsml", "plan</think>\n\n" + blk("function_calls", inv())),
    "think_then_v31_cut": ("v31", "plan</think>" + B31 + "<｜tool▁call▁begin｜>read_"),
}


def cuts(text: str) -> list[int]:
    """Where a stream may end inside ``text``: before each tag, in the middle of it, and one
    character short of the end (the last ``>`` missing)."""
    points = {len(text) - 1}
    start = text.find("<", 1)
    while start != -1:
        end = text.find(">", start)
        points.update((start, (start + (end if end != -1 else len(text))) // 2))
        start = text.find("<", start + 1)
    return sorted(point for point in points if 0 < point < len(text))


def _truncated() -> dict[str, str]:
    seen = {text for _, text in [*WHOLE.values(), *BROKEN.values()]}
    found: dict[str, str] = {}
    for name, (_, text) in WHOLE.items():
        for point in cuts(text):
            if text[:point] not in seen:  # a cut may repeat a shape already there
                seen.add(text[:point])
                found[f"{name}_cut{point}"] = text[:point]
    return found


TRUNCATED = _truncated()
FAMILY = {name: family for name, (family, _) in [*WHOLE.items(), *BROKEN.items()]}
# Every text: id -> text.
CORPUS: dict[str, str] = {**{n: t for n, (_, t) in WHOLE.items()},
                          **{n: t for n, (_, t) in BROKEN.items()}, **TRUNCATED}
