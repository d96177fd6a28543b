"""Strategy benchmark: correct verdicts, false accusations and real-world cost, per scenario.

Each scenario (bench/scenarios.py) plants culprits among factors; a simulated pool draws every
session of every trial (80 sessions, 4 rounds) and lets the strategies' stop rules end trials
early, as real trials do. Every contender (bench/contenders.py) runs to its own end on the same
seeds; the strategies run on the driver's own loop (bench/simulated.py). Cost is
`gpu_s_equivalent` at the seed investigation's real-world durations (90 s restart + 485 s
workload, 16 GPUs per pool): a full trial is 9,200 GPU-s. Trials draw the noise between trials
(bench/noise.py) of ``--trial-noise``: ``real`` by default, ``iid`` as before issue 27.

    .venv/bin/python -m bench.strategies [--seeds 50] [--pools 2] [--json out.json]
        [--only adaptive,oracle] [--scenario wedge] [--trial-noise real|iid] [--workers 2]

``--only adaptive-12`` (or ``adaptive-24``): the adaptive strategy with that many trials a
variant, its budget, where the default (6) falls short; ``adaptive-12-480`` with a campaign
budget of 480 trials too (the default: 120); ``adaptive-24-480`` both, and ``oracle-24-480`` the
oracle at that budget (the cost ratio there).

``--workers``: processes, each a share of the seeds and a store of its own (the seeds' draws do
not depend on which process runs them). The JSON lists the seeds each cell got wrong, and each
cell's mean and 90th percentile cost beside the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.contenders import BUDGETS, CONTENDERS
from bench.noise import NOISES, TrialNoise
from bench.scenarios import FULL_TRIAL_GPU_S, Levels, Scenario, scenarios
from bench.simulated import run_strategy
from db.store import Store
from orchestrator.core.verdict import Verdict


def _key(culprits: list[Levels]) -> list[tuple[tuple[str, str], ...]]:
    return sorted(tuple(sorted(c.items())) for c in culprits)


def _seeds(scenario_name: str, name: str, seeds: list[int], pools: int, noise: TrialNoise,
           ) -> list[dict[str, Any]]:
    """Each seed's outcome: right, a false set named, its cost (one store for these seeds)."""
    scenario = next(s for s in scenarios() if s.name == scenario_name)
    run = {**CONTENDERS, **BUDGETS}[name]
    truth = _key(scenario.culprits)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bisect-bench-") as folder:
        store = Store.open(str(Path(folder) / "strategies.db"))
        for seed in seeds:
            pool = scenario.pool(seed, noise)
            campaign_id = f"{scenario.name} / {name} / {seed}"

            def loop(strategy: dict[str, Any], pool: Any = pool, campaign_id: str = campaign_id
                     ) -> Verdict:
                return run_strategy(store, campaign_id, scenario, strategy, pool, pools)

            found = run(scenario, pool, loop)
            rows.append({"seed": seed, "correct": found is not None and _key(found) == truth,
                         # a false accusation: any named set that is not exactly a planted one
                         "accused": found is not None and any(k not in truth for k in _key(found)),
                         "named": None if found is None else [dict(k) for k in _key(found)],
                         "gpu_s": pool.gpu_s, "trials": pool.trials})
        store.close()
    return rows


def measure(scenario: Scenario, name: str, seeds: int, pools: int = 2,
            noise: TrialNoise | None = None, workers: int = 1, first: int = 0,
            ) -> dict[str, Any]:
    """``noise``: between trials (bench/noise.py), else the scenario's (real-world)."""
    every = list(range(first, first + seeds))
    drawn = noise or scenario.noise
    if workers == 1:
        rows = _seeds(scenario.name, name, every, pools, drawn)
    else:
        with ProcessPoolExecutor(workers) as ex:
            parts = [ex.submit(_seeds, scenario.name, name, every[i::workers], pools, drawn)
                     for i in range(workers) if every[i::workers]]
            rows = [row for part in parts for row in part.result()]
    rows.sort(key=lambda r: r["seed"])
    return {"scenario": scenario.name, "strategy": name, "seeds": seeds,
            "correct": sum(r["correct"] for r in rows) / seeds,
            "false_accusation": sum(r["accused"] for r in rows) / seeds,
            "median_trials": statistics.median(r["trials"] for r in rows),
            "median_gpu_s": statistics.median(r["gpu_s"] for r in rows),
            # a seed's cost has a long tail (a test that runs on to 24 trials): its mean and
            # 90th percentile beside the median the tables quote
            "mean_gpu_s": statistics.fmean(r["gpu_s"] for r in rows),
            "p90_gpu_s": statistics.quantiles([r["gpu_s"] for r in rows], n=10)[-1]
            if len(rows) > 1 else rows[0]["gpu_s"],
            "wrong": [r for r in rows if not r["correct"]]}


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of BENCHMARKS.md: one line per scenario, adaptive's ratios last."""
    names = list(CONTENDERS)
    against = ["oracle", "one-at-a-time x2 (baseline)", "factorial x2 (baseline)"]
    head = ["scenario", *names, "adaptive ÷ oracle", "÷ one-at-a-time x2", "÷ factorial x2"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        by = {r["strategy"]: r for r in rows if r["scenario"] == scenario}
        cells = [f"{by[n]['correct']:.0%} / {by[n]['false_accusation']:.1%} / "
                 f"{by[n]['median_gpu_s'] / FULL_TRIAL_GPU_S:.1f} ({by[n]['median_trials']:g})"
                 for n in names]
        ratios = [by["adaptive"]["median_gpu_s"] / by[n]["median_gpu_s"] for n in against]
        lines.append("| " + " | ".join([scenario, *cells, *(f"{r:.2f}" for r in ratios)]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--json", default=None)
    parser.add_argument("--pools", type=int, default=2,
                        help="pools the strategies' campaigns run on (2, as the demo's; with 1 "
                             "each trial is proposed after every earlier one has ended)")
    parser.add_argument("--only", default=",".join(CONTENDERS),
                        help="contenders to run, comma-separated (the table needs all; "
                             f"also: {', '.join(BUDGETS)})")
    parser.add_argument("--scenario", default="",
                        help="run only the scenarios whose name contains this")
    parser.add_argument("--trial-noise", choices=list(NOISES), default="real",
                        help="noise between trials (bench/noise.py): real (default) or iid")
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the seeds")
    parser.add_argument("--first-seed", type=int, default=0)
    args = parser.parse_args()
    noise = NOISES[args.trial_noise]
    names = [n for n in {**CONTENDERS, **BUDGETS} if n in args.only.split(",")]
    rows = []
    started = time.monotonic()
    for scenario in [s for s in scenarios() if args.scenario in s.name]:
        for name in names:
            row = measure(scenario, name, args.seeds, args.pools, noise, args.workers,
                          args.first_seed)
            rows.append(row)
            print(f"{scenario.name:36} {name:28} correct {row['correct']:6.1%}  "
                  f"false {row['false_accusation']:5.1%}  trials {row['median_trials']:5.1f}  "
                  f"full-trial equivalents {row['median_gpu_s'] / FULL_TRIAL_GPU_S:5.2f} "
                  f"(mean {row['mean_gpu_s'] / FULL_TRIAL_GPU_S:.2f}, 90th percentile "
                  f"{row['p90_gpu_s'] / FULL_TRIAL_GPU_S:.2f})", flush=True)
    print(f"({args.seeds} seeds per cell, {args.pools} pool(s), {noise.describe()}, "
          f"{time.monotonic() - started:.0f} s)\n")
    if names == list(CONTENDERS):
        print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
