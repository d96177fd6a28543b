"""The job protocol between bench/harness.py and its pinned client processes.

A client process is started once (so interpreter start-up and imports are paid once, outside
every measurement) and then reads one JSON job per line on stdin; for each it writes one line
``RESULT {json}`` on stdout (other output, e.g. bench_serving's report, is ignored). CPU time is
this process's user + system time (all threads) taken around the job's load phase only.
"""

from __future__ import annotations

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


def measure(load: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``load()``'s own figures plus the CPU and wall seconds it took (unless it gave them)."""
    cpu0, wall0 = cpu_s(), time.perf_counter()
    figures = load()
    return {"cpu_s": cpu_s() - cpu0, "wall_s": time.perf_counter() - wall0, **figures}


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
