"""The engine seam: what decides, at each decode turn, whether the session's index-K read is stale.

The twin's reply path is the same for every engine (chat.py); the engine only answers, per decode
turn, "did the indexer read the index keys this session wrote?". A stale read becomes the
corrupted markup the planted engine emits for a ``leak`` (``STALE_READ``).

- ``planted`` (the default): nothing is read; the fault model decides (faults.py), as always.
- ``gpu``: a real CUDA race (index_k.py on gpu_engine.py's device): HiCache reloads each
  evicted session's index-K slot from pinned host memory by an asynchronous copy on a side
  stream; the indexer reads it on the main stream after the batch's attention work, waiting on
  the copy's event only with the fix switch. Needs torch with CUDA (``--engine gpu`` only).
- ``cpu-standin``: for tests only: the same race logic on a simulated device (standin.py) whose
  copy lands after a given amount of work; deterministic, no torch.

The fix switch: ``SGLANG_HICACHE_WAIT_LOAD=1`` (``0``: no wait) in the twin's environment; when
it is unset, the twin's tree decides as a real server's code does: the reader waits when the
tree's ``nsa_indexer.py`` (``INDEXER_SOURCE``) has an uncommented ``.wait_event(`` line; no such
file or line, no wait. The tree is ``--twin-tree``, else the fault model file's directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from experiments.twin.args import ENGINES
from experiments.twin.faults import Decision, Effect
from experiments.twin.logs import index_k_bytes

WAIT_ENV = "SGLANG_HICACHE_WAIT_LOAD"
INDEXER_SOURCE = "python/sglang/srt/layers/attention/nsa/nsa_indexer.py"
_WAIT_LINE = re.compile(rb"^[^#\n]*\.wait_event\(", re.MULTILINE)
MAX_SOURCE_BYTES = 1 << 20
# The engine's physical sizes (twin-only env; the defaults are the FACTS.md probe's slot).
SLOT_TOKENS_ENV = "BISECT_TWIN_GPU_SLOT_TOKENS"  # tokens of one session's index-K slot
POOL_SLOTS_ENV = "BISECT_TWIN_GPU_POOL_SLOTS"  # device slots: more sessions than this evict
ATTENTION_US_ENV = "BISECT_TWIN_GPU_ATTENTION_US"  # main-stream work per session of a batch
STANDIN_GBPS_ENV = "BISECT_TWIN_STANDIN_GBPS"  # the stand-in's host->device bandwidth
STALE_READ = Decision(rule="gpu-index-k-stale-read", effect=Effect.LEAK, markup=None)


class EngineError(Exception):
    """The engine cannot run (no torch, no CUDA, a bad setting); one line for the user."""


@dataclass(frozen=True)
class IndexKRead:
    """One decode turn's read of its session's index keys."""

    rid: str
    session: str
    round: int  # 1: the session's first turn (no prefix to reload)
    hicache: bool  # HiCache on for this pool: an evicted prefix is reloaded from host memory


@dataclass(frozen=True)
class ReadResult:
    stale: bool  # the read did not see the bytes this turn expects
    reloaded: bool = False  # the slot came back from host memory by an asynchronous copy
    slot: int = -1
    got: int = 0  # the read's checksum
    expected: int = 0


CLEAN = ReadResult(stale=False)


class Engine(Protocol):
    name: str

    async def read(self, read: IndexKRead) -> ReadResult:
        """Serve one decode turn's index-K read; EngineError when the engine cannot run."""
        ...

    def close(self) -> None: ...


class PlantedEngine:
    """Today's twin: no read of its own; the fault model decides elsewhere."""

    name = "planted"

    async def read(self, read: IndexKRead) -> ReadResult:
        return CLEAN

    def close(self) -> None:
        """Nothing to release."""


@dataclass(frozen=True)
class EngineSettings:
    kind: str
    bytes_per_token: int  # 132 (fp8 key + scale) or 256 (bf16), as the twin's log says
    wait_for_load: bool  # the fix: the reader waits on the copy's event
    wait_reason: str  # where the fix switch came from, for the start line
    slot_tokens: int = 65536
    pool_slots: int = 16
    attention_us: float = 250.0
    standin_gbps: float = 50.0

    @property
    def slot_bytes(self) -> int:
        return self.slot_tokens * self.bytes_per_token

    def describe(self) -> str:
        return (f"index-K slot {self.slot_tokens} tokens x {self.bytes_per_token} B = "
                f"{self.slot_bytes / 1e6:.1f} MB, {self.pool_slots} device slots, attention "
                f"{self.attention_us:g} us per session, wait for HiCache load: "
                f"{'on' if self.wait_for_load else 'off'} ({self.wait_reason})")


def wait_for_load(env: Mapping[str, str], tree: Path | None) -> tuple[bool, str]:
    """The fix switch: the env var when set, else the tree's indexer source, else off."""
    value = env.get(WAIT_ENV)
    if value is not None:
        if value not in ("0", "1"):
            raise EngineError(f"{WAIT_ENV}={value[:40]!r}: write 1 (wait on the load) or 0")
        return value == "1", f"{WAIT_ENV}={value}"
    if tree is None:
        return False, f"{WAIT_ENV} unset, no tree"
    source = tree / INDEXER_SOURCE
    try:
        resolved = source.resolve()
        if not resolved.is_relative_to(tree.resolve()) or not resolved.is_file():
            return False, f"{WAIT_ENV} unset, no {INDEXER_SOURCE} in {tree}"
        with resolved.open("rb") as handle:
            text = handle.read(MAX_SOURCE_BYTES)
    except OSError as exc:
        raise EngineError(f"cannot read {source}: {exc.strerror or exc}") from None
    waits = _WAIT_LINE.search(text) is not None
    return waits, f"{WAIT_ENV} unset, {source} {'waits' if waits else 'has no wait'}"


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # also refuses nan
        raise EngineError(f"{name}={raw[:40]!r}: a number from {low:g} to {high:g}")
    return value


def settings(kind: str, env: Mapping[str, str], tree: Path | None,
             knobs: Mapping[str, str] | None = None) -> EngineSettings:
    """The engine's settings as the twin reads them at start: ``env`` is the twin's (the
    variant's) environment, ``knobs`` where the twin-only sizes come from (default: os.environ)."""
    if kind not in ENGINES:
        raise EngineError(f"unknown engine {kind!r}: one of {', '.join(ENGINES)}")
    knobs = os.environ if knobs is None else knobs
    wait, reason = wait_for_load(env, tree)
    return EngineSettings(
        kind=kind, bytes_per_token=index_k_bytes(env.get("BF16_INDEX_K") == "1"),
        wait_for_load=wait, wait_reason=reason,
        slot_tokens=int(_number(knobs, SLOT_TOKENS_ENV, 65536, 1, 1 << 24)),
        pool_slots=int(_number(knobs, POOL_SLOTS_ENV, 16, 1, 4096)),
        attention_us=_number(knobs, ATTENTION_US_ENV, 250.0, 0, 1e6),
        standin_gbps=_number(knobs, STANDIN_GBPS_ENV, 50.0, 0.001, 1e4),
    )


def make(kind: str, env: Mapping[str, str], tree: Path | None) -> Engine:
    """The twin's engine: the planted one reads nothing (not even the fix switch)."""
    if kind == "planted":
        return PlantedEngine()
    return build(settings(kind, env, tree))


def build(config: EngineSettings) -> Engine:
    """The engine of ``config.kind``; a racing engine starts its worker thread (and device)."""
    if config.kind == "planted":
        return PlantedEngine()
    from experiments.twin.index_k import RaceEngine

    if config.kind == "gpu":
        from experiments.twin.gpu_engine import cuda_device

        return RaceEngine("gpu", config, cuda_device)
    from experiments.twin.standin import standin_device

    return RaceEngine("cpu-standin", config, standin_device)
