"""A raw HTTP/1.1 server on loopback whose replies are scripts of bytes: broken servers on demand.

aiohttp cannot send what a broken server sends (invalid UTF-8 after a JSON header, a head that
never ends, a stream without end); this server writes whatever its script yields, chunk by
chunk, with backpressure (``drain``), and closes the connection after each reply. It counts the
bytes it managed to write, so a test can tell how much of a flood the client let in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

Script = Callable[[bytes], AsyncIterator[bytes]]  # the request's body -> the reply's bytes


@dataclass
class ScriptedServer:
    """Serve ``script`` on a free 127.0.0.1 port (``async with`` yields the base URL)."""

    script: Script
    bodies: list[bytes] = field(default_factory=list)  # every request body, in order
    sent: int = 0  # bytes written to clients so far
    finished: asyncio.Event = field(default_factory=asyncio.Event)  # a reply stopped writing
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await reader.readexactly(length)
            self.bodies.append(body)
            async for piece in self.script(body):
                writer.write(piece)
                self.sent += len(piece)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up: what a flood is for
        except asyncio.CancelledError:
            pass  # the server is shutting down (serve's exit): end quietly
        finally:
            self._handlers.discard(task)
            self.finished.set()
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            handlers = list(self._handlers)  # a flood forever ends only here
            for handler in handlers:
                handler.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await server.wait_closed()


def head(status: str = "200 OK", content_type: str = "application/json",
         extra: Iterable[str] = ()) -> bytes:
    """A response head without framing headers (the script adds Content-Length or chunked)."""
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}", "Connection: close", *extra]
    return ("\r\n".join(lines) + "\r\n").encode()


def whole(body: bytes, content_type: str = "application/json") -> Script:
    """One reply with a Content-Length body."""

    async def script(_: bytes) -> AsyncIterator[bytes]:
        yield head(content_type=content_type) + b"Content-Length: %d\r\n\r\n" % len(body) + body

    return script


def chunk(data: bytes) -> bytes:
    """One piece of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(events: Iterable[bytes], end: bool = True) -> Script:
    """A chunked text/event-stream of ``data:`` events (``end``: then the zero chunk)."""

    async def script(_: bytes) -> AsyncIterator[bytes]:
        yield head(content_type="text/event-stream") + b"Transfer-Encoding: chunked\r\n\r\n"
        for event in events:
            yield chunk(b"data: " + event + b"\n\n")
        if end:
            yield b"0\r\n\r\n"

    return script


def flood(start: bytes, piece: bytes, total: int | None = None, gap_s: float = 0.0) -> Script:
    """``start``, then ``piece`` over and over (as a raw body, or chunks if the start says
    chunked) up to ``total`` bytes (None: forever), ``gap_s`` apart (0: as fast as it drains)."""
    chunked = b"chunked" in start.lower()

    async def script(_: bytes) -> AsyncIterator[bytes]:
        yield start
        sent = 0
        framed = chunk(piece) if chunked else piece
        while total is None or sent < total:
            yield framed
            sent += len(piece)
            if gap_s:
                await asyncio.sleep(gap_s)

    return script
