"""A TCP fault proxy on loopback with toxiproxy's fault kinds, for the fault-injection tests.

``FaultProxy(upstream)`` listens on 127.0.0.1 and forwards every connection to ``upstream``; a
test puts it between the orchestrator and a server (an HTTP twin, a lab host's sshd) and adds or
removes *toxics* while traffic flows. The kinds are toxiproxy's (github.com/Shopify/toxiproxy,
README "Toxics"), each for one direction — ``upstream`` (client to server) or ``downstream``
(server to client) — and applied to a connection with probability ``toxicity`` (drawn once per
connection and toxic, from the proxy's seed: a rerun draws the same):

- ``latency``: every chunk waits ``latency_ms`` ± ``jitter_ms``;
- ``bandwidth``: at most ``rate_kbps`` KB/s;
- ``slow_close``: the close is passed on ``delay_ms`` late;
- ``timeout``: no data passes; the connection is closed after ``timeout_ms``, or with
  ``timeout_ms=0`` it hangs until the toxic is removed, and then the data goes through;
- ``reset_peer``: the connection is reset (TCP RST) ``timeout_ms`` after data arrives;
- ``slicer``: chunks cut into pieces of ``average_size`` ± ``size_variation`` bytes,
  ``delay_us`` apart;
- ``limit_data``: the connection is closed once ``bytes`` have passed in that direction.

``down()`` / ``up()`` is toxiproxy's disabled proxy: connections refused, open ones cut.
The proxy runs its own event loop in a thread, so blocking test code and other processes (Ray
actors) can use it while the test thread drives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import socket
import struct
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

Kind = Literal["latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer",
               "limit_data"]
KINDS: tuple[Kind, ...] = ("latency", "bandwidth", "slow_close", "timeout", "reset_peer",
                           "slicer", "limit_data")
Direction = Literal["upstream", "downstream"]
CHUNK = 32 * 1024
T = TypeVar("T")


@dataclass(frozen=True)
class Toxic:
    kind: Kind
    direction: Direction = "downstream"
    toxicity: float = 1.0
    latency_ms: float = 0.0  # latency
    jitter_ms: float = 0.0  # latency
    rate_kbps: float = 0.0  # bandwidth, KB/s as toxiproxy counts
    delay_ms: float = 0.0  # slow_close
    timeout_ms: float = 0.0  # timeout (0: hang until removed), reset_peer (0: at once)
    average_size: int = 0  # slicer
    size_variation: int = 0  # slicer
    delay_us: float = 0.0  # slicer
    bytes: int = 0  # limit_data

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown toxic kind {self.kind!r}; one of {', '.join(KINDS)}")
        if not 0.0 <= self.toxicity <= 1.0:
            raise ValueError(f"toxicity {self.toxicity} is not a probability")
        if self.kind == "bandwidth" and self.rate_kbps <= 0:
            raise ValueError("bandwidth needs rate_kbps > 0")
        if self.kind == "slicer" and self.average_size <= 0:
            raise ValueError("slicer needs average_size > 0")


class _Cut(Exception):
    """The connection was closed or reset by a toxic: stop pumping."""


@dataclass(eq=False)  # hashed by identity: kept in a set
class _Link:
    """One proxied connection: the client's side and the server's side."""

    number: int
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    passed: dict[str, int] = field(default_factory=lambda: {"upstream": 0, "downstream": 0})
    drawn: dict[str, bool] = field(default_factory=dict)  # toxic name -> applies here

    def close(self) -> None:
        for writer in (self.client, self.server):
            writer.close()

    def reset(self) -> None:
        """Close both sides with RST (SO_LINGER 0), as a peer that resets does."""
        for writer in (self.client, self.server):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


@dataclass
class Stats:
    """What the proxy did, for tests that check a toxic really acted."""

    accepted: int = 0
    refused_upstream: int = 0  # the upstream could not be reached: the client was closed
    cut: int = 0  # connections closed by a timeout or limit_data toxic
    reset: int = 0  # connections reset by reset_peer or by down()
    pieces: list[int] = field(default_factory=list)  # sizes the slicer wrote, last 10,000


class FaultProxy:
    """A loopback proxy to ``upstream`` (an IP literal and port); use as a context manager."""

    def __init__(self, upstream: tuple[str, int], *, seed: int = 0) -> None:
        ipaddress.ip_address(upstream[0])  # an address, never a name to resolve
        self.upstream = upstream
        self.seed = seed
        self.stats = Stats()
        self.port = 0
        self._toxics: dict[str, Toxic] = {}
        self._removed: dict[str, asyncio.Event] = {}
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._count = 0
        self._accepted = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"fault-proxy->{upstream[0]}:{upstream[1]}")

    # -- control, from any thread --------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen)
        return self

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "", scheme: str = "http") -> str:
        return f"{scheme}://{self.address}{path}"

    def add(self, toxic: Toxic, name: str | None = None) -> str:
        """Add a toxic (it acts on open connections too); returns its name, for ``remove``."""
        chosen = name or f"{toxic.kind}_{toxic.direction}"

        async def add() -> None:
            if chosen in self._toxics:
                raise ValueError(f"a toxic named {chosen!r} is already there")
            self._toxics[chosen] = toxic
            self._removed[chosen] = asyncio.Event()

        self._call(add)
        return chosen

    def remove(self, name: str) -> None:
        async def remove() -> None:
            del self._toxics[name]
            self._removed.pop(name).set()  # a hanging timeout toxic lets its data through

        self._call(remove)

    def clear(self) -> None:
        for name in self.toxics():
            self.remove(name)

    def toxics(self) -> list[str]:
        async def names() -> list[str]:
            return list(self._toxics)

        return self._call(names)

    @contextlib.contextmanager
    def toxic(self, toxic: Toxic, name: str | None = None) -> Iterator[str]:
        """The toxic for the block, removed after it (Jepsen: every fault has its heal)."""
        chosen = self.add(toxic, name)
        try:
            yield chosen
        finally:
            self.remove(chosen)

    def down(self) -> None:
        """Refuse new connections and reset the open ones."""
        async def down() -> None:
            if self._server is not None:
                self._server.close()
                self._server = None
            for link in list(self._links):
                link.reset()
                self.stats.reset += 1

        self._call(down)

    def up(self) -> None:
        """Listen again, on the same port."""
        self._call(self._listen)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self.down()

        async def cancel() -> None:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        self._call(cancel)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def wait_accepted(self, count: int, timeout_s: float = 30.0) -> bool:
        """Block until ``count`` connections have come in (an event to act on, not a sleep)."""
        with self._accepted:
            return self._accepted.wait_for(lambda: self.stats.accepted >= count, timeout_s)

    def _call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result(timeout=30)

    # -- the proxy, on its loop ----------------------------------------------------------------

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, "127.0.0.1", self.port, reuse_address=True)
            self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, client_reader: asyncio.StreamReader,
                      client_writer: asyncio.StreamWriter) -> None:
        with self._accepted:
            self.stats.accepted += 1
            self._accepted.notify_all()
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            self.stats.refused_upstream += 1
            client_writer.close()
            return
        self._count += 1
        link = _Link(self._count, client_writer, server_writer)
        self._links.add(link)
        pumps = [self._spawn(self._pump(link, "upstream", client_reader, server_writer)),
                 self._spawn(self._pump(link, "downstream", server_reader, client_writer))]
        try:
            await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._links.discard(link)
            link.close()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _active(self, link: _Link, direction: Direction) -> list[tuple[str, Toxic]]:
        """The toxics acting on this link and direction, in the order they were added."""
        active = []
        for name, toxic in self._toxics.items():
            if toxic.direction != direction:
                continue
            if name not in link.drawn:
                rng = random.Random(f"{self.seed}:{link.number}:{name}")
                link.drawn[name] = rng.random() < toxic.toxicity
            if link.drawn[name]:
                active.append((name, toxic))
        return active

    async def _pump(self, link: _Link, direction: Direction, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    for _, toxic in self._active(link, direction):
                        if toxic.kind == "slow_close":
                            await asyncio.sleep(toxic.delay_ms / 1000)
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                await self._through(link, direction, data, writer)
        except _Cut:
            return
        except (ConnectionError, OSError):  # one side reset: so is the other, as on a wire
            link.reset()

    async def _through(self, link: _Link, direction: Direction, data: bytes,
                       writer: asyncio.StreamWriter) -> None:
        active = self._active(link, direction)
        for name, toxic in active:
            if toxic.kind == "timeout":
                if toxic.timeout_ms > 0:
                    await asyncio.sleep(toxic.timeout_ms / 1000)
                    self.stats.cut += 1
                    link.close()
                    raise _Cut
                removed = self._removed.get(name)
                if removed is not None:
                    await removed.wait()  # hang until the test removes the toxic
            elif toxic.kind == "reset_peer":
                await asyncio.sleep(toxic.timeout_ms / 1000)
                self.stats.reset += 1
                link.reset()
                raise _Cut
            elif toxic.kind == "latency":
                jitter = random.uniform(-toxic.jitter_ms, toxic.jitter_ms)
                await asyncio.sleep(max(0.0, toxic.latency_ms + jitter) / 1000)
        pieces = [data]
        for _, toxic in active:
            if toxic.kind == "slicer":
                pieces = [piece for whole in pieces for piece in _slices(whole, toxic)]
            elif toxic.kind == "limit_data":
                room = toxic.bytes - link.passed[direction]
                if sum(map(len, pieces)) > room:
                    kept = b"".join(pieces)[:max(0, room)]
                    if kept:
                        writer.write(kept)
                        await writer.drain()
                    link.passed[direction] += len(kept)
                    self.stats.cut += 1
                    link.close()
                    raise _Cut
        sliced = any(t.kind == "slicer" for _, t in active)
        slicer_gap = max((t.delay_us for _, t in active if t.kind == "slicer"), default=0.0)
        rate = min((t.rate_kbps for _, t in active if t.kind == "bandwidth"), default=0.0)
        for piece in pieces:
            for part in _paced(piece, rate):
                writer.write(part)
                await writer.drain()
                link.passed[direction] += len(part)
                if rate:
                    await asyncio.sleep(len(part) / (rate * 1024))
            if sliced:
                self.stats.pieces.append(len(piece))
                del self.stats.pieces[:-10_000]
                await asyncio.sleep(slicer_gap / 1_000_000)


def _slices(data: bytes, toxic: Toxic) -> list[bytes]:
    """toxiproxy's slicer: pieces of average_size ± size_variation bytes (at least one)."""
    pieces, at = [], 0
    while at < len(data):
        size = toxic.average_size + random.randint(-toxic.size_variation, toxic.size_variation)
        size = max(1, size)
        pieces.append(data[at:at + size])
        at += size
    return pieces


def _paced(data: bytes, rate_kbps: float) -> list[bytes]:
    """Parts of at most a tenth of a second's worth at ``rate_kbps`` (all at once without)."""
    if not rate_kbps:
        return [data]
    step = max(1, int(rate_kbps * 1024 / 10))
    return [data[at:at + step] for at in range(0, len(data), step)]
