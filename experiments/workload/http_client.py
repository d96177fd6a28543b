"""A lean HTTP/1.1 keep-alive client: the stress workload's load path.

Why not aiohttp here: over aiohttp, ``run_stress`` cost what a bare aiohttp client costs per
request, most of it in aiohttp's request/response machinery (the figures: BENCHMARKS.md, "Stress
harness"). The load generator must cost far less than the server it stresses, so this module does
only what the workload needs: an ``asyncio.Protocol`` per connection, responses parsed by
``httptools`` (llhttp, as uvicorn uses; it also undoes chunked encoding), one write per request,
and one wake-up of the reader per batch of bytes received. aiohttp stays for the twin and the
metric collector.

What it does: a pool of keep-alive connections per origin (a request on a pooled connection that
the server had closed before any response byte is retried once on a fresh one; a connection idle
for ``idle_s`` is closed instead of reused, before uvicorn's 5 s keep-alive timeout can race the
request); ``Connection: close``,
HTTP/1.0 and read-to-EOF bodies, Content-Length and chunked bodies; http and https (the default
SSL context unless one is given). Timeouts and cancellation belong to the caller: a response not
read to its end is closed, never pooled. Transport failures raise ``HttpError`` with a sentence.

Bounded under floods: a response head over ``HEAD_LIMIT`` bytes or ``MAX_HEADERS`` lines, or a
response over ``max_response_bytes`` (head, framing and body as received; a Content-Length that
announces more fails at once) ends as ``HttpError`` and the connection is dropped. A connection
whose unread body passes ``HIGH_WATER`` stops reading from its socket until the caller catches up
(backpressure), and ``read_some`` hands out at most ``READ_MAX`` bytes per call, yielding to the
loop between slices: no flood makes one step of a reader long enough to hold back everyone
else's timeouts. A redirect is a response like any other: never followed.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping
from typing import NamedTuple, cast
from urllib.parse import urlsplit

import httptools

IDLE_S = 4.0  # below uvicorn's 5 s keep-alive timeout: its idle close never meets our request
MAX_RESPONSE_BYTES = 8 << 20  # a 512-token answer streamed is ~150 KB; an 8 MiB one is no answer
HEAD_LIMIT = 64 << 10  # a status line and headers; llhttp itself sets no bound
MAX_HEADERS = 1000  # a server's reply has a dozen; thousands are a flood, never a reply
HIGH_WATER = 256 << 10  # unread body bytes at which the socket is paused
READ_MAX = 16 << 10  # bytes per read_some: about 0.3 ms of SSE parsing


class HttpError(Exception):
    """The exchange failed below HTTP: refused, reset, closed early, or not an HTTP response."""


def bearer(api_key: str | None) -> dict[str, str]:
    """The ``Authorization`` header of an endpoint's API key (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def header_lines(headers: Mapping[str, str]) -> bytes:
    """Request header lines; a name or value that would split the request is refused (the
    value is not shown: it may be a key)."""
    lines = b""
    for name, value in headers.items():
        if not name.isascii() or not name.replace("-", "").isalnum():
            raise ValueError(f"{name!r} is not an HTTP header name")
        if not value.isascii() or not value.isprintable():  # CR, LF, NUL: a split request
            raise ValueError(f"the value of the {name} header has characters HTTP does not "
                             "allow in a header")
        lines += f"{name}: {value}\r\n".encode()
    return lines


class _Origin(NamedTuple):
    key: tuple[str, str, int]
    host: str
    port: int
    tls: bool
    host_header: bytes
    target: bytes  # path and query


class _Connection(asyncio.Protocol):
    """One connection and the response being received on it (one at a time: no pipelining)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, registry: set[_Connection],
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


class Response:
    """Status, headers (lower-case names) and the body as it arrives; pooled once read."""

    __slots__ = ("_client", "_conn", "_key", "headers", "status")

    def __init__(self, client: HttpClient, key: tuple[str, str, int], conn: _Connection) -> None:
        self._client, self._key = client, key
        self._conn: _Connection | None = conn
        self.status = conn.status
        self.headers = conn.headers

    @property
    def finished(self) -> bool:
        """The body was read to its end (the connection is back in the pool, or closed)."""
        return self._conn is None

    @property
    def unread(self) -> int:
        """Body bytes received and not read yet: at most HIGH_WATER plus one socket read."""
        return self._conn.buffered if self._conn is not None else 0

    @property
    def reading(self) -> bool:
        """The socket is being read (False while the caller is behind: backpressure)."""
        return self._conn is not None and not self._conn.paused

    def header(self, name: str) -> str:
        return self.headers.get(name.lower().encode(), b"").decode("latin-1")

    async def read_some(self) -> bytes:
        """Body bytes received since the last call (at most READ_MAX), waiting for some; b""
        at the end. With more already waiting, it lets the loop run first (a flood's reader
        must not hold the loop, nor every other request's timeout, for a whole buffer)."""
        conn = self._conn
        if conn is None:
            return b""
        while not conn.body and not conn.complete:
            if conn.error is not None:
                raise conn.error
            await conn.wait()
        if conn.error is not None and not conn.body:
            raise conn.error
        data = conn.take()
        if conn.body:
            await asyncio.sleep(0)
        elif conn.complete:
            self._conn = None
            self._client._release(self._key, conn)
        return data

    async def read(self) -> bytes:
        """The rest of the body."""
        pieces = []
        while piece := await self.read_some():
            pieces.append(piece)
        return b"".join(pieces)

    def close(self) -> None:
        """Drop the connection unless the body was read to its end (then it is pooled)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class HttpClient:
    """Keep-alive connections per origin; ``await request(...)`` returns a ``Response`` whose
    body the caller reads (or ``close()``s)."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None, idle_s: float = IDLE_S,
                 user_agent: str = "bisect", headers: Mapping[str, str] | None = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.ssl_context = ssl_context
        self.idle_s = idle_s
        self.max_response_bytes = max_response_bytes
        self.user_agent = user_agent.encode()
        self.extra_headers = header_lines(headers or {})  # sent with every request
        self.connections = 0  # opened so far
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._origins: dict[str, _Origin] = {}

    async def request(self, method: str, url: str, body: bytes = b"",
                      content_type: bytes = b"application/json") -> Response:
        origin = self._origins.get(url) or self._origin(url)
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\n%s" % (
            method.encode(), origin.target, origin.host_header, self.user_agent,
            self.extra_headers)
        if body or method in ("POST", "PUT", "PATCH"):
            head += b"Content-Type: %s\r\nContent-Length: %d\r\n" % (content_type, len(body))
        request = head + b"\r\n" + body
        conn = self._pooled(origin.key)
        if conn is not None:
            try:
                await conn.exchange(request)
                return Response(self, origin.key, conn)
            except HttpError:
                conn.close()
                if conn.started:  # the server answered something: not a stale keep-alive
                    raise
            except BaseException:
                conn.close()
                raise
        conn = await self._connect(origin)
        try:
            await conn.exchange(request)
        except BaseException:
            conn.close()
            raise
        return Response(self, origin.key, conn)

    def close(self) -> None:
        """Close every connection, pooled or in use."""
        for conn in list(self._open):
            conn.close()
        self._idle.clear()

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()
        await asyncio.sleep(0)  # let the transports finish closing while the loop runs

    def _origin(self, url: str) -> _Origin:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(f"not an http(s) URL: {url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        default = port == (443 if tls else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        origin = _Origin((parts.scheme, host, port), host, port, tls,
                         (shown if default else f"{shown}:{port}").encode("idna"),
                         target.encode())
        if len(self._origins) < 1024:
            self._origins[url] = origin
        return origin

    def _pooled(self, key: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.lost and now - conn.idle_since < self.idle_s:
                return conn
            conn.close()
        return None

    async def _connect(self, origin: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        context: ssl.SSLContext | None = None
        if origin.tls:
            context = self.ssl_context or ssl.create_default_context()
            self.ssl_context = context
        try:
            _, conn = await loop.create_connection(
                lambda: _Connection(loop, self._open, self.max_response_bytes),
                origin.host, origin.port, ssl=context,
                server_hostname=origin.host if context else None)
        except OSError as exc:  # refused, unreachable, unknown host, TLS handshake
            why = ("connection refused" if isinstance(exc, ConnectionRefusedError)
                   else f"{type(exc).__name__}: {exc}")
            raise HttpError(f"cannot connect to {origin.host}:{origin.port}: {why}") from exc
        self.connections += 1
        return conn

    def _release(self, key: tuple[str, str, int], conn: _Connection) -> None:
        conn.busy = False
        if conn.lost or conn.error is not None or not conn.keep_alive:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.setdefault(key, []).append(conn)
