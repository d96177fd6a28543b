"""What would make bisect's ``run_stress`` cheaper per request: measured, not applied.

Runs ``run_stress`` against the instant stub (bench/stub_server.py, core 1) from this process
(core 0) as it is, and with three changes patched in at run time (the project's code is not
edited): a larger gen-0 threshold for the cyclic GC during the run, orjson for the request bodies
and the SSE events, and uvloop's event loop (only when ``uvloop`` imports). Variants interleave;
medians of ms CPU per request are printed.

    .venv/bin/python bench/whatif.py [--reps 5] [--sessions 1000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import statistics
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from procs import start_stub
from worker import cpu_s

import experiments.workload.client as client_module
import experiments.workload.stress as stress_module
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import run_stress

try:
    import uvloop
except ImportError:  # not a dependency of the project
    uvloop = None

GC_DEFAULT, GC_RAISED = (700, 10, 10), (100_000, 50, 1000)
SESSION = aiohttp.ClientSession


class OrJson:
    """The two functions of ``json`` that the workload client calls, from orjson."""

    loads = staticmethod(orjson.loads)

    @staticmethod
    def dumps(value: Any, **_: Any) -> str:
        return orjson.dumps(value).decode()


def one(url: str, spec: WorkloadSpec, raised_gc: bool, use_orjson: bool, use_uvloop: bool
        ) -> float:
    client_module.json = OrJson if use_orjson else json  # type: ignore[assignment]
    stress_module.aiohttp.ClientSession = (  # type: ignore[misc]
        functools.partial(SESSION, json_serialize=OrJson.dumps) if use_orjson else SESSION)
    gc.set_threshold(*(GC_RAISED if raised_gc else GC_DEFAULT))
    coroutine: Coroutine[Any, Any, Any] = run_stress(url, spec)
    try:
        began = cpu_s()
        result = uvloop.run(coroutine) if use_uvloop and uvloop else asyncio.run(coroutine)
        spent = cpu_s() - began
    finally:
        client_module.json = json  # type: ignore[assignment]
        stress_module.aiohttp.ClientSession = SESSION  # type: ignore[misc]
        gc.set_threshold(*GC_DEFAULT)
    assert all(s.outcome.value == "ok" for s in result.sessions), result.counts()
    return 1000 * spent / sum(len(s.requests) for s in result.sessions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--port", type=int, default=18766)
    args = parser.parse_args()
    variants = {"as is": (False, False, False), "gc": (True, False, False),
                "gc+orjson": (True, True, False)}
    if uvloop is not None:
        variants["gc+orjson+uvloop"] = (True, True, True)
    url = f"http://127.0.0.1:{args.port}"
    stub = start_stub(Path(__file__).resolve().parent / "stub_server.py", args.port, 1)
    os.sched_setaffinity(0, {0})
    try:
        for stream in (True, False):
            for concurrency in (1000, 400, 80):
                spec = WorkloadSpec(sessions=args.sessions, rounds=args.rounds, stream=stream,
                                    max_concurrency=concurrency, model="stub", timeout_s=120)
                one(url, spec, False, False, False)  # warm-up
                got: dict[str, list[float]] = {name: [] for name in variants}
                for _ in range(args.reps):
                    for name, flags in variants.items():
                        got[name].append(one(url, spec, *flags))
                print(f"stream={stream!s:<5} N={concurrency:<5} " + "  ".join(
                    f"{name} {statistics.median(values):.3f}" for name, values in got.items()),
                    flush=True)
    finally:
        stub.terminate()
        stub.wait(10)


if __name__ == "__main__":
    main()
