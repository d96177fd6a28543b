"""BUILT-IN FALLBACK parser for leak triage, used when the optional ``sglang`` package is absent.

It follows the rules of SGLang 0.5.23's one-shot detectors (``detect_and_parse``), one function
per ``--tool-call-parser`` name (``PARSERS``), so both paths call the same texts parsed:
deepseekv3 (DeepSeekV3Detector, the ```json-fenced V3 call), deepseekv31 (DeepSeekV31Detector),
deepseekv32 / deepseekv4 / deepseekv41 (the DSML detectors: each also parses bare invokes, so
one parses another's block when its own wrapper is absent) and hermes (``<tool_call>``). Like
them, it drops calls to functions the tools do not offer, and one unparseable V3/V3.1 call loses
the whole block. tests/test_triage_parsers.py labels a corpus with SGLang's detectors and checks
this module agrees for every text and every parser.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

Calls = list[dict[str, Any]]

# ---- V3 / V3.1 special tokens -------------------------------------------------------------
# The patterns (all DOTALL) are compiled, and cached by re, when this parser first runs: with
# SGLang's detectors it never does, and compiling them on import cost every start.
V31_BOT = "<｜tool▁calls▁begin｜>"
V31_CALL = r"<｜tool▁call▁begin｜>.*?<｜tool▁call▁end｜>"
# Greedy inside one call, as SGLang's: V3.1 is NAME<sep>JSON, V3 is TYPE<sep>NAME ```json JSON```.
V31_DETAIL = r"<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)<｜tool▁call▁end｜>"
V3_DETAIL = r"<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)\n```json\n(.*)\n```<｜tool▁call▁end｜>"

# ---- DSML (V3.2 function_calls, V4 tool_calls, V4.1 " calls" with a space) ------------------
DSML = "｜DSML｜"
DSML_TAGS = {  # family -> (block, invoke, parameter) tag names after the marker
    "dsml": ("function_calls", "invoke", "parameter"),
    "v4": ("tool_calls", "invoke", "parameter"),
    "v41": (" calls", " invoke", " parameter"),
}

# ---- Hermes <tool_call> ---------------------------------------------------------------------
# An unterminated last <tool_call> still counts (SGLang's second alternative).
TOOL_CALL = r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)"


def _reject_constant(value: str) -> None:
    raise ValueError(f"invalid JSON constant {value}")


def _call(name: Any, arguments: Any, tools: list[dict[str, Any]]) -> Calls:
    """SGLang's parse_base_json for one call: unknown names are dropped, falsy arguments -> {}."""
    known = bool(name) and any(tool["function"]["name"] == name for tool in tools)
    return [{"name": name, "arguments": arguments or {}}] if known else []


def _unknown(name: Any) -> str:
    return f"unknown function {name!r}"


def _v31_calls(
    blocks: list[str],
    detail: str,
    groups: tuple[int, int],
    tools: list[dict[str, Any]],
) -> tuple[Calls, str | None]:
    calls: Calls = []
    reasons: list[str] = []
    try:
        for block in blocks:
            match = re.search(detail, block, re.DOTALL)
            if match is None:
                raise ValueError("a call without <｜tool▁sep｜> and JSON")
            name, arguments = match.group(groups[0]), json.loads(match.group(groups[1]))
            found = _call(name, arguments, tools)
            reasons += [] if found else [_unknown(name)]
            calls += found
    except ValueError as exc:
        return [], f"bad call: {exc}"  # one bad call loses them all, as in SGLang's
    return calls, "; ".join(reasons) or None


def _parse_v31(text: str, tools: list[dict[str, Any]], fenced: bool = False
               ) -> tuple[Calls, str | None]:
    """DeepSeekV31Detector (NAME<sep>JSON), or DeepSeekV3Detector when ``fenced``."""
    if V31_BOT not in text:
        return [], "no <｜tool▁calls▁begin｜>"
    blocks = re.findall(V31_CALL, text, re.DOTALL)
    if not blocks:
        return [], "no complete <｜tool▁call▁begin｜>...<｜tool▁call▁end｜>"
    if fenced:
        return _v31_calls(blocks, V3_DETAIL, (2, 3), tools)
    return _v31_calls(blocks, V31_DETAIL, (1, 2), tools)


def _dsml_arguments(body: str, parameter: str) -> Any:
    """SGLang's _parse_parameters_from_xml: a JSON object body, or parameter tags."""
    stripped = body.strip()
    if stripped.startswith("{"):
        parsed = json.loads(stripped, parse_constant=_reject_constant)
        if not isinstance(parsed, dict):
            raise ValueError("arguments are not a JSON object")
        return parsed
    tag = f"{DSML}{parameter}"
    param_re = rf'<{tag}\s+name="([^"]+)"\s+string="([^"]+)"\s*>(.*?)</{tag}>'
    arguments: dict[str, Any] = {}
    leftover, end = [], 0
    matches = list(re.finditer(param_re, body, re.DOTALL))
    for match in matches:
        leftover.append(body[end : match.start()])
        end = match.end()
        key, is_string, value = match.groups()
        if is_string == "true":
            arguments[key] = value.strip()
        else:
            try:
                arguments[key] = json.loads(value.strip(), parse_constant=_reject_constant)
            except ValueError:
                arguments[key] = value.strip()
    rest = "".join([*leftover, body[end:]])
    # Left-over DSML is a parameter tag that did not match (unclosed, no string=, ...).
    if DSML in rest or (not matches and rest.strip()):
        raise ValueError("malformed parameter tag")
    return arguments


def _parse_dsml(family: str, text: str, tools: list[dict[str, Any]]) -> tuple[Calls, str | None]:
    block, invoke, parameter = DSML_TAGS[family]
    bot = f"<{DSML}{block}>"
    if bot in text:
        sections = re.findall(rf"{re.escape(bot)}(.*?)</{DSML}{block}>", text, re.DOTALL)
        if not sections:
            return [], f"{bot} is never closed"
    elif f"<{DSML}{invoke}" in text:
        # Bare invokes without the wrapper: SGLang parses them rather than leak raw DSML.
        sections = [text[text.find(f"<{DSML}{invoke}") :]]
    elif DSML not in text:
        return [], "plain V3.2 markup without the ｜DSML｜ marker (sglang 0.5.23 does not parse it)"
    else:
        return [], f"no {bot} and no <{DSML}{invoke}"
    invoke_re = (
        rf'<{DSML}{invoke}\s+name="(?P<name>[^"]+)"\s*'
        rf"(?:(?P<self_close>/>)|>(?P<body>.*?)(?P<end>(?:</{DSML}{invoke}>|$)))"
    )
    calls: Calls = []
    reasons: list[str] = []
    for section in sections:
        for match in re.finditer(invoke_re, section, re.DOTALL):
            name = match.group("name").strip()
            if not match.group("self_close") and not match.group("end"):
                reasons.append(f"invoke {name!r} is never closed")
                continue
            try:
                arguments = _dsml_arguments(match.group("body") or "", parameter)
            except ValueError as exc:
                reasons.append(f"invoke {name!r}: {exc}")
                continue
            found = _call(name, arguments, tools)
            reasons += [] if found else [_unknown(name)]
            calls += found
    return calls, "; ".join(reasons) or None


def _parse_tool_call(text: str, tools: list[dict[str, Any]]) -> tuple[Calls, str | None]:
    if "<tool_call>" not in text:
        return [], "no <tool_call>"
    calls: Calls = []
    reasons: list[str] = []
    try:
        for closed, open_ended in re.findall(TOOL_CALL, text, re.DOTALL):
            raw = closed or open_ended
            if not raw:
                continue
            parsed = json.loads(raw.strip())
            for action in parsed if isinstance(parsed, list) else [parsed]:
                if not isinstance(action, dict):
                    raise ValueError("a call is not a JSON object")
                arguments = action.get("parameters") or action.get("arguments", {})
                found = _call(action.get("name"), arguments, tools)
                reasons += [] if found else [_unknown(action.get("name"))]
                calls += found
    except ValueError as exc:
        return [], f"bad <tool_call> JSON: {exc}"
    return calls, "; ".join(reasons) or None


# --tool-call-parser name -> the markup it reads (a DSML_TAGS key for the DSML detectors).
PARSERS = {"deepseekv3": "v3", "deepseekv31": "v31", "deepseekv32": "dsml", "deepseekv4": "v4",
           "deepseekv41": "v41", "hermes": "tool_call"}


def parse_as(parser: str, text: str, tools: list[dict[str, Any]]) -> tuple[Calls, str | None]:
    """The calls SGLang's detector for ``--tool-call-parser parser`` would recover, and why
    some did not."""
    markup = PARSERS.get(parser)
    if markup in ("v3", "v31"):
        return _parse_v31(text, tools, fenced=markup == "v3")
    if markup in DSML_TAGS:
        return _parse_dsml(markup, text, tools)
    if markup == "tool_call":
        return _parse_tool_call(text, tools)
    raise ValueError(f"no built-in parser for --tool-call-parser {parser!r}")


def count_openings(family: str, text: str) -> int:
    """How many calls the text starts (at least 1: markup is there, so something was meant)."""
    if family == "v31":
        marks = ["<｜tool▁call▁begin｜>"]
    elif family in DSML_TAGS:
        # The plain variant's invokes count too: they were meant as calls, and do not parse.
        marks = [f"<{DSML}{DSML_TAGS[family][1]}"] + (["<invoke "] if family == "dsml" else [])
    else:
        marks = ["<tool_call>"]
    return max(1, sum(text.count(mark) for mark in marks))


def think_form(text: str) -> tuple[Literal["well_formed", "malformed"], str | None]:
    """A stray ``</think>`` with no tool markup. One close (after at most one open) is a
    reasoning block that the reasoning parser should have split off; more is the model's."""
    closes, opens = text.count("</think>"), text.count("<think>")
    if closes == 1 and opens <= 1 and text.find("<think>") < text.find("</think>"):
        return "well_formed", None
    return "malformed", f"{closes} </think> and {opens} <think>"
