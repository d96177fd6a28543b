"""One keep-alive connection of the load path's HTTP client (http_client.py) and the response
being received on it: an ``asyncio.Protocol`` whose bytes ``httptools`` (llhttp, as uvicorn
uses; it also undoes chunked encoding) parses, one wake-up of the reader per batch of bytes
received. Content-Length, chunked and read-to-EOF bodies; a 1xx response is skipped for the
real one that follows.

Bounded under floods: a response head over ``HEAD_LIMIT`` bytes or ``MAX_HEADERS`` lines, or a
response over ``max_response_bytes`` (head, framing and body as received; a Content-Length that
announces more fails at once) ends as ``HttpError`` and the connection is dropped. A connection
whose unread body passes ``HIGH_WATER`` stops reading from its socket until the caller catches up
(backpressure), and ``take`` hands out at most ``READ_MAX`` bytes per call.
"""

from __future__ import annotations

import asyncio
from typing import cast

import httptools

MAX_RESPONSE_BYTES = 8 << 20  # a 512-token answer streamed is ~150 KB; an 8 MiB one is no answer
HEAD_LIMIT = 64 << 10  # a status line and headers; llhttp itself sets no bound
MAX_HEADERS = 1000  # a server's reply has a dozen; thousands are a flood, never a reply
HIGH_WATER = 256 << 10  # unread body bytes at which the socket is paused
READ_MAX = 16 << 10  # bytes per read_some: about 0.3 ms of SSE parsing


class HttpError(Exception):
    """The exchange failed below HTTP: refused, reset, closed early, or not an HTTP response."""


class Connection(asyncio.Protocol):
    """One connection and the response being received on it (one at a time: no pipelining)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, registry: set[Connection],
                 limit: int = MAX_RESPONSE_BYTES) -> None:
        self.loop = loop
        self.open = registry  # the client's open connections: this one is in it while open
        self.limit = limit  # bytes one response may take, head and framing included
        self.paused = False  # reading from the socket paused: the caller is behind
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[None] | None = None
        self.lost = False
        self.busy = False
        self.idle_since = 0.0
        self.begin()

    def begin(self) -> None:
        """Ready for the next response."""
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.header_lines = 0
        self.body: list[bytes] = []
        self.buffered = 0  # bytes in body, not read yet
        self.received = 0  # bytes of this response so far (head, framing, body)
        self.started = self.head_done = self.complete = self.to_eof = self.keep_alive = False
        self.error: HttpError | None = None

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.open.add(self)

    def data_received(self, data: bytes) -> None:
        if not self.busy:  # bytes nobody asked for: the connection cannot be trusted again
            self.close()
            return
        self.started = True
        self.received += len(data)
        if self.received > self.limit:
            self._refuse(f"the response is over {self.limit} bytes (max_response_bytes)")
        else:
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError as exc:
                self.error = HttpError(f"malformed HTTP response: {exc}")
                self.close()
            if not self.head_done and self.received > HEAD_LIMIT:  # after the parse: a whole
                self._refuse(f"the response head is over {HEAD_LIMIT} bytes")  # reply may fit
            elif self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
                self.paused = True
                self.transport.pause_reading()
        self._wake()

    def _refuse(self, why: str) -> None:
        """End the response as an error: what it sent so far is dropped with the connection."""
        if self.error is None:
            self.error = HttpError(why)
        self.body.clear()
        self.buffered = 0
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.open.discard(self)
        if self.busy and not self.complete and self.error is None:
            if self.head_done and self.to_eof:  # the body was "everything up to the close"
                self.complete = True
            else:
                why = f": {exc}" if exc else ""
                where = "mid-response" if self.started else "before responding"
                self.error = HttpError(f"the server closed the connection {where}{why}")
        self._wake()

    # -- httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_lines += 1
        if self.header_lines > MAX_HEADERS:
            self._refuse(f"the response head has over {MAX_HEADERS} header lines")
        elif self.error is None:
            self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        if self.error is not None:  # refused mid-head: no response to hand out
            return
        self.status = self.parser.get_status_code()
        if self.status < 200:  # 100 Continue, 103 Early Hints: the real response follows
            return
        headers = self.headers
        announced = headers.get(b"content-length", b"")
        # (llhttp refuses a length past 64 bits; 19 digits are checked before int() reads them)
        if announced.isdigit() and (len(announced) > 19 or int(announced) > self.limit):
            self._refuse(f"the response announces {announced.decode()} bytes, over the "
                         f"{self.limit} of max_response_bytes")
            return
        self.to_eof = (b"content-length" not in headers
                       and b"chunked" not in headers.get(b"transfer-encoding", b"").lower()
                       and self.status >= 200 and self.status not in (204, 304))
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        if body and self.error is None:
            self.body.append(body)
            self.buffered += len(body)

    def on_message_complete(self) -> None:
        if self.error is not None:  # refused mid-parse: the message is not delivered
            return
        if self.status < 200:
            self.headers = {}
            return
        # llhttp resets its flags once the message is done: ask while they still hold.
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True

    # -- used by the client and the response

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until something arrives or the connection ends."""
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    async def exchange(self, request: bytes) -> None:
        """Send one request and wait for its status line and headers."""
        assert self.transport is not None
        self.begin()
        self.busy = True
        if self.lost or self.transport.is_closing():
            raise HttpError("the server closed the connection before responding")
        self.transport.write(request)
        while not self.head_done:
            if self.error is not None:
                raise self.error
            await self.wait()

    def take(self) -> bytes:
        """At most READ_MAX bytes of the unread body; reading resumes once the rest is low."""
        body = self.body
        if len(body) == 1 and len(body[0]) <= READ_MAX:
            data = body.pop()
        else:
            pieces, size = [], 0
            while body and size < READ_MAX:
                piece = body[0]
                room = READ_MAX - size
                if len(piece) > room:
                    pieces.append(piece[:room])
                    body[0] = piece[room:]
                    size = READ_MAX
                else:
                    pieces.append(body.pop(0))
                    size += len(piece)
            data = b"".join(pieces)
        self.buffered -= len(data)
        if self.paused and self.buffered <= HIGH_WATER // 2 and self.transport is not None:
            self.paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()
        return data

    def close(self) -> None:
        self.busy = False
        if self.transport is not None:
            self.transport.close()
