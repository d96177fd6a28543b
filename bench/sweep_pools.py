"""Sweeps on several pools: how often an unchanged build alerts where the pools differ in speed.

A sweep whose build moved runs each trial beside a control of the baseline's build. With
several pools, the driver (orchestrator/executor/driver.py) places the trials; where a pair's
two trials may land on two pools, and the fewest restarts keep each build on its own pool, the
pools' own speeds stand between the sides. This runs that case on the real campaign loop
(``drive``, its placement, a SQLite store, the stored trials' verdict) with simulated pools
(bench/sweep_world.py's ``Machine``: the noise between trials of bench/noise.py, ``REAL_WORLD``
less its random pool offsets, and the pools' speeds given, ``--speeds``). Each run: the sweep's
baseline run (on one pool), then its current run with the build moved, clean (every variant as
in the baseline), on ``len(speeds)`` pools.

    .venv/bin/python -m bench.sweep_pools [--runs 50] [--seed 1] [--speeds 0.9,1] [--variants 3]

Prints the alerts (exit 1: a false alert, nothing changed), the clean and inconclusive runs
with exact 95% intervals, the trials, and the trials that ran with no trial of the other build
beside them on their pool (per variant and pool, the excess of one build's trials over the
other's: 0 where every pair ran on one pool).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from collections import Counter, deque
from pathlib import Path
from typing import Any

import numpy as np

from bench.noise import REAL_WORLD
from bench.simulated import SimulatedPools
from bench.sweep_fast import fast_comparisons
from bench.sweep_world import FACTOR, SCENARIOS, SESSIONS, VARIANTS, Machine, Rates, baseline_run
from bench.sweeps import plan_of, share
from db.records import SessionRow, TrialTiming
from db.store import Store
from experiments.campaign import Campaign
from experiments.strategy_config import SweepConfig
from orchestrator.core.strategies.sweep import BUILD
from orchestrator.executor.base import TrialOrder, TrialReport
from orchestrator.executor.driver import drive
from orchestrator.stored import verdict_of


class SweepPools(SimulatedPools):
    """The ``Executor`` of simulated pools drawing from one ``Machine``: trials end in the
    order they started (each takes as long), each drawn on its own pool."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.orders: deque[tuple[str, TrialOrder]] = deque()

    def next_report(self) -> tuple[str, TrialReport]:
        name, order = self.orders.popleft()
        seen = self.machine.trial(dict(order.levels), name)
        outcomes = [outcome for outcome, n in sorted(seen.counts.items()) for _ in range(n)]
        sessions = [SessionRow(index, f"s{index}", outcome, 1, None, None, 0.0)
                    for index, outcome in enumerate(outcomes)]
        timing = TrialTiming(wall_s=0.0, restart_s=0.0, workload_s=seen.workload_s,
                             restarts=1, stopped_early=False)
        performance = None if seen.performance is None else dataclasses.asdict(seen.performance)
        return name, TrialReport(order.trial_id, None, timing, sessions,
                                 performance=performance)


def pools_campaign(plan: SweepConfig, pools: int) -> Campaign:
    """A sweep run's campaign with its build moved: the variants' factor, the build (a git
    level, so that moving it restarts a pool, as a real build does) and ``pools`` pools."""
    return Campaign.model_validate({
        "name": "bench: sweep on pools",
        "nodes": [{"name": "local", "transport": "local", "workdir": "/nonexistent"}],
        "pools": [{"name": f"pool-{index}", "endpoint": f"http://127.0.0.1:{index}",
                   "services": [{"name": f"server-{index}", "node": "local", "start": ["true"],
                                 "health_url": f"http://127.0.0.1:{index}/health"}]}
                  for index in range(1, pools + 1)],
        "factors": [
            {"name": FACTOR, "levels": {v.name: {"env": {"CONFIG": v.name}} for v in VARIANTS}},
            {"name": BUILD, "levels": {"current": None, "baseline": {
                "git": {"tree": "/nonexistent/src", "ref": "0" * 40}}}}],
        "workload": {"sessions": SESSIONS, "seed": 1},
        "strategy": plan.model_dump(mode="json"),
        "known_good": {FACTOR: "production", BUILD: "current"},
    })


def unpartnered(store: Store, campaign_id: str) -> int:
    """Trials with no trial of the other build beside them on their pool: per variant and
    pool, how many more trials one build has than the other."""
    count: Counter[tuple[str, str, str]] = Counter()
    for trial in store.trials(campaign_id):
        count[(trial.levels[FACTOR], trial.pool, trial.levels[BUILD])] += 1
    keys = {(variant, pool) for variant, pool, _ in count}
    return sum(abs(count[(v, p, "current")] - count[(v, p, "baseline")]) for v, p in keys)


def one_run(store: Store, seed: int, index: int, speeds: tuple[float, ...],
            variants: int = len(VARIANTS)) -> dict[str, Any]:
    """Run ``index`` of ``seed``: its baseline run, then its current run on the pools of
    ``speeds``, through ``drive``; its status and trials (of the first ``variants``)."""
    noise = dataclasses.replace(REAL_WORLD, pool_spread=0.0, pools=tuple(
        (f"pool-{n}", 1.0, speed) for n, speed in enumerate(speeds, start=1)))
    machine = Machine(np.random.default_rng([seed, index]), Rates(noise=noise), SCENARIOS[0])
    plan = plan_of().model_copy(update={"variants": list(VARIANTS[:variants])})
    plan = plan.model_copy(update={"baseline": baseline_run(plan, machine), "baseline_run": 1,
                                   "confirm_build": True})
    campaign = pools_campaign(plan, len(speeds))
    campaign_id = f"run-{index}"
    store.create_campaign(campaign_id, campaign.name, campaign.model_dump(mode="json"), "bench")
    with fast_comparisons():  # the same answers, sooner (bench/sweep_fast.py)
        drive(store, campaign_id, campaign, SweepPools(machine))
    verdict = verdict_of(store, campaign_id)
    return {"index": index, "status": str(verdict.status), "trials": len(store.trials(campaign_id)),
            "unpartnered": unpartnered(store, campaign_id), "reason": verdict.reason}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--speeds", default="0.9,1", help="each pool's speed, comma-separated")
    parser.add_argument("--variants", type=int, default=len(VARIANTS),
                        help="the sweep's first N variants (production first)")
    args = parser.parse_args(argv)
    speeds = tuple(float(s) for s in args.speeds.split(","))
    rows = []
    with tempfile.TemporaryDirectory() as home, Store.open(str(Path(home) / "b.db")) as store:
        for index in range(args.runs):
            rows.append(one_run(store, args.seed, index, speeds, args.variants))
            row = rows[-1]
            print(f"run {index}: {row['status']}, {row['trials']} trials, "
                  f"{row['unpartnered']} unpartnered", flush=True)
    n = len(rows)
    for status, word in (("culprit", "false alerts"), ("no_culprit", "clean"),
                         ("inconclusive", "inconclusive")):
        got = share(sum(r["status"] == status for r in rows), n)
        low, high = got["cp95"]
        print(f"{word}: {got['k']}/{n} ({low:.1%}-{high:.1%})")
    print(f"trials: mean {statistics.fmean(r['trials'] for r in rows):.1f}; unpartnered "
          f"trials: mean {statistics.fmean(r['unpartnered'] for r in rows):.1f}, runs with "
          f"any {sum(r['unpartnered'] > 0 for r in rows)}/{n}")


if __name__ == "__main__":
    main()
