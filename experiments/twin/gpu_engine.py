"""The GPU engine's device: index-K slots in CUDA memory, HiCache's load on a side stream.

``--engine gpu`` only; torch is imported when the device is made (in the engine's worker thread),
so the twin, its tests and CI never need it. The race logic is index_k.py's; this module only
does what a step asks on a real GPU:

- the pool: ``pool_slots`` x slot bytes of device memory (uint8), zeroed;
- the host copies: one pinned host buffer per byte value (``VALUES``), so a load is a real
  asynchronous host->device DMA (``copy_(..., non_blocking=True)`` from pinned memory);
- a load: the side stream waits for the main stream's work so far, copies, records an event;
- the attention work: a fixed fp16 matmul repeated to ``attention_us`` per session, timed at
  start with CUDA events (so the work in front of a read is about the same on any GPU);
- the fix: ``torch.cuda.current_stream().wait_event(event)`` before the read;
- the read: ``slot.sum(dtype=int64)`` on the main stream; ``collect`` brings the sums back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from experiments.twin.engine import EngineError, EngineSettings
from experiments.twin.index_k import VALUES

WORK_N = 2048  # the attention work's matmul: WORK_N x WORK_N fp16, ~17 GFLOP


class CudaDevice:
    def __init__(self, settings: EngineSettings) -> None:
        try:
            import torch
        except ImportError:
            raise EngineError("--engine gpu needs torch with CUDA (pip install torch)") from None
        if not torch.cuda.is_available():
            raise EngineError("--engine gpu needs a CUDA device (torch.cuda.is_available() is "
                              "False)")
        self.torch = torch
        self.nbytes = settings.slot_bytes
        cuda = torch.device("cuda")
        self.pool = torch.zeros((settings.pool_slots, self.nbytes), dtype=torch.uint8,
                                device=cuda)
        self.host = {value: torch.full((self.nbytes,), value, dtype=torch.uint8).pin_memory()
                     for value in VALUES}
        self.side = torch.cuda.Stream()
        self.matrix = torch.randn((WORK_N, WORK_N), dtype=torch.float16, device=cuda)
        self.product = torch.empty_like(self.matrix)
        self.unit_us = self._time(lambda: torch.mm(self.matrix, self.matrix, out=self.product))
        self.reps = (max(1, round(settings.attention_us / self.unit_us))
                     if settings.attention_us > 0 else 0)
        first = self.host[VALUES[0]]
        self.copy_us = self._time(lambda: self.pool[0].copy_(first, non_blocking=True))
        self.pool.zero_()
        torch.cuda.synchronize()

    def _time(self, work: Callable[[], object], reps: int = 20) -> float:
        """Microseconds of one ``work`` on the current stream, after a warm-up."""
        torch = self.torch
        for _ in range(3):
            work()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            work()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) * 1e3 / reps

    def describe(self) -> str:
        name = self.torch.cuda.get_device_name()
        rate = self.nbytes / self.copy_us / 1e3
        return (f"CUDA {name}, a slot's copy {self.copy_us:.0f} us ({rate:.1f} GB/s pinned), "
                f"attention {self.reps} x {self.unit_us:.1f} us matmul per session")

    def write(self, slot: int, value: int) -> None:
        self.pool[slot].fill_(value)

    def load(self, slot: int, value: int) -> Any:
        torch = self.torch
        event = torch.cuda.Event()
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            self.pool[slot].copy_(self.host[value], non_blocking=True)
            event.record(self.side)
        return event

    def attention(self, sessions: int) -> None:
        for _ in range(sessions * self.reps):
            self.torch.mm(self.matrix, self.matrix, out=self.product)

    def wait(self, event: Any) -> None:
        self.torch.cuda.current_stream().wait_event(event)

    def checksum(self, slot: int) -> Any:
        return self.pool[slot].sum(dtype=self.torch.int64)

    def collect(self, pending: Sequence[Any]) -> list[int]:
        if not pending:
            return []
        return [int(each) for each in self.torch.stack(list(pending)).tolist()]


def cuda_device(settings: EngineSettings) -> CudaDevice:
    return CudaDevice(settings)
