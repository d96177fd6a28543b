"""Judge one saved response (``bisect classify``): a chat-completion JSON or a saved SSE stream.

The same judge as the stress workload (classify_turn), plus the leak triage spelled out, so a
person can paste one suspicious response and see what the harness would have called it.
"""

from __future__ import annotations

from typing import Any, Literal

from experiments.agent import find_canary
from experiments.markup import find_markup
from experiments.outcomes import is_corrupt
from experiments.workload.agent_tools import BUILT_IN, Agent, ToolsError, agent_from
from experiments.workload.classify import classify_turn
from experiments.workload.reply import BrokenReply, decode_json
from experiments.workload.sse import SSEError, StreamAccumulator, parse_sse_text
from experiments.workload.triage import triage_leak

Format = Literal["json", "sse"]
_SSE_STARTS = ("data:", ":", "event:", "id:", "retry:")


class SavedResponseError(ValueError):
    """Neither a chat completion JSON document nor an SSE stream of chunks."""


def load_response(text: str) -> tuple[dict[str, Any], Format]:
    """The chat.completion in ``text`` and the format it came in."""
    stripped = text.lstrip("\ufeff \t\r\n")
    if not stripped:
        raise SavedResponseError("empty input")
    if stripped.startswith(_SSE_STARTS):
        try:
            return parse_sse_text(stripped), "sse"
        except SSEError as exc:
            raise SavedResponseError(f"not a chat-completions SSE stream: {exc}") from None
    try:
        # As strict as the workload reads a live body: NaN or a lone surrogate is no JSON.
        document = decode_json(stripped.encode("utf-8", "surrogatepass"), "the input")
    except BrokenReply as exc:
        raise SavedResponseError(f"neither JSON nor an SSE stream (no 'data:' lines): {exc}"
                                 ) from None
    if not isinstance(document, dict):
        raise SavedResponseError(f"JSON is a {type(document).__name__}, not a chat completion")
    if document.get("object") == "chat.completion.chunk":
        # One streamed chunk saved on its own: fold it like a stream of one.
        accumulator = StreamAccumulator()
        try:
            accumulator.feed(document)
        except BrokenReply as exc:
            raise SavedResponseError(f"not a chat-completions chunk: {exc}") from None
        return accumulator.result(), "sse"
    return document, "json"


def _leaked_text(response: dict[str, Any]) -> str | None:
    """The message field that leaked, in classify_turn's order (content, then reasoning)."""
    message = response["choices"][0]["message"]
    for name in ("content", "reasoning_content"):
        value = message.get(name)
        text = value if isinstance(value, str) else None
        if find_markup(text):
            return text
    return None


def request_context(text: str) -> tuple[Agent, str | None]:
    """What a saved request body says of its response: the tools it offered (judged by the
    agent contract on them, as ``bisect stress --tools`` does) and the latest canary its
    messages carry (None when none does)."""
    try:
        agent = agent_from(text, None)
    except ToolsError as exc:
        raise SavedResponseError(f"the request: {exc}") from None
    document = decode_json(text.encode("utf-8", "surrogatepass"), "the request")
    messages = document.get("messages") if isinstance(document, dict) else None
    canaries = [find_canary(m["content"]) for m in messages or []
                if isinstance(m, dict) and m.get("role") in ("user", "tool")
                and isinstance(m.get("content"), str)]
    return agent, next((c for c in reversed(canaries) if c is not None), None)


def classify_saved(text: str, canary: str | None = None, agent: Agent = BUILT_IN
                   ) -> dict[str, Any]:
    """One JSON-able report: outcome, evidence and, for a leak, its triage. ``agent``: the
    tools the request offered (the built-in ones unless told)."""
    tools = agent.tools
    response, fmt = load_response(text)
    verdict = (classify_turn(response, None, tools) if canary is None
               else agent.judge(response, canary))
    report: dict[str, Any] = {
        "format": fmt,
        "outcome": str(verdict.outcome),
        "corrupt": is_corrupt(verdict.outcome),
        "evidence": verdict.evidence,
        "canary_checked": canary is not None,
        "tool_call": verdict.tool_call,
        "leak_form": verdict.leak_form,
        "family": verdict.leak_family,
        "source": verdict.leak_parser,
        "leak_label": verdict.leak_label,  # which --tool-call-parser parses it, or none
        "parsed_as": None,
        "leak_calls": None,
        "leak_reason": None,
    }
    leaked = _leaked_text(response) if verdict.leak_form else None
    if leaked is not None:
        # The calls SGLang's detector recovers (or why none): what the server should have sent.
        triage = triage_leak(leaked, tools)
        report["leak_calls"], report["leak_reason"] = triage.calls, triage.reason
        report["parsed_as"] = list(triage.parsed_as)
    return report
