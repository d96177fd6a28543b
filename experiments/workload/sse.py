"""Accumulate an OpenAI chat-completions SSE stream into one non-streaming ``chat.completion``.

The classifier judges whole messages; streaming only changes how the message arrives. Folding the
deltas back into the non-streaming shape lets one classifier serve both modes (FACTS.md: "in
streaming, accumulate ``delta.tool_calls`` by index and parse at the end"). A chunk whose judged
fields have the wrong types is a broken reply (``reply.py`` draws the line): ``feed`` raises
BrokenReply as it meets one, checking while it folds (no second walk over every chunk). Pure: no
I/O.
"""

from __future__ import annotations

from typing import Any

from experiments.workload.reply import BrokenReply, decode_json, wrong


class SSEError(ValueError):
    """A saved stream that cannot be read as chat-completion chunks."""


class _Call:
    """One tool call being assembled from its deltas (all carry the same ``index``)."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.type: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []

    def feed(self, delta: dict[str, Any], position: int) -> None:
        """One delta of this call, ``delta.tool_calls[position]`` of its chunk."""
        # id/type/name arrive once (usually in the first delta); keep the first non-empty one
        # so a server repeating "" or null in later deltas does not erase it.
        get = delta.get
        if self.id is None:
            self.id = _call_str(get("id"), position, "id")
        if self.type is None:
            self.type = _call_str(get("type"), position, "type")
        function = get("function")
        if function is None:
            return
        if not isinstance(function, dict):
            raise BrokenReply(wrong(f"delta.tool_calls[{position}].function", function,
                                    "an object or null"))
        if self.name is None:
            self.name = _call_str(function.get("name"), position, "function.name")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            self.arguments.append(arguments)
        elif arguments is not None:
            raise BrokenReply(wrong(f"delta.tool_calls[{position}].function.arguments",
                                    arguments, "a string or null"))

    def result(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type or "function",
            "function": {"name": self.name, "arguments": "".join(self.arguments)},
        }


def _str(value: Any, where: str | None = None) -> str | None:
    """A non-empty string, else None; with ``where``, a value neither string nor null is a
    broken reply (id, model: fields nobody judges, are taken only when they are strings)."""
    if isinstance(value, str):
        return value or None
    if value is not None and where is not None:
        raise BrokenReply(wrong(where, value, "a string or null"))
    return None


def _call_str(value: Any, position: int, field: str) -> str | None:
    """``_str`` of a tool call's field, its location named only when it is wrong."""
    if isinstance(value, str):
        return value or None
    if value is not None:
        raise BrokenReply(wrong(f"delta.tool_calls[{position}].{field}", value,
                                "a string or null"))
    return None


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
        pieces): what TTFT and inter-token latency are timed on. BrokenReply when a judged field
        (choices, the first choice's delta, its content, reasoning and tool calls) has the wrong
        type; the stream is broken then, and what was folded of it is not judged.

        Run for every event of every stream (17 per reply against the harness's stub): written
        for speed (methods bound once, an error's location built only when raised)."""
        self.chunks += 1
        get = chunk.get
        if self.id is None:
            self.id = _str(get("id"))
        if self.model is None:
            self.model = _str(get("model"))
        if self.created is None and isinstance(created := get("created"), int):
            self.created = created
        # With stream_options.include_usage the last chunk has "choices": [] and the usage;
        # some servers also put usage on every chunk: the last non-null one wins.
        usage = get("usage")
        if usage is not None and isinstance(usage, dict):
            self.usage = usage
        choices = get("choices")
        if choices is None or choices == []:  # absent, null, or the usage chunk's []
            return False
        if not isinstance(choices, list):
            raise BrokenReply(wrong("choices", choices, "a list or null"))
        choice = choices[0]
        if not isinstance(choice, dict):
            raise BrokenReply(wrong("choices[0]", choice, "an object"))
        finish = choice.get("finish_reason")
        if finish:
            self.finish_reason = finish
        delta = choice.get("delta")
        if delta is None:
            return False
        if not isinstance(delta, dict):
            raise BrokenReply(wrong("choices[0].delta", delta, "an object or null"))
        get = delta.get
        content, reasoning, calls = get("content"), get("reasoning_content"), get("tool_calls")
        if content is not None:
            if not isinstance(content, str):
                raise BrokenReply(wrong("delta.content", content, "a string or null"))
            self.content.append(content)
        if reasoning is not None:
            if not isinstance(reasoning, str):
                raise BrokenReply(wrong("delta.reasoning_content", reasoning,
                                        "a string or null"))
            self.reasoning.append(reasoning)
        if calls is not None:
            if not isinstance(calls, list):
                raise BrokenReply(wrong("delta.tool_calls", calls, "a list or null"))
            folded = self.calls
            for position, call in enumerate(calls):
                if not isinstance(call, dict):
                    raise BrokenReply(wrong(f"delta.tool_calls[{position}]", call, "an object"))
                # "index" is required by the protocol; fall back to the position for lax
                # servers.
                index = call.get("index")
                if index is None:
                    index = position
                elif type(index) is not int:  # not bool either
                    raise BrokenReply(wrong(f"delta.tool_calls[{position}].index", index,
                                            "an integer"))
                assembling = folded.get(index)
                if assembling is None:
                    assembling = folded[index] = _Call()
                assembling.feed(call, position)
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
            chunk = decode_json(payload.encode("utf-8", "surrogatepass"), "data")
            if not isinstance(chunk, dict):
                raise BrokenReply(f"data is not a JSON object: {payload[:200]!r}")
            accumulator.feed(chunk)
        except BrokenReply as exc:
            raise SSEError(f"line {number}: {exc}") from None
    if accumulator.chunks == 0:
        raise SSEError("no 'data:' events with a JSON chunk in the stream")
    return accumulator.result()
