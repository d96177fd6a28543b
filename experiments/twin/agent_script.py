"""The scripted agent (contract: experiments/agent.py) and how a fault bends its reply.

Turn ``t`` (the number of assistant messages so far) calls ``tools[t % len(tools)]`` with every
required parameter filled and ``canary`` set to the canary of the last user or tool message.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from experiments import agent
from experiments.markup import MarkupFamily, render
from experiments.twin.faults import Decision, Effect

PARSER_FAMILY = {
    "deepseekv3": MarkupFamily.V31,
    "deepseekv31": MarkupFamily.V31,
    "deepseekv32": MarkupFamily.DSML,
    "deepseekv4": MarkupFamily.V4,
}
PLAIN_TEXT = "I looked at the build output; nothing else to do for now."
_PLAUSIBLE = {"path": "src/app/main.py", "query": "def build", "target": "tests/unit"}
_TYPED_DEFAULTS: dict[str, Any] = {
    "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {},
}


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON string, as OpenAI sends it (possibly broken by bad_args)


@dataclass(frozen=True)
class Reply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def text_of(content: Any) -> str:
    """Message content as text: a string or a list of OpenAI content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def session_key(messages: list[dict[str, Any]]) -> str:
    first = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
    key = agent.find_session_key(first)
    return key or "h:" + hashlib.sha256(first.encode()).hexdigest()[:16]


def _last_canary(messages: list[dict[str, Any]]) -> str | None:
    for message in reversed(messages):
        if message.get("role") in ("user", "tool"):
            return agent.find_canary(text_of(message.get("content")))
    return None


def _pick_tool(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: Any
) -> dict[str, Any] | None:
    if not tools or tool_choice == "none":
        return None
    if isinstance(tool_choice, dict):
        forced = agent.tool_by_name(tools, tool_choice.get("function", {}).get("name", ""))
        if forced is not None:
            return forced
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    return tools[turn % len(tools)]


def _arguments(tool: dict[str, Any], canary: str | None) -> dict[str, Any]:
    parameters = tool.get("function", {}).get("parameters") or {}
    properties = parameters.get("properties") or {}
    arguments: dict[str, Any] = {}
    for name in parameters.get("required") or []:
        kind = (properties.get(name) or {}).get("type", "string")
        arguments[name] = _TYPED_DEFAULTS.get(kind, _PLAUSIBLE.get(name, f"{name}-value"))
    if canary is not None:
        arguments["canary"] = canary
    return arguments


def _wrong_canary(canary: str | None) -> str:
    digest = hashlib.sha256(f"lost:{canary}".encode()).hexdigest().upper()[:10]
    return digest if digest != canary else digest[::-1] + "X"


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def build_reply(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tool_choice: Any,
    decision: Decision | None,
    parser: str,
) -> Reply:
    """The assistant message; ``error`` and ``wedge`` are the server's business, not the reply's."""
    tool = _pick_tool(messages, tools, tool_choice)
    effect = decision.effect if decision else None
    if tool is None or effect is Effect.NO_TOOL:
        return Reply(content=PLAIN_TEXT)
    name = str(tool["function"]["name"])
    canary = _last_canary(messages)
    if effect is Effect.LOST_PLOT:
        canary = _wrong_canary(canary)
    arguments = _arguments(tool, canary)
    if effect is Effect.LEAK:
        assert decision is not None
        family = decision.markup or PARSER_FAMILY[parser]
        # What the parser hands back when it fails to parse: the raw text, no calls.
        return Reply(content=render(family, name, arguments))
    text = json.dumps(arguments)
    if effect is Effect.BAD_ARGS:
        text = text[: max(1, len(text) // 2)]
    return Reply(content=None, tool_calls=[ToolCall(_call_id(), name, text)])


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token) for usage and metrics."""
    return max(1, len(text) // 4)
