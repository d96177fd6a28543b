"""Tiny loopback TCP servers: what the fault proxy's tests talk to through it, and one-request
HTTP servers that answer raw bytes (redirects, broken heads)."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

Handler = Callable[[socket.socket], None]


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextmanager
def serving(handle: Handler) -> Iterator[tuple[str, int]]:
    """Serve ``handle(conn)`` for every connection on 127.0.0.1; yields (host, port)."""

    class _Handle(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            handle(self.request)

    server = _Server(("127.0.0.1", 0), _Handle)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def echo(conn: socket.socket) -> None:
    """Send back whatever comes, until the client closes. A reset is a close too: the fault
    proxy's tests reset connections on purpose, and socketserver would print its traceback."""
    with suppress(ConnectionResetError, BrokenPipeError):
        while data := conn.recv(65536):
            conn.sendall(data)


def speaker(payload: bytes) -> Handler:
    """Send ``payload`` and close at once."""
    def speak(conn: socket.socket) -> None:
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
    return speak


def read_all(sock: socket.socket) -> tuple[bytes, list[int]]:
    """Everything until EOF, and the size of each recv (how the bytes arrived)."""
    data, sizes = bytearray(), []
    while chunk := sock.recv(65536):
        data += chunk
        sizes.append(len(chunk))
    return bytes(data), sizes


def http_answer(answer: Callable[[str], bytes], seen: list[str] | None = None) -> Handler:
    """Read one request (its head, and its body by Content-Length), send ``answer(path)``, close.
    ``seen`` gets each request's line: a connection that sent nothing still counts (b"")."""
    def handle(conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 1 << 16:
            piece = conn.recv(65536)
            if not piece:
                break
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        if seen is not None:
            seen.append(line)
        for header in head.split(b"\r\n")[1:]:
            name, _, value = header.partition(b":")
            if name.strip().lower() == b"content-length":
                while len(body) < int(value) and (piece := conn.recv(65536)):
                    body += piece
        if line:
            parts = line.split(" ")
            with suppress(ConnectionError):  # a client that stopped reading a flood
                conn.sendall(answer(parts[1] if len(parts) > 1 else "/"))
    return handle
