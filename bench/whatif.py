"""What would make bisect's ``run_stress`` cheaper per request: measured, not applied.

Runs ``run_stress`` against the instant stub (bench/stub_server.py, core 1) from this process
(core 0) as it is, and with changes patched in at run time (the project's code is not edited):
``gc.freeze()`` before the run (the imported modules' objects leave the cyclic GC's view), a
larger gen-0 threshold of the cyclic GC during the run, then also orjson for the request bodies
and the SSE events, then also uvloop's event loop (only when ``uvloop`` imports). Variants
interleave; medians of ms CPU per request are printed, and for "as is" how much of it the cyclic
GC took (timed with ``gc.callbacks``).

    .venv/bin/python bench/whatif.py [--reps 3] [--sessions 1000] [--rounds 2]
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
from worker import GC_CLOCK, cpu_s

import experiments.workload.client as client_module
import experiments.workload.stress as stress_module
import orchestrator.cli  # noqa: F401  (the objects the `bisect stress` process holds: GC work)
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import run_stress

try:
    import uvloop
except ImportError:  # not a dependency of the project
    uvloop = None

GC_DEFAULT, GC_RAISED = (700, 10, 10), (100_000, 50, 1000)
SESSION = aiohttp.ClientSession
Flags = tuple[bool, bool, bool, bool]  # freeze, raised threshold, orjson, uvloop


class OrJson:
    """The two functions of ``json`` that the workload client calls, from orjson."""

    loads = staticmethod(orjson.loads)

    @staticmethod
    def dumps(value: Any, **_: Any) -> str:
        return orjson.dumps(value).decode()


def one(url: str, spec: WorkloadSpec, flags: Flags) -> tuple[float, float]:
    """ms CPU per request, and ms of it in the cyclic GC."""
    freeze, raised_gc, use_orjson, use_uvloop = flags
    client: Any = client_module
    http: Any = stress_module.aiohttp  # the aiohttp module, as run_stress sees it
    client.json = OrJson if use_orjson else json
    http.ClientSession = (
        functools.partial(SESSION, json_serialize=OrJson.dumps) if use_orjson else SESSION)
    gc.set_threshold(*(GC_RAISED if raised_gc else GC_DEFAULT))
    if freeze:
        gc.freeze()
    coroutine: Coroutine[Any, Any, Any] = run_stress(url, spec)
    try:
        GC_CLOCK.reset()
        began = cpu_s()
        result = uvloop.run(coroutine) if use_uvloop and uvloop else asyncio.run(coroutine)
        spent = cpu_s() - began
    finally:
        client.json = json
        http.ClientSession = SESSION
        gc.set_threshold(*GC_DEFAULT)
        gc.unfreeze()
    assert all(s.outcome.value == "ok" for s in result.sessions), result.counts()
    requests = sum(len(s.requests) for s in result.sessions)
    return 1000 * spent / requests, 1000 * GC_CLOCK.total / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--port", type=int, default=18766)
    args = parser.parse_args()
    variants: dict[str, Flags] = {
        "as is": (False, False, False, False), "gc.freeze": (True, False, False, False),
        "gc threshold": (False, True, False, False), "+orjson": (False, True, True, False)}
    if uvloop is not None:
        variants["+uvloop"] = (False, True, True, True)
    url = f"http://127.0.0.1:{args.port}"
    stub = start_stub(Path(__file__).resolve().parent / "stub_server.py", args.port, 1)
    os.sched_setaffinity(0, {0})
    try:
        for stream in (True, False):
            for concurrency in (1000, 400, 80):
                spec = WorkloadSpec(sessions=args.sessions, rounds=args.rounds, stream=stream,
                                    max_concurrency=concurrency, model="stub", timeout_s=120)
                one(url, spec, variants["as is"])  # warm-up
                got: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
                for _ in range(args.reps):
                    for name, flags in variants.items():
                        got[name].append(one(url, spec, flags))
                in_gc = statistics.median(gc_ms for _, gc_ms in got["as is"])
                print(f"stream={stream!s:<5} N={concurrency:<5} " + "  ".join(
                    f"{name} {statistics.median(ms for ms, _ in values):.3f}"
                    for name, values in got.items()) + f"  (GC in 'as is': {in_gc:.3f})",
                    flush=True)
    finally:
        stub.terminate()
        stub.wait(10)


if __name__ == "__main__":
    main()
