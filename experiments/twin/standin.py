"""A CPU stand-in for the GPU engine's device (``--engine cpu-standin``: tests and dry runs only).

Two streams on a virtual clock in microseconds, as the CUDA device has them: work on the main
stream advances the main cursor; a copy on the side stream starts when both the side stream and
the main stream's work so far are done, and lands ``bytes / bandwidth`` later; waiting on its event
moves the main cursor to its end. A read taken before a copy has landed sees the landed share of
the new bytes and the rest of the old ones, so the sum is off: exactly the race of the GPU, with
a deterministic timing. With the defaults (50 GB/s, 250 us of attention a session) a lone fp8 slot
(64K x 132 B, 173 us) lands in time and a bf16 one (64K x 256 B, 336 us) does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from experiments.twin.engine import EngineSettings

WRITE_US = 2.0  # a fill of a slot on the device (HBM speed)
READ_US = 2.0  # a checksum of a slot


@dataclass(frozen=True)
class _Landing:
    """A slot's bytes over time: ``old`` until ``start``, ``new`` from ``end``, in between
    the copy's landed share (front to back)."""

    old: int
    new: int
    start: float = 0.0
    end: float = 0.0

    def value_sum(self, at: float, nbytes: int) -> int:
        if at >= self.end:
            return nbytes * self.new
        if at <= self.start:
            return nbytes * self.old
        landed = int(nbytes * (at - self.start) / (self.end - self.start))
        return landed * self.new + (nbytes - landed) * self.old


class StandinDevice:
    def __init__(self, settings: EngineSettings) -> None:
        self.nbytes = settings.slot_bytes
        self.attention_us = settings.attention_us
        self.bytes_per_us = settings.standin_gbps * 1e3  # GB/s = 1e3 bytes per microsecond
        self.main = 0.0
        self.side = 0.0
        self.slots = [_Landing(0, 0) for _ in range(settings.pool_slots)]

    def describe(self) -> str:
        copy_us = self.nbytes / self.bytes_per_us
        return (f"CPU stand-in device (simulated streams), a slot's copy {copy_us:.0f} us at "
                f"{self.bytes_per_us / 1e3:g} GB/s")

    def _now(self, slot: int) -> int:
        """The byte value the slot settles on (what a later write or copy replaces)."""
        return self.slots[slot].new

    def write(self, slot: int, value: int) -> None:
        self.main += WRITE_US
        self.slots[slot] = _Landing(value, value)

    def load(self, slot: int, value: int) -> float:
        start = max(self.side, self.main)
        end = start + self.nbytes / self.bytes_per_us
        self.side = end
        self.slots[slot] = _Landing(self._now(slot), value, start, end)
        return end

    def attention(self, sessions: int) -> None:
        self.main += sessions * self.attention_us

    def wait(self, event: Any) -> None:
        self.main = max(self.main, float(event))

    def checksum(self, slot: int) -> int:
        total = self.slots[slot].value_sum(self.main, self.nbytes)
        self.main += READ_US
        return total

    def collect(self, pending: Sequence[Any]) -> list[int]:
        self.main = self.side = max(self.main, self.side)  # the device is idle afterwards
        return [int(each) for each in pending]


def standin_device(settings: EngineSettings) -> StandinDevice:
    return StandinDevice(settings)
