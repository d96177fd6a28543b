"""Judge one assistant turn by the agent contract (experiments/agent.py). Pure: no I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from experiments.agent import tool_by_name
from experiments.markup import find_markup
from experiments.outcomes import Outcome
from experiments.workload.triage import triage_leak

EVIDENCE_LIMIT = 2000


@dataclass(frozen=True)
class TurnVerdict:
    outcome: Outcome
    evidence: str | None = None
    # The first call, as {"id", "name", "arguments": dict} when its arguments parsed.
    tool_call: dict[str, Any] | None = None
    # LEAK only (experiments/workload/triage.py): "well_formed" (the server's parser failed on
    # markup SGLang's detector parses) or "malformed" (the model broke it); the markup family;
    # and which parser judged: "sglang" (its detectors) or "builtin" (the fallback).
    leak_form: str | None = None
    leak_family: str | None = None
    leak_parser: str | None = None


def clip(text: str, limit: int = EVIDENCE_LIMIT, at: int = 0) -> str:
    """At most ``limit`` characters of ``text``, keeping position ``at`` in view."""
    if len(text) <= limit:
        return text
    start = max(0, min(at - limit // 4, len(text) - limit))
    return text[start : start + limit]


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _check_call(
    call: Any, tools: list[dict[str, Any]]
) -> tuple[TurnVerdict | None, dict[str, Any]]:
    """A BAD_ARGS verdict for a malformed call, else (None, parsed call)."""
    raw = clip(json.dumps(call, ensure_ascii=False, default=str))
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(call.get("id"), str):
        return TurnVerdict(Outcome.BAD_ARGS, f"malformed tool call: {raw}"), {}
    name = function.get("name")
    tool = tool_by_name(tools, name) if isinstance(name, str) else None
    if tool is None:
        return TurnVerdict(Outcome.BAD_ARGS, f"unknown function {name!r}: {raw}"), {}
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        return TurnVerdict(Outcome.BAD_ARGS, f"arguments are not a JSON string: {raw}"), {}
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return TurnVerdict(Outcome.BAD_ARGS, f"arguments are not valid JSON: {raw}"), {}
    if not isinstance(parsed, dict):
        return TurnVerdict(Outcome.BAD_ARGS, f"arguments are not a JSON object: {raw}"), {}
    schema = tool["function"].get("parameters", {})
    missing = [key for key in schema.get("required", []) if key not in parsed]
    if missing:
        return TurnVerdict(Outcome.BAD_ARGS, f"missing {missing} in {name}: {raw}"), {}
    for key, prop in schema.get("properties", {}).items():
        if prop.get("type") == "string" and key in parsed and not isinstance(parsed[key], str):
            return TurnVerdict(Outcome.BAD_ARGS, f"{name}.{key} is not a string: {raw}"), {}
    return None, {"id": call["id"], "name": name, "arguments": parsed}


def classify_turn(
    response: dict[str, Any], expected_canary: str | None, tools: list[dict[str, Any]]
) -> TurnVerdict:
    """One non-streaming chat completion judged: leak, no_tool, bad_args, lost_plot, ok, error.
    ``expected_canary`` None skips the canary check (a saved response judged on its own)."""
    choices = response.get("choices") if isinstance(response, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raw = json.dumps(response, ensure_ascii=False, default=str)
        return TurnVerdict(Outcome.ERROR, clip(f"malformed response: {raw}"))
    for field in ("content", "reasoning_content"):
        text = _text(message.get(field))
        fragment = find_markup(text)
        if text and fragment:
            triage = triage_leak(text, tools)
            evidence = clip(text, at=text.find(fragment))
            return TurnVerdict(
                Outcome.LEAK,
                evidence,
                leak_form=triage.form,
                leak_family=triage.family,
                leak_parser=triage.source,
            )
    calls = message.get("tool_calls")
    if not calls:
        content = _text(message.get("content")) or ""
        return TurnVerdict(Outcome.NO_TOOL, clip(f"no tool call; content: {content}"))
    if not isinstance(calls, list):
        raw = json.dumps(calls, ensure_ascii=False, default=str)
        return TurnVerdict(Outcome.ERROR, clip(f"tool_calls is not a list: {raw}"))
    parsed_calls = []
    for call in calls:
        bad, parsed = _check_call(call, tools)
        if bad is not None:
            return bad
        parsed_calls.append(parsed)
    for parsed in parsed_calls:
        canary = parsed["arguments"].get("canary")
        if expected_canary is not None and canary != expected_canary:
            evidence = f"expected canary {expected_canary!r}, got {canary!r} in {parsed['name']}"
            args = json.dumps(parsed["arguments"], ensure_ascii=False)
            return TurnVerdict(Outcome.LOST_PLOT, clip(f"{evidence}: {args}"), parsed)
    return TurnVerdict(Outcome.OK, None, parsed_calls[0])
