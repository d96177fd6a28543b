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

Bounded under floods (http_connection.py: one connection, its parse and its limits): a
response over its limits ends as ``HttpError`` and the connection is dropped; a reader that falls
behind pauses its socket (backpressure), and ``read_some`` hands out at most ``READ_MAX`` bytes
per call, yielding to the loop between slices: no flood makes one step of a reader long enough to
hold back everyone else's timeouts. A redirect is a response like any other: never followed.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

from experiments.workload.http_connection import (
    MAX_RESPONSE_BYTES,
    Connection,
    HttpError,
)

IDLE_S = 4.0  # below uvicorn's 5 s keep-alive timeout: its idle close never meets our request


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


class Response:
    """Status, headers (lower-case names) and the body as it arrives; pooled once read."""

    __slots__ = ("_client", "_conn", "_key", "headers", "status")

    def __init__(self, client: HttpClient, key: tuple[str, str, int], conn: Connection) -> None:
        self._client, self._key = client, key
        self._conn: Connection | None = conn
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
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._open: set[Connection] = set()
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

    def _pooled(self, key: tuple[str, str, int]) -> Connection | None:
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

    async def _connect(self, origin: _Origin) -> Connection:
        loop = asyncio.get_running_loop()
        context: ssl.SSLContext | None = None
        if origin.tls:
            context = self.ssl_context or ssl.create_default_context()
            self.ssl_context = context
        try:
            _, conn = await loop.create_connection(
                lambda: Connection(loop, self._open, self.max_response_bytes),
                origin.host, origin.port, ssl=context,
                server_hostname=origin.host if context else None)
        except OSError as exc:  # refused, unreachable, unknown host, TLS handshake
            why = ("connection refused" if isinstance(exc, ConnectionRefusedError)
                   else f"{type(exc).__name__}: {exc}")
            raise HttpError(f"cannot connect to {origin.host}:{origin.port}: {why}") from exc
        self.connections += 1
        return conn

    def _release(self, key: tuple[str, str, int], conn: Connection) -> None:
        conn.busy = False
        if conn.lost or conn.error is not None or not conn.keep_alive:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.setdefault(key, []).append(conn)
