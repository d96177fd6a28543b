"""One chat request, streamed or not, timed like bench_serving.

``post_turn`` returns the completion as a non-streaming ``chat.completion`` dict (a stream is
folded back by ``sse.StreamAccumulator``), so one classifier judges both modes, or an ERROR /
TIMEOUT verdict with evidence. Either way it returns the request's metrics. Requests go through
``http_client.HttpClient`` (its docstring says why not aiohttp); JSON both ways through orjson.
"""

from __future__ import annotations

import asyncio
import json
import time
from itertools import pairwise
from typing import Any

import orjson

from experiments.outcomes import Outcome
from experiments.workload.classify import TurnVerdict, clip
from experiments.workload.http_client import HttpClient, HttpError, Response
from experiments.workload.metrics import RequestMetrics
from experiments.workload.sse import StreamAccumulator

BODY_PREVIEW = 500
DRAIN_S = 1.0
Answer = dict[str, Any] | TurnVerdict


def _usage(data: dict[str, Any]) -> tuple[int | None, int | None]:
    use = data.get("usage")
    if not isinstance(use, dict):
        return None, None

    def count(key: str) -> int | None:
        value = use.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return count("prompt_tokens"), count("completion_tokens")


def _loads(data: bytes) -> Any:
    """orjson, or the standard library for what orjson refuses but Python reads (invalid UTF-8
    is replaced, NaN, huge integers): the verdicts stay what they were with ``json.loads``."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(_text(data))


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _preview(body: bytes) -> str:
    """The start of a body as text, for evidence (4 bytes per character at most in UTF-8)."""
    return _text(body[:4 * BODY_PREVIEW])[:BODY_PREVIEW]


def _decode(body: bytes) -> Answer:
    try:
        data = _loads(body)
    except ValueError:
        return TurnVerdict(Outcome.ERROR, f"invalid JSON (HTTP 200): {_preview(body)}")
    if not isinstance(data, dict):
        return TurnVerdict(Outcome.ERROR, f"response is not a JSON object: {_preview(body)}")
    return data


class _Stream:
    """Reads SSE events as they arrive and folds them; records when output chunks came."""

    def __init__(self, sent: float) -> None:
        self.sent = sent
        self.accumulator = StreamAccumulator()
        self.output_at: list[float] = []
        self.events = 0
        self.done = False
        self.done_at: float | None = None

    def event(self, data: bytes) -> TurnVerdict | None:
        """One event's data; an ERROR verdict when it is not a chat-completion chunk."""
        self.events += 1
        if not data.startswith(b"{") and data.strip() == b"[DONE]":
            self.done, self.done_at = True, time.perf_counter()
            return None
        try:
            chunk = orjson.loads(data)  # _loads without its call: this runs for every event
        except orjson.JSONDecodeError:
            try:
                chunk = json.loads(_text(data))
            except ValueError:
                return TurnVerdict(Outcome.ERROR,
                                   clip(f"malformed SSE event {self.events}: {_text(data)}"))
        if not isinstance(chunk, dict):
            return TurnVerdict(Outcome.ERROR, clip(f"SSE event {self.events} is not an object: "
                                                   f"{_text(data)}"))
        if "error" in chunk and not chunk.get("choices"):  # SGLang reports mid-stream errors so
            return TurnVerdict(Outcome.ERROR, clip(f"error in stream: {_text(data)}"))
        try:
            if self.accumulator.feed(chunk):  # output: TTFT and ITL are timed on these
                self.output_at.append(time.perf_counter())
        except Exception as exc:  # any shape the accumulator cannot fold is a broken stream
            return TurnVerdict(Outcome.ERROR,
                               clip(f"unreadable SSE chunk ({exc!r}): {_text(data)}"))
        return None

    async def read(self, response: Response) -> TurnVerdict | None:
        """Feed the body's SSE events as they arrive, up to ``[DONE]``; ERROR if it never came.

        Events are cut at blank lines; the common one (a single ``data: `` line, no CR) goes
        straight to ``event``, any other block through the line rules of ``_line``. A CR
        anywhere sends the rest of the stream line by line (CRLF blank lines are not b"\\n\\n")."""
        buffer = b""
        pending: list[bytes] = []
        by_line = False
        while piece := await response.read_some():
            buffer += piece
            by_line = by_line or b"\r" in piece
            if by_line:
                *lines, buffer = buffer.split(b"\n")
            else:
                *blocks, buffer = buffer.split(b"\n\n")
                lines = []
                for block in blocks:
                    if block.startswith(b"data: ") and b"\n" not in block:
                        bad = self.event(block[6:])
                    else:
                        bad = self._lines([*block.split(b"\n"), b""], pending)
                    if bad is not None or self.done:
                        return bad
            bad = self._lines(lines, pending)
            if bad is not None or self.done:
                return bad
        # at EOF: a last line without its newline ends its event
        bad = self._lines([*buffer.split(b"\n"), b""], pending)
        if bad is not None or self.done:
            return bad
        return TurnVerdict(Outcome.ERROR, clip(f"stream ended before [DONE]{self.so_far()}"))

    def _lines(self, lines: list[bytes], pending: list[bytes]) -> TurnVerdict | None:
        for line in lines:
            bad = self._line(line, pending)
            if bad is not None or self.done:
                return bad
        return None

    def so_far(self) -> str:
        """Where a broken stream stood: evidence of what the server had sent."""
        return f" after {self.events} events; content so far: {''.join(self.accumulator.content)}"

    def _line(self, line: bytes, pending: list[bytes]) -> TurnVerdict | None:
        """One line: ``data:`` lines gather, a blank line dispatches the event (the SSE rule)."""
        if line.endswith(b"\r"):
            line = line[:-1]
        if line:
            field, _, value = line.partition(b":")
            if field == b"data":  # comments (":") and event:/id:/retry: carry nothing we judge
                pending.append(value[1:] if value.startswith(b" ") else value)
            return None
        if not pending:
            return None
        data = pending[0] if len(pending) == 1 else b"\n".join(pending)
        pending.clear()
        return self.event(data)

    def metrics(self, turn: int, ended: float, answer: Answer) -> RequestMetrics:
        at = self.output_at
        ended = self.done_at or ended  # not the wait for the body's end after [DONE]
        completed = not isinstance(answer, TurnVerdict)
        prompt, completion = _usage(answer) if isinstance(answer, dict) else (None, None)
        return RequestMetrics(
            turn=turn, completed=completed, e2e_s=ended - self.sent,
            ttft_s=at[0] - self.sent if at else None,
            itl_s=tuple(b - a for a, b in pairwise(at)),
            prompt_tokens=prompt, completion_tokens=completion, streamed=True,
        )


async def _drain(response: Response) -> None:
    """After ``[DONE]`` the body's last chunk is usually on its way: read it, so that the
    connection is pooled; after ``DRAIN_S`` (or a broken end) the connection is dropped."""
    try:
        async with asyncio.timeout(DRAIN_S):
            await response.read()
    except (TimeoutError, HttpError):
        pass


async def _exchange(http: HttpClient, endpoint: str, body: dict[str, Any],
                    stream: list[_Stream], sent: float) -> Answer:
    """The request and its answer; a stream being read is put in ``stream`` (for evidence)."""
    response = await http.request("POST", endpoint, orjson.dumps(body))
    try:
        if response.status != 200:
            return TurnVerdict(Outcome.ERROR,
                               f"HTTP {response.status}: {_preview(await response.read())}")
        kind = response.headers.get(b"content-type", b"")
        if body.get("stream") and kind.startswith(b"text/event-stream"):
            stream.append(_Stream(sent))
            bad = await stream[0].read(response)
            if bad is not None:
                return bad
            if not response.finished:
                await _drain(response)
            return stream[0].accumulator.result()
        # not streamed, or a server that ignored stream: true and sent JSON
        return _decode(await response.read())
    finally:
        response.close()  # unless read to its end: a stream stopped at [DONE] or by an error


async def post_turn(
    http: HttpClient, endpoint: str, body: dict[str, Any], *, turn: int, timeout_s: float,
) -> tuple[Answer, RequestMetrics]:
    """POST one request (``body["stream"]`` decides the mode); the answer and its metrics.

    Cancelling the calling task closes the request's connection (it is never pooled)."""
    sent = time.perf_counter()
    stream: list[_Stream] = []
    answer: Answer
    try:
        async with asyncio.timeout(timeout_s):
            answer = await _exchange(http, endpoint, body, stream, sent)
    except TimeoutError:
        where = stream[0].so_far() if stream else ""
        answer = TurnVerdict(Outcome.TIMEOUT,
                             clip(f"no complete response within {timeout_s:g} s{where}"))
    except HttpError as exc:
        where = stream[0].so_far() if stream else ""
        answer = TurnVerdict(Outcome.ERROR, clip(f"{exc}{where}"))
    ended = time.perf_counter()
    if stream:  # TTFT and ITL of what arrived, even when the stream then broke
        return answer, stream[0].metrics(turn, ended, answer)
    if isinstance(answer, TurnVerdict):
        return answer, RequestMetrics(turn, False, ended - sent)
    prompt, completion = _usage(answer)
    return answer, RequestMetrics(turn, True, ended - sent, ttft_s=ended - sent,
                                  prompt_tokens=prompt, completion_tokens=completion)
