"""Small campaigns for the fault-injection tests, and one trial run in this process.

A trial's pipeline is ``PoolRunner`` (orchestrator/executor/trial.py); the tests run it here,
without Ray, when they judge what one fault does to one trial, and run whole campaigns (with
Ray) when they judge what the driver makes of it (retries, unresolvable variants, a failed run).
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path
from typing import Any

from db.records import TrialRecord
from experiments.outcomes import is_corrupt
from orchestrator.executor.base import TrialOrder, TrialReport
from orchestrator.executor.trial import PoolRunner

# One factor whose levels restart the twin (a flag) but change nothing it serves.
RESTARTING_FACTOR: dict[str, Any] = {"name": "page", "levels": {
    "p1": {"flags": ["--page-size", "1"]}, "p2": {"flags": ["--page-size", "2"]}}}
QUICK_WORKLOAD: dict[str, Any] = {"sessions": 6, "rounds": 2, "timeout_s": 3, "seed": 3}


def twin_service(port: int, *, node: str = "here", host: str = "127.0.0.1",
                 health: str | None = None, metrics: str | None = None,
                 fault_model: Path | None = None, startup_timeout_s: float = 20,
                 name: str = "sglang") -> dict[str, Any]:
    """A combined twin listening on ``host:port``; its health and metrics URLs may go another
    way (through a fault proxy)."""
    base = f"http://{host}:{port}"
    model = ["--fault-model", str(fault_model)] if fault_model is not None else []
    return {
        "name": name, "node": node,
        "start": [sys.executable, "-m", "experiments.twin", "--host", host, "--port", str(port),
                  "--enable-metrics", "--twin-startup-delay", "0", "--twin-latency-ms", "2",
                  *model],
        "health_url": health or f"{base}/health",
        "metrics_url": metrics or f"{base}/metrics",
        "startup_timeout_s": startup_timeout_s,
        "log_markers": ["The server is fired up and ready to roll!"],
    }


def campaign(workdir: Path, pools: list[dict[str, Any]], *, name: str = "faults",
             nodes: list[dict[str, Any]] | None = None,
             factors: list[dict[str, Any]] | None = None,
             workload: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "nodes": nodes or [{"name": "here", "workdir": str(workdir / "services")}],
        "pools": pools,
        "factors": factors or [RESTARTING_FACTOR],
        "workload": {**QUICK_WORKLOAD, **(workload or {})},
        "strategy": {"kind": "factorial", "repeats": 1},
        **extra,
    }


class TrialBench:
    """One pool's runner in this process: ``run(levels)`` is one trial, as an actor runs it."""

    def __init__(self, campaign_json: dict[str, Any], pool: str) -> None:
        self.runner = PoolRunner(campaign_json, pool)
        self.trials = 0

    def run(self, levels: dict[str, str], seed: int = 11) -> TrialReport:
        self.trials += 1
        return asyncio.run(self.runner.run_trial(TrialOrder(self.trials, levels, seed)))

    def deploy(self, levels: dict[str, str]) -> int:
        """Only the deploy step (apply, restart, prove); returns the restarts it needed."""
        return self.runner.deploy(levels)

    def shutdown(self) -> None:
        asyncio.run(self.runner.shutdown())


def outcomes(report: TrialReport) -> list[str]:
    return [s.outcome for s in report.sessions]


def corrupt(report: TrialReport) -> int:
    return sum(is_corrupt(o) for o in outcomes(report))


def corrupt_in(trials: list[TrialRecord]) -> int:
    return sum(n for t in trials for outcome, n in t.counts.items() if is_corrupt(outcome))


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (relative name → sha256): two equal snapshots are two
    identical trees."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}
