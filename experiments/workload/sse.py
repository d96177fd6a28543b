"""Accumulate an OpenAI chat-completions SSE stream into one non-streaming ``chat.completion``.

The classifier judges whole messages; streaming only changes how the message arrives. Folding the
deltas back into the non-streaming shape lets one classifier serve both modes (FACTS.md: "in
streaming, accumulate ``delta.tool_calls`` by index and parse at the end"). Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any


class SSEError(ValueError):
    """A saved stream that cannot be read as chat-completion chunks."""


class _Call:
    """One tool call being assembled from its deltas (all carry the same ``index``)."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.type: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []

    def feed(self, delta: dict[str, Any]) -> None:
        # id/type/name arrive once (usually in the first delta); keep the first non-empty one
        # so a server repeating "" or null in later deltas does not erase it.
        if self.id is None:
            self.id = _str(delta.get("id"))
        if self.type is None:
            self.type = _str(delta.get("type"))
        function = delta.get("function")
        if isinstance(function, dict):
            if self.name is None:
                self.name = _str(function.get("name"))
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                self.arguments.append(arguments)

    def result(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type or "function",
            "function": {"name": self.name, "arguments": "".join(self.arguments)},
        }


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class StreamAccumulator:
    """Feed decoded ``data:`` chunks in order; ``result()`` is the equivalent chat.completion."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _Call] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.chunks = 0

    def feed(self, chunk: dict[str, Any]) -> bool:
        """Fold one chunk; True when it carried output (content, reasoning or tool-call
        pieces): what TTFT and inter-token latency are timed on."""
        self.chunks += 1
        if self.id is None:
            self.id = _str(chunk.get("id"))
        if self.model is None:
            self.model = _str(chunk.get("model"))
        if self.created is None and isinstance(chunk.get("created"), int):
            self.created = chunk["created"]
        # With stream_options.include_usage the last chunk has "choices": [] and the usage;
        # some servers also put usage on every chunk: the last non-null one wins.
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return False
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return False
        content, reasoning, calls = (delta.get("content"), delta.get("reasoning_content"),
                                     delta.get("tool_calls"))
        if isinstance(content, str):
            self.content.append(content)
        if isinstance(reasoning, str):
            self.reasoning.append(reasoning)
        for position, call in enumerate(calls or ()):
            if not isinstance(call, dict):
                continue
            # "index" is required by the protocol; fall back to the position for lax servers.
            index = call.get("index")
            key = index if isinstance(index, int) else position
            if key not in self.calls:
                self.calls[key] = _Call()
            self.calls[key].feed(call)
        return bool(content or reasoning or calls)

    def result(self) -> dict[str, Any]:
        content = "".join(self.content)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[key].result() for key in sorted(self.calls)]
            # Non-streaming responses carry null content next to tool calls.
            if not content:
                message["content"] = None
        completion: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }
        if self.created is not None:
            completion["created"] = self.created
        return completion


def iter_sse_data(text: str) -> list[tuple[int, str]]:
    """(line number, payload) of each ``data:`` event of a saved stream; ``[DONE]`` and
    comments dropped.

    Multi-line events (several ``data:`` lines before a blank line) are joined with newlines, as
    the SSE spec says; every chat-completions server sends one line per event anyway.
    """
    events: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            if current:
                events.append((start, "\n".join(current)))
                current = []
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive
        field, _, value = line.partition(":")
        if field != "data":
            continue  # event:, id:, retry: carry nothing we judge
        if not current:
            start = number
        current.append(value[1:] if value.startswith(" ") else value)
    if current:
        events.append((start, "\n".join(current)))
    return [(number, data) for number, data in events if data.strip() != "[DONE]"]


def parse_sse_text(text: str) -> dict[str, Any]:
    """A saved SSE stream folded into one chat.completion dict; SSEError when it is not one."""
    accumulator = StreamAccumulator()
    for number, payload in iter_sse_data(text):
        try:
            chunk = json.loads(payload)
        except ValueError as exc:
            raise SSEError(
                f"line {number}: data is not valid JSON ({exc}): {payload[:200]!r}"
            ) from exc
        if not isinstance(chunk, dict):
            raise SSEError(f"line {number}: data is not a JSON object: {payload[:200]!r}")
        accumulator.feed(chunk)
    if accumulator.chunks == 0:
        raise SSEError("no 'data:' events with a JSON chunk in the stream")
    return accumulator.result()
