"""A lean HTTP/1.1 keep-alive client: the stress workload's load path.

Why not aiohttp here: against an instant stub at 1,000 streaming sessions (BENCHMARKS.md, "Stress
harness"), ``run_stress`` over aiohttp cost 0.60 ms of client CPU per request, exactly what a bare
aiohttp client costs, and a profile put ~45% of it in aiohttp's request/response machinery. The
load generator must cost far less than the server it stresses, so this module does only what the
workload needs: an ``asyncio.Protocol`` per connection, responses parsed by ``httptools`` (llhttp,
as uvicorn uses; it also undoes chunked encoding), one write per request, and one wake-up of the
reader per batch of bytes received. With it (and orjson, uvloop) the same run costs 0.26 ms, 2.6x
less than the bare aiohttp client. aiohttp stays for the twin and the metric collector.

What it does: a pool of keep-alive connections per origin (a request on a pooled connection that
the server had closed before any response byte is retried once on a fresh one; a connection idle
for ``idle_s`` is closed instead of reused, before uvicorn's 5 s keep-alive timeout can race the
request); ``Connection: close``,
HTTP/1.0 and read-to-EOF bodies, Content-Length and chunked bodies; http and https (the default
SSL context unless one is given). Timeouts and cancellation belong to the caller: a response not
read to its end is closed, never pooled. Transport failures raise ``HttpError`` with a sentence.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import NamedTuple, cast
from urllib.parse import urlsplit

import httptools

IDLE_S = 4.0  # below uvicorn's 5 s keep-alive timeout: its idle close never meets our request


class HttpError(Exception):
    """The exchange failed below HTTP: refused, reset, closed early, or not an HTTP response."""


class _Origin(NamedTuple):
    key: tuple[str, str, int]
    host: str
    port: int
    tls: bool
    host_header: bytes
    target: bytes  # path and query


class _Connection(asyncio.Protocol):
    """One connection and the response being received on it (one at a time: no pipelining)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, registry: set[_Connection]) -> None:
        self.loop = loop
        self.open = registry  # the client's open connections: this one is in it while open
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
        self.body: list[bytes] = []
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
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = HttpError(f"malformed HTTP response: {exc}")
            self.close()
        self._wake()

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
        self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.status < 200:  # 100 Continue, 103 Early Hints: the real response follows
            return
        headers = self.headers
        self.to_eof = (b"content-length" not in headers
                       and b"chunked" not in headers.get(b"transfer-encoding", b"").lower()
                       and self.status >= 200 and self.status not in (204, 304))
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        if body:
            self.body.append(body)

    def on_message_complete(self) -> None:
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

    def header(self, name: str) -> str:
        return self.headers.get(name.lower().encode(), b"").decode("latin-1")

    async def read_some(self) -> bytes:
        """The body bytes received since the last call, waiting for some; b"" at the end."""
        conn = self._conn
        if conn is None:
            return b""
        while not conn.body and not conn.complete:
            if conn.error is not None:
                raise conn.error
            await conn.wait()
        body = conn.body
        data = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        if conn.complete:
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
                 user_agent: str = "bisect") -> None:
        self.ssl_context = ssl_context
        self.idle_s = idle_s
        self.user_agent = user_agent.encode()
        self.connections = 0  # opened so far
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._origins: dict[str, _Origin] = {}

    async def request(self, method: str, url: str, body: bytes = b"",
                      content_type: bytes = b"application/json") -> Response:
        origin = self._origins.get(url) or self._origin(url)
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\n" % (
            method.encode(), origin.target, origin.host_header, self.user_agent)
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
                lambda: _Connection(loop, self._open), origin.host, origin.port, ssl=context,
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
