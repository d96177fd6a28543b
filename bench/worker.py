"""The job protocol between bench/harness.py and its pinned client processes.

A client process is started once (so interpreter start-up and imports are paid once, outside
every measurement) and then reads one JSON job per line on stdin; for each it writes one line
``RESULT {json}`` on stdout (other output, e.g. bench_serving's report, is ignored). CPU time is
this process's user + system time (all threads) taken around the job's load phase only; the
wall time the cyclic garbage collector took within it is reported too (``gc.callbacks``).
"""

from __future__ import annotations

import gc
import json
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

MARK = "RESULT "
Job = dict[str, Any]


def cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


class GcClock:
    """Seconds spent in the cyclic garbage collector since the last ``reset()``."""

    def __init__(self) -> None:
        self.total = self.began = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, _: dict[str, Any]) -> None:
        if phase == "start":
            self.began = time.perf_counter()
        else:
            self.total += time.perf_counter() - self.began

    def reset(self) -> None:
        self.total = 0.0


GC_CLOCK = GcClock()


class Meter:
    """CPU, wall and GC seconds from ``start()`` to ``figures()``."""

    def start(self) -> None:
        GC_CLOCK.reset()
        self.cpu, self.wall = cpu_s(), time.perf_counter()

    def figures(self) -> dict[str, float]:
        return {"cpu_s": cpu_s() - self.cpu, "wall_s": time.perf_counter() - self.wall,
                "gc_s": GC_CLOCK.total}


def measure(load: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``load()``'s own figures plus the CPU, wall and GC seconds it took."""
    meter = Meter()
    meter.start()
    figures = load()
    return {**meter.figures(), **figures}


def serve(run: Callable[[Job], dict[str, Any]]) -> None:
    """Answer jobs from stdin until it closes; a failed job answers ``{"error": ...}``."""
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = run(json.loads(line))
        except (Exception, SystemExit) as exc:  # bench_serving exits on bad input
            result = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(MARK + json.dumps(result) + "\n")
        sys.stdout.flush()
