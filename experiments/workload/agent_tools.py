"""A user's own tools and system prompt for the stress workload (``bisect stress --tools FILE
--system-prompt FILE``), and the canary contract (experiments/agent.py) on them.

The contract: every assistant turn calls a tool and echoes, verbatim, the canary of the latest
user message or tool result; a call that carries an older canary, or none, is ``lost_plot``. On
the built-in tools the canary rides in their ``canary`` argument. A user's tool is sent exactly
as given (its schema is what the server's parser and any grammar see), so the canary rides in
its ``canary`` argument where it has one and otherwise in any of its top-level string
arguments: the call is on the plot when one of them contains the canary. A tool without a
string argument cannot carry it: its calls are judged on everything but the canary (a file in
which no tool has one is refused). ``CANARY_RULE`` is appended to the system prompt, the user's
own or the built-in one, so that a real model knows the rule; the tool results the workload
sends back each carry a fresh ``canary=...``, whatever the tool.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from experiments.agent import SYSTEM_PROMPT, TOOLS
from experiments.outcomes import Outcome
from experiments.workload.classify import TurnVerdict, classify_turn, clip
from experiments.workload.reply import shown

CANARY_RULE = (
    "Every tool call must carry, verbatim, the canary value (the text after `canary=`) of the "
    "most recent user message or tool result: in the tool's `canary` argument where it has "
    "one, otherwise inside one of its string arguments."
)


class ToolsError(ValueError):
    """A tools file or system prompt the workload cannot use; the message says why."""


@dataclass(frozen=True)
class Agent:
    """What each session sends (system prompt, tools) and how its calls are judged."""

    tools: list[dict[str, Any]]
    system_prompt: str
    # Tools whose calls carry the canary in a string argument (no `canary` argument of their
    # own): judged by ``judge`` after classify_turn; empty for the built-in tools.
    loose: frozenset[str] = frozenset()
    unchecked: frozenset[str] = frozenset()  # tools without a string argument

    def judge(self, response: dict[str, Any], canary: str) -> TurnVerdict:
        """``classify_turn``, with the canary looked for where each tool carries it."""
        if not self.loose and not self.unchecked:
            return classify_turn(response, canary, self.tools)
        verdict = classify_turn(response, None, self.tools)
        if verdict.outcome is not Outcome.OK:
            return verdict
        for call in response["choices"][0]["message"]["tool_calls"]:
            function = call["function"]
            name = function["name"]
            if name in self.unchecked:
                continue
            arguments = orjson.loads(function["arguments"])  # a JSON object: classify_turn said so
            if name in self.loose:
                found = any(isinstance(v, str) and canary in v for v in arguments.values())
                where = "a string argument"
            else:
                found = arguments.get("canary") == canary
                where = "its canary argument"
            if not found:
                return TurnVerdict(Outcome.LOST_PLOT, clip(
                    f"expected canary {canary!r} in {where} of {name}: {shown(arguments)}"),
                    {"id": call["id"], "name": name, "arguments": arguments})
        return verdict


BUILT_IN = Agent(TOOLS, SYSTEM_PROMPT)


def _string_typed(schema: Any) -> bool:
    kind = schema.get("type") if isinstance(schema, dict) else None
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def _tool(item: Any, number: int) -> dict[str, Any]:
    """One tool as OpenAI's ``tools`` list holds it; a bare function object is wrapped."""
    if isinstance(item, dict) and "function" not in item and "name" in item:
        item = {"type": "function", "function": item}
    function = item.get("function") if isinstance(item, dict) else None
    if not isinstance(function, dict) or item.get("type", "function") != "function":
        raise ToolsError(f"tool {number} is not {{\"type\": \"function\", \"function\": {{...}}}}")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ToolsError(f"tool {number} has no function name")
    parameters = function.get("parameters", {})
    if not isinstance(parameters, dict) or not isinstance(parameters.get("properties", {}), dict):
        raise ToolsError(f"tool {name!r}: parameters must be a JSON schema object")
    return item


def agent_from(tools_text: str | None, prompt_text: str | None) -> Agent:
    """The agent of a run: the user's tools (a JSON list of tools, or an object with a ``tools``
    list, as a saved request body has) and system prompt, each defaulting to the built-in."""
    prompt = SYSTEM_PROMPT if prompt_text is None else prompt_text.strip()
    if not prompt:
        raise ToolsError("the system prompt is empty")
    if tools_text is None:
        if prompt_text is None:
            return BUILT_IN
        return Agent(TOOLS, f"{prompt}\n\n{CANARY_RULE}")
    try:
        document = orjson.loads(tools_text)
    except orjson.JSONDecodeError as exc:
        raise ToolsError(f"not JSON: {exc}") from None
    items = document.get("tools") if isinstance(document, dict) else document
    if not isinstance(items, list) or not items:
        raise ToolsError("expected a non-empty JSON list of tools (or an object with one under "
                         "\"tools\")")
    tools = [_tool(item, number) for number, item in enumerate(items)]
    names = [tool["function"]["name"] for tool in tools]
    if len(set(names)) < len(names):
        raise ToolsError(f"two tools are named {next(n for n in names if names.count(n) > 1)!r}")
    loose, unchecked = set(), set()
    for tool, name in zip(tools, names, strict=True):
        properties = tool["function"].get("parameters", {}).get("properties", {})
        if _string_typed(properties.get("canary")):
            continue
        if any(_string_typed(schema) for schema in properties.values()):
            loose.add(name)
        else:
            unchecked.add(name)
    if len(unchecked) == len(tools):
        raise ToolsError("no tool has a string argument to carry the canary: every call would "
                         "go unchecked (add one, e.g. \"canary\": {\"type\": \"string\"})")
    return Agent(tools, f"{prompt}\n\n{CANARY_RULE}", frozenset(loose), frozenset(unchecked))


def load_agent(tools: Path | None, system_prompt: Path | None) -> Agent:
    """``agent_from`` the files; ``ToolsError`` naming the file that cannot be used."""

    def read(path: Path | None) -> str | None:
        try:
            return None if path is None else path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or type(exc).__name__
            raise ToolsError(f"{path}: cannot read it: {why}") from None

    prompt = read(system_prompt)
    if prompt is not None and not prompt.strip():
        raise ToolsError(f"{system_prompt}: the system prompt is empty")
    try:
        return agent_from(read(tools), prompt)
    except ToolsError as exc:
        if str(exc).startswith(f"{tools}: "):
            raise
        raise ToolsError(f"{tools}: {exc}") from None
