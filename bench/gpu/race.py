"""The race rate of the GPU engine per index-K dtype x HiCache x concurrency x fix.

    python bench/gpu/race.py [--engine gpu|cpu-standin] [--reads 400] [--rounds 4]
                             [--concurrency 1,8,16,24,32,64,80] [--think-ms 2] [--json FILE]

It drives the twin's own engine (experiments/twin/engine.py + index_k.py on gpu_engine.py's
device, or the CPU stand-in), not a copy: per cell, sessions of ``--rounds`` turns, at most
``--concurrency`` of them in flight, each turn one index-K read, a random think time (seeded)
between turns, until about ``--reads`` reads. One engine (one device) per dtype and fix; HiCache
is per read, as a decode learns it from its pool. The engine's sizes come from the environment
as in the twin (BISECT_TWIN_GPU_POOL_SLOTS, _SLOT_TOKENS, _ATTENTION_US). Prints a table and,
with ``--json``, writes every cell with the engine's start lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from experiments.twin import engine  # noqa: E402
from experiments.twin.index_k import Device, RaceEngine  # noqa: E402


def _cuda() -> Callable[[engine.EngineSettings], Device]:
    from experiments.twin.gpu_engine import cuda_device

    return cuda_device


def _standin() -> Callable[[engine.EngineSettings], Device]:
    from experiments.twin.standin import standin_device

    return standin_device


DEVICES = {"gpu": _cuda, "cpu-standin": _standin}


@dataclass(frozen=True)
class Cell:
    index_k: str
    hicache: str
    fix: str
    concurrency: int
    sessions: int
    reads: int
    reloads: int
    stale: int
    sessions_hit: int
    mean_batch: float
    wall_s: float

    @property
    def rate(self) -> float:
        return self.stale / self.reads if self.reads else 0.0

    @property
    def per_reload(self) -> float:
        return self.stale / self.reloads if self.reloads else 0.0


async def run_cell(racing: RaceEngine, name: str, hicache: bool, concurrency: int,
                   sessions: int, rounds: int, think_s: float, rng: random.Random
                   ) -> tuple[int, int, int, int]:
    """(reads, reloads, stale reads, sessions with a stale read) of one cell."""
    gate = asyncio.Semaphore(concurrency)
    pauses = [[rng.uniform(0, think_s) for _ in range(rounds)] for _ in range(sessions)]

    async def session(index: int) -> list[engine.ReadResult]:
        results = []
        async with gate:
            for round_ in range(1, rounds + 1):
                key = f"{name}-s{index}"
                results.append(await racing.read(engine.IndexKRead(
                    rid=f"{key}-r{round_}", session=key, round=round_, hicache=hicache)))
                await asyncio.sleep(pauses[index][round_ - 1])
        return results

    done = await asyncio.gather(*(session(index) for index in range(sessions)))
    flat = [result for each in done for result in each]
    return (len(flat), sum(r.reloaded for r in flat), sum(r.stale for r in flat),
            sum(any(r.stale for r in each) for each in done))


def measure(kind: str, concurrencies: list[int], reads: int, rounds: int, think_ms: float,
            seed: int, lines: list[str]) -> list[Cell]:
    cells: list[Cell] = []
    rng = random.Random(seed)
    for index_k in ("fp8", "bf16"):
        for fix in ("off", "on"):
            env = {"BF16_INDEX_K": "1" if index_k == "bf16" else "0",
                   engine.WAIT_ENV: "1" if fix == "on" else "0"}
            config = engine.settings(kind, env, None)
            # As engine.build makes it, with the start line and stale reads kept for the report.
            racing = RaceEngine(kind, config, DEVICES[kind](), log=lines.append)
            failure = racing.wait_ready(600)
            if failure:
                raise SystemExit(f"race.py: {failure}")
            try:
                for hicache in ("off", "on"):
                    for concurrency in concurrencies:
                        sessions = max(concurrency, math.ceil(reads / rounds))
                        before = len(racing.stats.batch_sizes)
                        started = time.monotonic()
                        counts = asyncio.run(run_cell(
                            racing, f"{index_k}-{fix}-{hicache}-c{concurrency}",
                            hicache == "on", concurrency, sessions, rounds, think_ms / 1e3, rng))
                        batches = racing.stats.batch_sizes[before:]
                        cells.append(Cell(index_k, hicache, fix, concurrency, sessions, *counts,
                                          mean_batch=sum(batches) / max(1, len(batches)),
                                          wall_s=time.monotonic() - started))
                        print(table_row(cells[-1]), flush=True)
            finally:
                racing.close()
    return cells


HEADER = (f"{'index_k':>7} {'hicache':>7} {'fix':>4} {'conc':>5} {'reads':>6} {'reloads':>7} "
          f"{'stale':>6} {'rate':>7} {'/reload':>7} {'sessions':>9} {'batch':>6}")


def table_row(cell: Cell) -> str:
    return (f"{cell.index_k:>7} {cell.hicache:>7} {cell.fix:>4} {cell.concurrency:>5} "
            f"{cell.reads:>6} {cell.reloads:>7} {cell.stale:>6} {cell.rate:>7.1%} "
            f"{cell.per_reload:>7.1%} {cell.sessions_hit:>4}/{cell.sessions:<4} "
            f"{cell.mean_batch:>6.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("gpu", "cpu-standin"), default="gpu")
    parser.add_argument("--reads", type=int, default=400, help="reads per cell, about")
    parser.add_argument("--rounds", type=int, default=4, help="turns per session")
    parser.add_argument("--concurrency", default="1,8,16,24,32,64,80")
    parser.add_argument("--think-ms", type=float, default=2.0,
                        help="longest pause between a session's turns (uniform, seeded)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    ns = parser.parse_args(argv)
    concurrencies = [int(each) for each in ns.concurrency.split(",") if each]
    lines: list[str] = []
    print(HEADER, flush=True)
    started = time.monotonic()
    cells = measure(ns.engine, concurrencies, ns.reads, ns.rounds, ns.think_ms, ns.seed, lines)
    starts = [line for line in lines if "stale index-K read" not in line]
    for line in starts:
        print(line)
    print(f"{len(cells)} cells in {time.monotonic() - started:.1f} s")
    if ns.json:
        document: dict[str, Any] = {
            "engine": ns.engine, "reads": ns.reads, "rounds": ns.rounds,
            "think_ms": ns.think_ms, "seed": ns.seed, "engine_lines": starts,
            "cells": [{**asdict(cell), "rate": cell.rate, "per_reload": cell.per_reload}
                      for cell in cells]}
        ns.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        ns.json.chmod(0o600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
