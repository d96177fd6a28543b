"""Judge one assistant turn by the agent contract (experiments/agent.py). Pure: no I/O.

A reply that breaks the protocol (``reply.completion_problem``: the types the server's code
builds) is ``error``; only a well-formed reply is judged for corruption. ``reply.py`` says where
the line between the two runs, and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from experiments.agent import tool_by_name
from experiments.markup import find_markup
from experiments.outcomes import Outcome
from experiments.workload.reply import completion_problem, shown
from experiments.workload.triage import triage_leak

EVIDENCE_LIMIT = 2000


@dataclass(frozen=True)
class TurnVerdict:
    outcome: Outcome
    evidence: str | None = None
    # The first call, as {"id", "name", "arguments": dict} when its arguments parsed.
    tool_call: dict[str, Any] | None = None
    # LEAK only (experiments/workload/triage.py): "well_formed" (the server's parser failed on
    # markup SGLang's detector parses), "parser_mismatch" (another --tool-call-parser than the
    # server's parses it) or "malformed" (the model broke it); the markup family; which parser
    # judged: "sglang" (its detectors) or "builtin" (the fallback); and the triage's one line.
    leak_form: str | None = None
    leak_family: str | None = None
    leak_parser: str | None = None
    leak_label: str | None = None


def clip(text: str, limit: int = EVIDENCE_LIMIT, at: int = 0) -> str:
    """At most ``limit`` characters of ``text``, keeping position ``at`` in view."""
    if len(text) <= limit:
        return text
    start = max(0, min(at - limit // 4, len(text) - limit))
    return text[start : start + limit]


def _check_call(
    call: dict[str, Any], tools: list[dict[str, Any]]
) -> tuple[TurnVerdict | None, dict[str, Any]]:
    """A BAD_ARGS verdict for a call the model got wrong, else (None, parsed call). The call's
    shape (string id, name and arguments) was checked by ``completion_problem``."""
    raw = clip(shown(call))
    function = call["function"]
    name, arguments = function["name"], function["arguments"]
    tool = tool_by_name(tools, name)
    if tool is None:
        return TurnVerdict(Outcome.BAD_ARGS, clip(f"unknown function {name!r}: {raw}")), {}
    try:
        parsed = orjson.loads(arguments)  # as strict as the reply's own JSON (reply.decode_json)
    except orjson.JSONDecodeError:
        return TurnVerdict(Outcome.BAD_ARGS, clip(f"arguments are not valid JSON: {raw}")), {}
    if not isinstance(parsed, dict):
        return TurnVerdict(Outcome.BAD_ARGS, clip(f"arguments are not a JSON object: {raw}")), {}
    schema = tool["function"].get("parameters", {})
    missing = [key for key in schema.get("required", []) if key not in parsed]
    if missing:
        return TurnVerdict(Outcome.BAD_ARGS, clip(f"missing {missing} in {name}: {raw}")), {}
    for key, prop in schema.get("properties", {}).items():
        if prop.get("type") == "string" and key in parsed and not isinstance(parsed[key], str):
            return TurnVerdict(Outcome.BAD_ARGS, clip(f"{name}.{key} is not a string: {raw}")), {}
    return None, {"id": call["id"], "name": name, "arguments": parsed}


def classify_turn(
    response: dict[str, Any], expected_canary: str | None, tools: list[dict[str, Any]]
) -> TurnVerdict:
    """One non-streaming chat completion judged: leak, no_tool, bad_args, lost_plot, ok, error.
    ``expected_canary`` None skips the canary check (a saved response judged on its own). A
    leak is triaged against the server's parser that ``triage.serving`` set, if any."""
    problem = completion_problem(response)
    if problem is not None:
        raw = shown(response)
        return TurnVerdict(Outcome.ERROR, clip(f"broken reply: {problem}: {raw}"))
    message = response["choices"][0]["message"]
    for field in ("content", "reasoning_content"):
        text = message.get(field)
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
                leak_label=triage.label,
            )
    calls = message.get("tool_calls")
    if not calls:
        content = message.get("content") or ""
        return TurnVerdict(Outcome.NO_TOOL, clip(f"no tool call; content: {content}"))
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
            args = shown(parsed["arguments"])
            return TurnVerdict(Outcome.LOST_PLOT, clip(f"{evidence}: {args}"), parsed)
    return TurnVerdict(Outcome.OK, None, parsed_calls[0])
