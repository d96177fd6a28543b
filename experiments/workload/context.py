"""Seeded filler text, and how much of it each request needs for the context to grow on plan.

A token is taken as ~4 characters (the same rule the twin uses for ``usage``). The context of a
request is what a model reads of its messages: every message's text plus its tool calls' names
and arguments; template and tool-schema overhead are left out.
"""

from __future__ import annotations

import random
from typing import Any

from experiments.workload.spec import WorkloadSpec

CHARS_PER_TOKEN = 4
_FILLER_TEXT = (
    "build log trace stack frame module import error warning retry cache buffer kernel thread "
    "queue worker socket request response header payload token batch shard replica index key "
    "value commit branch merge patch diff config flag option default timeout deadline latency"
)
# No word holds "=" so filler never forges a canary= or session= marker (experiments/agent.py).
FILLER_WORDS: tuple[str, ...] = tuple(_FILLER_TEXT.split(" "))
_MEAN_WORD = sum(len(w) + 1 for w in FILLER_WORDS) / len(FILLER_WORDS)


def filler(rng: random.Random, words: int) -> str:
    """``words`` seeded filler words and a trailing space, or "" (see tool_result_message)."""
    return " ".join(rng.choices(FILLER_WORDS, k=words)) + " " if words > 0 else ""


def filler_chars(rng: random.Random, chars: int) -> str:
    """Seeded filler of exactly ``chars`` characters ending in a space, or "" for chars <= 0."""
    if chars <= 0:
        return ""
    parts: list[str] = []
    size = 0
    while size < chars:
        words = rng.choices(FILLER_WORDS, k=int(chars / _MEAN_WORD) + 8)
        parts.append(" ".join(words) + " ")
        size += len(parts[-1])
    return "".join(parts)[: chars - 1] + " "


def context_chars(messages: list[dict[str, Any]]) -> int:
    """Characters of the conversation a model reads (see the module docstring)."""
    total = 0
    for message in messages:
        content = message.get("content")
        total += len(content) if isinstance(content, str) else 0
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += len(str(function.get("name") or "")) + len(str(function.get("arguments")
                                                                     or ""))
    return total


def target_chars(spec: WorkloadSpec, turn: int) -> int | None:
    """The context of request ``turn`` (1-based) on the linear plan, or None without one.

    With one round the only request carries ``end_tokens``: the plan is there to reach it.
    """
    growth = spec.context
    if growth is None:
        return None
    share = (turn - 1) / (spec.rounds - 1) if spec.rounds > 1 else 1.0
    tokens = growth.start_tokens + (growth.end_tokens - growth.start_tokens) * share
    return round(tokens * CHARS_PER_TOKEN)
