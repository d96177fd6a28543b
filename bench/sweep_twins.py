"""Sweeps on twins: how often runs of an unchanged build alert, over many real runs.

The measurement tests/test_sweep_alerts.py used to make in the test suite (20 runs, 105 s on
CI; the test keeps 5): the same sweep file (tests/sweep_support.py's, as that test writes it:
one variant, twins with a 1% background of leaks, 60 sessions a trial, 2 to 4 trials, corruption
and wedging watched at 10 points), accepted once, then run ``--runs`` times as `bisect sweep`
runs it (``run_sweep``, in this process, on one local Ray). bench/sweeps.py measures the same
question on simulated trials by the thousand; this checks the figure holds when every part is
real: the twins restarted, the workload over HTTP, a Ray pool actor per run, a SQLite store.

    .venv/bin/python -m bench.sweep_twins [--runs 40] [--json FILE]

Prints one line a run (its exit code, status, trials, seconds) and the rates of alerts (exit 1),
clean runs (exit 0) and inconclusive ones (exit 3) with their exact 95% intervals.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.sweeps import share
from db.store import Store
from experiments.sweep import load_sweep
from orchestrator.executor.ray_pool import ensure_ray
from orchestrator.sweeps.run import SweepOutcome, run_sweep
from tests.support.twins import FAST
from tests.sweep_support import commit_faults, sweep_file

# What tests/test_sweep_alerts.py's unchanged-build test watches, and how much it measures.
WATCHED = {"corruption": 0.1, "wedging": 0.1, "throughput": None, "p99_latency": None}
TRIALS = {"min": 2, "max": 4, "confirm": 2}
SESSIONS = 60


def sweep_path(home: Path) -> Path:
    tree = home / "src"
    commit_faults(tree, 0.0, "first")
    return sweep_file(home, tree, hunt=False, thresholds=WATCHED,
                      variants={"production": {"hicache": "off"}}, sessions=SESSIONS,
                      trials=TRIALS, extra_flags=list(FAST))


def one_run(store: Store, path: Path, accept: bool = False) -> tuple[SweepOutcome, float]:
    started = time.monotonic()
    outcome = run_sweep(store, load_sweep(path), path.read_text(), accept=accept)
    return outcome, time.monotonic() - started


def measure(runs: int, home: Path) -> dict[str, Any]:
    path = sweep_path(home)
    rows: list[dict[str, Any]] = []
    with Store.open(str(home / "bisect.db")) as store:
        first, _ = one_run(store, path, accept=True)
        assert first.accepted, first.result
        for number in range(1, runs + 1):
            outcome, wall_s = one_run(store, path)
            stored = store.trials(outcome.run.campaign_id or "")
            # each run its own draw (issue 27): its seed, and what its trials saw
            leaks = [sum(n for o, n in t.counts.items() if o != "ok") for t in stored]
            rows.append({"run": number, "exit": outcome.exit_code, "status": outcome.status,
                         "trials": len(stored), "wall_s": round(wall_s, 2),
                         "seed": outcome.result.get("seed"), "not_ok": leaks})
            print(f"run {number:3}: exit {outcome.exit_code} {outcome.status:12} "
                  f"{len(stored)} trials {wall_s:5.1f} s, seed {outcome.result.get('seed')}, "
                  f"sessions not ok by trial {leaks}", flush=True)
    return summarise(rows)


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    return {"runs": n, "sessions": SESSIONS, "trials": TRIALS, "thresholds": WATCHED,
            "alert": share(sum(r["exit"] == 1 for r in rows), n),
            "clean": share(sum(r["exit"] == 0 for r in rows), n),
            "inconclusive": share(sum(r["exit"] == 3 for r in rows), n),
            "trials_mean": statistics.fmean(r["trials"] for r in rows),
            "wall_s_median": statistics.median(r["wall_s"] for r in rows),
            "distinct_seeds": len({r.get("seed") for r in rows}),
            "rows": list(rows)}


def shown(figure: dict[str, Any]) -> str:
    low, high = figure["cp95"]
    return f"{figure['rate']:.1%} ({figure['k']}/{figure['n']}; 95% {low:.1%}-{high:.1%})"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("BISECT_TRIAGE", "builtin")  # sweeps judged, not triage (the test's)
    ensure_ray()  # one local Ray for every run, as the test run's
    with tempfile.TemporaryDirectory(prefix="bisect-bench-sweep-") as tmp:
        result = measure(args.runs, Path(tmp))
    print(f"alert (exit 1) {shown(result['alert'])}; clean (exit 0) {shown(result['clean'])}; "
          f"inconclusive (exit 3) {shown(result['inconclusive'])}; "
          f"{result['trials_mean']:.2f} trials a run, {result['wall_s_median']:.1f} s a run "
          f"(median), {result['distinct_seeds']} distinct seeds")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
