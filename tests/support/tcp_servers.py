"""Tiny loopback TCP servers that the fault proxy's tests talk through it to."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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
    """Send back whatever comes, until the client closes."""
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
