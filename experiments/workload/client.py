"""One chat request over aiohttp, streamed or not, timed like bench_serving.

``post_turn`` returns the completion as a non-streaming ``chat.completion`` dict (a stream is
folded back by ``sse.StreamAccumulator``), so one classifier judges both modes, or an ERROR /
TIMEOUT verdict with evidence. Either way it returns the request's metrics.
"""

from __future__ import annotations

import json
import time
from itertools import pairwise
from typing import Any

import aiohttp

from experiments.outcomes import Outcome
from experiments.workload.classify import TurnVerdict, clip
from experiments.workload.metrics import RequestMetrics
from experiments.workload.sse import StreamAccumulator

BODY_PREVIEW = 500
Answer = dict[str, Any] | TurnVerdict


def _usage(data: dict[str, Any]) -> tuple[int | None, int | None]:
    use = data.get("usage")
    if not isinstance(use, dict):
        return None, None

    def count(key: str) -> int | None:
        value = use.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return count("prompt_tokens"), count("completion_tokens")


def _decode(text: str) -> Answer:
    try:
        data = json.loads(text)
    except ValueError:
        return TurnVerdict(Outcome.ERROR, f"invalid JSON (HTTP 200): {text[:BODY_PREVIEW]}")
    if not isinstance(data, dict):
        return TurnVerdict(Outcome.ERROR, f"response is not a JSON object: {text[:BODY_PREVIEW]}")
    return data


def _has_output(chunk: dict[str, Any]) -> bool:
    """A chunk carrying generated text or tool-call pieces: what TTFT and ITL are timed on."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta")
    if not isinstance(delta, dict):
        return False
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))


class _Stream:
    """Reads SSE events as they arrive and folds them; records when output chunks came."""

    def __init__(self, sent: float) -> None:
        self.sent = sent
        self.accumulator = StreamAccumulator()
        self.output_at: list[float] = []
        self.events = 0
        self.done = False

    def event(self, data: str) -> TurnVerdict | None:
        """One event's data; an ERROR verdict when it is not a chat-completion chunk."""
        self.events += 1
        if data.strip() == "[DONE]":
            self.done = True
            return None
        try:
            chunk = json.loads(data)
        except ValueError:
            return TurnVerdict(Outcome.ERROR, clip(f"malformed SSE event {self.events}: {data}"))
        if not isinstance(chunk, dict):
            return TurnVerdict(Outcome.ERROR, clip(f"SSE event {self.events} is not an object: "
                                                   f"{data}"))
        if "error" in chunk and not chunk.get("choices"):  # SGLang reports mid-stream errors so
            return TurnVerdict(Outcome.ERROR, clip(f"error in stream: {data}"))
        if _has_output(chunk):
            self.output_at.append(time.perf_counter())
        try:
            self.accumulator.feed(chunk)
        except Exception as exc:  # any shape the accumulator cannot fold is a broken stream
            return TurnVerdict(Outcome.ERROR, clip(f"unreadable SSE chunk ({exc!r}): {data}"))
        return None

    async def read(self, response: aiohttp.ClientResponse) -> TurnVerdict | None:
        """Feed the body's SSE events as they arrive, up to ``[DONE]``; ERROR if it never came."""
        buffer = b""
        pending: list[str] = []
        async for piece in response.content.iter_any():
            *lines, buffer = (buffer + piece).split(b"\n")
            for raw in lines:
                bad = self._line(raw, pending)
                if bad is not None or self.done:
                    return bad
        for raw in (buffer, b""):  # at EOF: a last line without its newline ends its event
            bad = self._line(raw, pending)
            if bad is not None or self.done:
                return bad
        return TurnVerdict(Outcome.ERROR, clip(f"stream ended before [DONE]{self.so_far()}"))

    def so_far(self) -> str:
        """Where a broken stream stood: evidence of what the server had sent."""
        return f" after {self.events} events; content so far: {''.join(self.accumulator.content)}"

    def _line(self, raw: bytes, pending: list[str]) -> TurnVerdict | None:
        """One line: ``data:`` lines gather, a blank line dispatches the event (the SSE rule)."""
        line = raw.rstrip(b"\r").decode("utf-8", "replace")
        if line:
            field, _, value = line.partition(":")
            if field == "data":  # comments (":") and event:/id:/retry: carry nothing we judge
                pending.append(value.removeprefix(" "))
            return None
        if not pending:
            return None
        data = "\n".join(pending)
        pending.clear()
        return self.event(data)

    def metrics(self, turn: int, ended: float, answer: Answer) -> RequestMetrics:
        at = self.output_at
        completed = not isinstance(answer, TurnVerdict)
        prompt, completion = _usage(answer) if isinstance(answer, dict) else (None, None)
        return RequestMetrics(
            turn=turn, completed=completed, e2e_s=ended - self.sent,
            ttft_s=at[0] - self.sent if at else None,
            itl_s=tuple(b - a for a, b in pairwise(at)),
            prompt_tokens=prompt, completion_tokens=completion, streamed=True,
        )


async def _error_body(response: aiohttp.ClientResponse) -> TurnVerdict:
    text = (await response.read()).decode("utf-8", "replace")
    return TurnVerdict(Outcome.ERROR, f"HTTP {response.status}: {text[:BODY_PREVIEW]}")


async def post_turn(
    http: aiohttp.ClientSession, endpoint: str, body: dict[str, Any], *, turn: int,
    timeout_s: float,
) -> tuple[Answer, RequestMetrics]:
    """POST one request (``body["stream"]`` decides the mode); the answer and its metrics."""
    sent = time.perf_counter()
    stream: _Stream | None = None
    answer: Answer
    try:
        async with http.post(endpoint, json=body) as response:
            kind = response.headers.get("Content-Type", "")
            if response.status != 200:
                answer = await _error_body(response)
            elif body.get("stream") and kind.startswith("text/event-stream"):
                stream = _Stream(sent)
                bad = await stream.read(response)
                answer = stream.accumulator.result() if bad is None else bad
            else:  # not streamed, or a server that ignored stream: true and sent JSON
                answer = _decode((await response.read()).decode("utf-8", "replace"))
    except TimeoutError:
        where = stream.so_far() if stream is not None else ""
        answer = TurnVerdict(Outcome.TIMEOUT,
                             clip(f"no complete response within {timeout_s:g} s{where}"))
    except aiohttp.ClientError as exc:
        where = stream.so_far() if stream is not None else ""
        answer = TurnVerdict(Outcome.ERROR, clip(f"{type(exc).__name__}: {exc}{where}"))
    ended = time.perf_counter()
    if stream is not None:  # TTFT and ITL of what arrived, even when the stream then broke
        return answer, stream.metrics(turn, ended, answer)
    if isinstance(answer, TurnVerdict):
        return answer, RequestMetrics(turn, False, ended - sent)
    prompt, completion = _usage(answer)
    return answer, RequestMetrics(turn, True, ended - sent, ttft_s=ended - sent,
                                  prompt_tokens=prompt, completion_tokens=completion)
