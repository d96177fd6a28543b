"""One chat request, streamed or not, timed like bench_serving.

``post_turn`` returns the completion as a non-streaming ``chat.completion`` dict (a stream is
folded back by ``sse.StreamAccumulator``), so one classifier judges both modes, or an ERROR /
TIMEOUT verdict with evidence. Either way it returns the request's metrics. Requests go through
``http_client.HttpClient`` (its docstring says why not aiohttp); JSON both ways through orjson.

A reply that breaks the protocol (not UTF-8, not standard JSON, the schema's types wrong:
``reply.py``) is an ERROR verdict with evidence, never a completion to judge; so is a redirect,
never followed (it names where it pointed). The timeout is one deadline on the whole request
(connect, head, body); the client bounds the response's size (``max_response_bytes``) and the
work of each read, so a flood ends at the deadline or the cap.
"""

from __future__ import annotations

import asyncio
import time
from itertools import pairwise
from typing import Any, Protocol

import orjson

from deploy.direct_http import is_redirect, redirect_reason
from experiments.outcomes import Outcome
from experiments.workload.classify import EVIDENCE_LIMIT, TurnVerdict, clip
from experiments.workload.http_client import HttpClient, Response
from experiments.workload.http_connection import HttpError
from experiments.workload.metrics import RequestMetrics
from experiments.workload.reply import BrokenReply, decode_json, json_problem
from experiments.workload.sse import StreamAccumulator

BODY_PREVIEW = 500
DRAIN_S = 1.0
Answer = dict[str, Any] | TurnVerdict


class BodyReader(Protocol):
    """What the SSE reader needs of a response (``http_client.Response`` has it)."""

    async def read_some(self) -> bytes: ...


def _usage(data: dict[str, Any]) -> tuple[int | None, int | None]:
    use = data.get("usage")
    if not isinstance(use, dict):
        return None, None

    def count(key: str) -> int | None:
        value = use.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return count("prompt_tokens"), count("completion_tokens")


def _text(data: bytes) -> str:
    """Bytes shown as evidence (never judged: judged text is decoded strictly)."""
    return data.decode("utf-8", "replace")


def _preview(body: bytes) -> str:
    """The start of a body as text, for evidence (4 bytes per character at most in UTF-8)."""
    return _text(body[:4 * BODY_PREVIEW])[:BODY_PREVIEW]


def _decode(body: bytes) -> Answer:
    try:
        data = decode_json(body, "the body")
    except BrokenReply as exc:
        return TurnVerdict(Outcome.ERROR,
                           clip(f"broken reply (HTTP 200): {exc}; body: {_preview(body)}"))
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
        if data[:1] != b"{" and data.strip() == b"[DONE]":
            self.done, self.done_at = True, time.perf_counter()
            return None
        try:
            chunk = orjson.loads(data)  # decode_json's reading, without its call per event
        except orjson.JSONDecodeError as exc:
            why = json_problem(data, exc, "its data")
            return TurnVerdict(Outcome.ERROR, clip(f"broken reply: SSE event {self.events}: {why}"))
        if not isinstance(chunk, dict):
            return TurnVerdict(Outcome.ERROR, clip(f"SSE event {self.events} is not an object: "
                                                   f"{_text(data)}"))
        if "error" in chunk and not chunk.get("choices"):  # SGLang reports mid-stream errors so
            return TurnVerdict(Outcome.ERROR, clip(f"error in stream: {_text(data)}"))
        try:
            if self.accumulator.feed(chunk):  # output: TTFT and ITL are timed on these
                self.output_at.append(time.perf_counter())
        except BrokenReply as exc:
            return TurnVerdict(Outcome.ERROR, clip(f"broken reply: SSE event {self.events}, "
                                                   f"{exc}: {_text(data)}"))
        return None

    async def read(self, response: BodyReader) -> TurnVerdict | None:
        """Feed the body's SSE events as they arrive, up to ``[DONE]``; ERROR if it never came.

        Events are cut at blank lines; the common one (a single ``data: `` line, no CR) goes
        straight to ``event``, any other block through the line rules of ``_line``. A CR
        anywhere sends the rest of the stream line by line (CRLF blank lines are not b"\\n\\n").
        Linear in the stream: a piece without a cut is kept aside, not copied into a growing
        buffer (one endless line would cost its length squared)."""
        partial: list[bytes] = []  # the tail after the last cut, in pieces
        pending: list[bytes] = []
        by_line = False
        while piece := await response.read_some():
            switched = not by_line and b"\r" in piece
            by_line = by_line or switched
            edge = partial[-1][-1:] if partial else b""  # a blank line may straddle pieces
            if not (switched or (b"\n" if by_line else b"\n\n") in piece
                    or (edge == b"\n" and piece.startswith(b"\n"))):
                partial.append(piece)
                continue
            buffer = b"".join([*partial, piece]) if partial else piece
            if by_line:
                *lines, rest = buffer.split(b"\n")
            else:
                *blocks, rest = buffer.split(b"\n\n")
                lines = []
                for block in blocks:
                    if block.startswith(b"data: ") and b"\n" not in block:
                        bad = self.event(block[6:])
                    else:
                        bad = self._lines([*block.split(b"\n"), b""], pending)
                    if bad is not None or self.done:
                        return bad
            partial[:] = [rest] if rest else []
            bad = self._lines(lines, pending)
            if bad is not None or self.done:
                return bad
        # at EOF: a last line without its newline ends its event
        bad = self._lines([*b"".join(partial).split(b"\n"), b""], pending)
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
        """Where a broken stream stood: evidence of what the server had sent (the start of its
        content: evidence is clipped to its start anyway, and a flood's whole would be MBs)."""
        shown, size = [], 0
        for piece in self.accumulator.content:
            if size >= EVIDENCE_LIMIT:
                break
            shown.append(piece)
            size += len(piece)
        return f" after {self.events} events; content so far: {''.join(shown)}"

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
            sent_at=self.sent,
        )


async def read_sse(body: BodyReader) -> Answer:
    """A whole SSE body read as ``post_turn`` reads a stream: the folded completion, or the
    ERROR verdict of a broken stream (for tools and the parsers' fuzzing)."""
    stream = _Stream(time.perf_counter())
    bad = await stream.read(body)
    return bad if bad is not None else stream.accumulator.result()


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
            said = _preview(await response.read())
            if is_redirect(response.status):  # never followed: traffic goes where it was sent
                why = redirect_reason(response.status, response.header("location") or None)
                return TurnVerdict(Outcome.ERROR, clip(f"{why}: {said}" if said else why))
            return TurnVerdict(Outcome.ERROR, f"HTTP {response.status}: {said}")
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
        return answer, RequestMetrics(turn, False, ended - sent, sent_at=sent)
    prompt, completion = _usage(answer)
    return answer, RequestMetrics(turn, True, ended - sent, ttft_s=ended - sent,
                                  prompt_tokens=prompt, completion_tokens=completion,
                                  sent_at=sent)
