"""The scripted tool-using agent: the contract between the stress workload and the twin.

A session is one conversation. Its first user message names the session (``session=KEY``) and
carries a canary (``canary=XYZ``). Every assistant turn must call one of the offered tools and
echo, in the ``canary`` argument, the canary of the latest user or tool message. Every tool result
the workload sends back carries a fresh canary. A real model instructed by ``SYSTEM_PROMPT`` does
the same, so the workload judges real servers and the twin by one rule.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import random

SYSTEM_PROMPT = (
    "You are an agent that works only through tools. On every turn call exactly one tool. "
    "Every tool takes a `canary` argument: pass the canary value from the most recent user "
    "message or tool result, verbatim. Never answer in plain text."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "canary": {"type": "string"}},
                "required": ["path", "canary"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_code",
            "description": "Search the repository for a pattern.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "canary": {"type": "string"}},
                "required": ["query", "canary"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite, or a part of it.",
            "parameters": {
                "type": "object",
                "properties": {"target": {"type": "string"}, "canary": {"type": "string"}},
                "required": ["target", "canary"],
            },
        },
    },
]

CANARY_RE = re.compile(r"canary=([A-Za-z0-9]+)")
SESSION_RE = re.compile(r"session=([A-Za-z0-9_.:-]+)")
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"  # string's would import it (a regex)


def new_canary(rng: random.Random) -> str:
    return "".join(rng.choices(_ALPHABET, k=10))


def first_user_message(session_key: str, canary: str) -> str:
    return (
        f"session={session_key} Investigate the failing build and fix it. "
        f"Start by calling a tool. canary={canary}"
    )


def tool_result_message(tool_name: str, canary: str, filler: str = "") -> str:
    return f"{tool_name} finished. {filler}canary={canary}".strip()


def find_canary(text: str) -> str | None:
    """The last canary in a message text, or None."""
    found = CANARY_RE.findall(text or "")
    return found[-1] if found else None


def find_session_key(text: str) -> str | None:
    match = SESSION_RE.search(text or "")
    return match.group(1) if match else None


def tool_by_name(tools: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    for tool in tools:
        if tool.get("function", {}).get("name") == name:
            return tool
    return None
