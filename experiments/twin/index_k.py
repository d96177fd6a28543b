"""The HiCache x index-K race, device-agnostic: the slot pool, one forward step, the worker thread.

Each session has an index-K slot (``slot_tokens`` x bytes per token) in a pool of
``pool_slots`` device slots, least recently used evicted first: with no more sessions in flight
than slots nothing is evicted, so nothing is reloaded and nothing can race (the seed's "clean at
concurrency 1"). One step serves the reads waiting together (a batch), as a forward does:

1. main stream: the keys of this turn are computed into the slot of every session whose prefix
   is on the device, is a first turn, or (HiCache off) was evicted and is recomputed;
2. session by session in batch order, layer-wise as a forward runs: on the side stream, after
   the main stream's work so far, HiCache's load of the session's slot from its host copy
   (pinned memory) if it was evicted, an asynchronous copy recording an event; on the main
   stream its attention work (``attention_us``), then the indexer's read of its slot, a
   checksum; with the fix the read first waits on the copy's event (``wait_event``), without it
   the read may run while the copy still lands. A copy slower than the attention in front of
   the read (bf16's 256 B/token on the H200: 306 us against 250) is read stale, a faster one
   (fp8's 132 B: 159 us) lands in time; more sessions in flight mean more evictions, so more
   reloads. The copy starts when the main stream reaches the session (not when the host
   enqueued it), so the host's own speed does not decide the race;
3. the main stream then waits on every copy (later steps see whole slots), and the checksums come
   back to the host: a sum other than ``slot_bytes x value`` is a stale read.

Whether a read is stale is decided by the device's timing (copy bandwidth against the work in
front of the read), never by a probability. The bytes are one value per turn (``VALUES``), chosen
unlike what the slot held before, so a partly landed copy changes the sum.

One worker thread owns the device (CUDA streams are used from it only) and serves the event
loop's reads through futures, so the HTTP server never waits on the GPU.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from experiments.twin import logs
from experiments.twin.engine import EngineError, EngineSettings, IndexKRead, ReadResult

VALUES = (0x11, 0x5A, 0xA5, 0xEE)  # the bytes a slot can hold; a turn's differ from the old
MAX_BATCH = 256


class Device(Protocol):
    """What a step asks of a device; ``int`` slot indexes, byte ``value`` in VALUES."""

    def describe(self) -> str: ...

    def write(self, slot: int, value: int) -> None:
        """Main stream: fill the slot with ``value`` (keys computed on the device)."""

    def load(self, slot: int, value: int) -> Any:
        """Side stream, after the main stream's work so far: copy the host copy holding
        ``value`` into the slot, asynchronously; returns the copy's event."""

    def attention(self, sessions: int) -> None:
        """Main stream: the attention work of ``sessions`` sessions."""

    def wait(self, event: Any) -> None:
        """Main stream: wait on a copy's event (the fix)."""

    def checksum(self, slot: int) -> Any:
        """Main stream: the indexer's read of the slot, a pending sum of its bytes."""

    def collect(self, pending: Sequence[Any]) -> list[int]:
        """The sums on the host (waits for the device)."""


@dataclass
class Stats:
    steps: int = 0
    reads: int = 0
    reloads: int = 0
    stale: int = 0
    batch_sizes: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    read: IndexKRead
    slot: int
    value: int
    reload: bool


class SlotPool:
    """Which session holds which device slot (LRU), and which value each slot holds."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._owner: OrderedDict[str, int] = OrderedDict()  # session -> slot, oldest first
        self._free = list(range(slots - 1, -1, -1))
        self.content = [0] * slots  # the value each slot holds (0: never written)

    def assign(self, session: str, pinned: set[int]) -> tuple[int, bool]:
        """The session's slot and whether it was still there (resident); an evicted slot is
        the least recently used one not ``pinned`` by the current step."""
        if session in self._owner:
            self._owner.move_to_end(session)
            return self._owner[session], True
        if self._free:
            slot = self._free.pop()
        else:
            victim = next(s for s, held in self._owner.items() if held not in pinned)
            slot = self._owner.pop(victim)
        self._owner[session] = slot
        return slot, False


def turn_value(session: str, round_: int, old: int) -> int:
    """This turn's byte: stable per (session, round), never the byte the slot holds now."""
    digest = hashlib.sha256(f"{session}\0{round_}".encode()).digest()
    index = digest[0] % len(VALUES)
    if VALUES[index] == old:
        index = (index + 1) % len(VALUES)
    return VALUES[index]


def step(device: Device, pool: SlotPool, settings: EngineSettings,
         reads: Sequence[IndexKRead]) -> list[ReadResult]:
    """One forward over ``reads`` (at most ``pool.slots`` of them, distinct sessions)."""
    plans: list[_Plan] = []
    pinned: set[int] = set()
    for read in reads:
        slot, resident = pool.assign(read.session, pinned)
        pinned.add(slot)
        reload = not resident and read.round > 1 and read.hicache
        plans.append(_Plan(read, slot, turn_value(read.session, read.round,
                                                  pool.content[slot]), reload))
    for plan in plans:
        if not plan.reload:
            device.write(plan.slot, plan.value)
    events = {}
    pending = []
    for plan in plans:  # layer-wise, as a forward runs: each session's load, attention, read
        if plan.reload:
            events[plan.slot] = device.load(plan.slot, plan.value)
        device.attention(1)
        if plan.reload and settings.wait_for_load:
            device.wait(events[plan.slot])
        pending.append(device.checksum(plan.slot))
    for event in events.values():  # the copies end before anything later touches the slots
        device.wait(event)
    sums = device.collect(pending)
    results = []
    for plan, got in zip(plans, sums, strict=True):
        pool.content[plan.slot] = plan.value
        expected = settings.slot_bytes * plan.value
        results.append(ReadResult(stale=got != expected, reloaded=plan.reload, slot=plan.slot,
                                  got=got, expected=expected))
    return results


@dataclass(frozen=True)
class _Job:
    read: IndexKRead
    future: concurrent.futures.Future[ReadResult]


class RaceEngine:
    """An engine whose reads race on a device; a worker thread owns the device."""

    def __init__(self, name: str, settings: EngineSettings,
                 make_device: Callable[[EngineSettings], Device],
                 log: Callable[[str], None] | None = None) -> None:
        self.name = name
        self.settings = settings
        self.stats = Stats()
        self._make_device = make_device
        self._log = log or (lambda line: logs.log(line, rank=0))
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._failure: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"twin-engine-{name}",
                                        daemon=True)
        self._thread.start()

    async def read(self, read: IndexKRead) -> ReadResult:
        future: concurrent.futures.Future[ReadResult] = concurrent.futures.Future()
        self._jobs.put(_Job(read, future))
        return await asyncio.wrap_future(future)

    def wait_ready(self, timeout_s: float | None = None) -> str | None:
        """Block until the device is up; its failure, if it has none."""
        self._ready.wait(timeout_s)
        return self._failure

    def close(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            device = self._make_device(self.settings)
        except Exception as exc:  # no torch, no CUDA: every read fails with this line
            self._failure = f"engine {self.name} cannot start: {exc}"
            self._log(f"Twin engine {self.name}: {self._failure}")
            self._ready.set()
            self._fail_all()
            return
        self._log(f"Twin engine {self.name}: {device.describe()}; {self.settings.describe()}")
        self._ready.set()
        pool = SlotPool(self.settings.pool_slots)
        while True:
            job = self._jobs.get()
            if job is None:
                return
            batch = [job]
            while len(batch) < MAX_BATCH:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._jobs.put(None)  # stop after this batch
                    break
                batch.append(more)
            # A read whose request went away meanwhile is dropped (its future was cancelled).
            live = [each for each in batch if each.future.set_running_or_notify_cancel()]
            for chunk in _chunks(live, self.settings.pool_slots):
                self._serve(device, pool, chunk)

    def _serve(self, device: Device, pool: SlotPool, jobs: list[_Job]) -> None:
        try:
            results = step(device, pool, self.settings, [job.read for job in jobs])
        except Exception as exc:  # a device error fails this step's reads, not the server
            for job in jobs:
                job.future.set_exception(EngineError(f"engine {self.name}: {exc}"))
            return
        stats = self.stats
        stats.steps += 1
        stats.batch_sizes.append(len(jobs))
        for job, result in zip(jobs, results, strict=True):
            stats.reads += 1
            stats.reloads += result.reloaded
            if result.stale:
                stats.stale += 1
                read = job.read
                self._log(f"Twin engine {self.name}: stale index-K read rid={read.rid} "
                          f"round={read.round} slot={result.slot} sum={result.got} "
                          f"expected={result.expected} (HiCache load not awaited)")
            job.future.set_result(result)

    def _fail_all(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(EngineError(self._failure or "engine failed"))


def _chunks(jobs: list[_Job], size: int) -> list[list[_Job]]:
    """Batches of at most ``size`` jobs of distinct sessions (a slot is pinned per step)."""
    chunks: list[list[_Job]] = []
    current: list[_Job] = []
    sessions: set[str] = set()
    for job in jobs:
        if len(current) == size or job.read.session in sessions:
            chunks.append(current)
            current, sessions = [], set()
        current.append(job)
        sessions.add(job.read.session)
    if current:
        chunks.append(current)
    return chunks
