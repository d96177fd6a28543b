"""Strategy benchmark: correct verdicts, false accusations and real-world cost, per scenario.

Each scenario (bench/scenarios.py) plants culprits among factors; a simulated pool draws every
session of every trial (80 sessions, 4 rounds) and lets the strategies' stop rules end trials
early, as real trials do. Every contender (bench/contenders.py) runs to its own end on the same
seeds; the strategies run on the driver's own loop (bench/simulated.py). Cost is
`gpu_s_equivalent` at the seed investigation's real-world durations (90 s restart + 485 s
workload, 16 GPUs per pool): a full trial is 9,200 GPU-s. Trials draw the noise between trials
(bench/noise.py) of ``--trial-noise``: ``real`` by default, ``iid`` as before issue 27.

    .venv/bin/python -m bench.strategies [--seeds 50] [--pools 2] [--json out.json]
        [--only adaptive,oracle] [--scenario wedge] [--trial-noise real|iid]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.contenders import CONTENDERS
from bench.noise import NOISES, TrialNoise
from bench.scenarios import FULL_TRIAL_GPU_S, Levels, Scenario, scenarios
from bench.simulated import run_strategy
from db.store import Store
from orchestrator.core.verdict import Verdict


def _key(culprits: list[Levels]) -> list[tuple[tuple[str, str], ...]]:
    return sorted(tuple(sorted(c.items())) for c in culprits)


def measure(store: Store, scenario: Scenario, name: str, seeds: int, pools: int = 2,
            noise: TrialNoise | None = None) -> dict[str, Any]:
    """``noise``: between trials (bench/noise.py), else the scenario's (real-world)."""
    run = CONTENDERS[name]
    truth = _key(scenario.culprits)
    correct = accused = 0
    gpu_s, trials = [], []
    for seed in range(seeds):
        pool = scenario.pool(seed, noise)
        campaign_id = f"{scenario.name} / {name} / {seed}"

        def loop(strategy: dict[str, Any], pool: Any = pool, campaign_id: str = campaign_id
                 ) -> Verdict:
            return run_strategy(store, campaign_id, scenario, strategy, pool, pools)

        found = run(scenario, pool, loop)
        correct += found is not None and _key(found) == truth
        # a false accusation: any named set that is not exactly a planted one (issue 13)
        accused += found is not None and any(key not in truth for key in _key(found))
        gpu_s.append(pool.gpu_s)
        trials.append(pool.trials)
    return {"scenario": scenario.name, "strategy": name, "seeds": seeds,
            "correct": correct / seeds, "false_accusation": accused / seeds,
            "median_trials": statistics.median(trials), "median_gpu_s": statistics.median(gpu_s)}


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
                        help="contenders to run, comma-separated (the table needs all)")
    parser.add_argument("--scenario", default="",
                        help="run only the scenarios whose name contains this")
    parser.add_argument("--trial-noise", choices=list(NOISES), default="real",
                        help="noise between trials (bench/noise.py): real (default) or iid")
    args = parser.parse_args()
    noise = NOISES[args.trial_noise]
    names = [n for n in CONTENDERS if n in args.only.split(",")]
    rows = []
    started = time.monotonic()
    folder = tempfile.TemporaryDirectory(prefix="bisect-bench-")
    store = Store.open(str(Path(folder.name) / "strategies.db"))  # every campaign, one file
    for scenario in [s for s in scenarios() if args.scenario in s.name]:
        for name in names:
            row = measure(store, scenario, name, args.seeds, args.pools, noise)
            rows.append(row)
            print(f"{scenario.name:36} {name:28} correct {row['correct']:5.0%}  "
                  f"false {row['false_accusation']:5.1%}  trials {row['median_trials']:5.1f}  "
                  f"full-trial equivalents {row['median_gpu_s'] / FULL_TRIAL_GPU_S:5.2f}",
                  flush=True)
    print(f"({args.seeds} seeds per cell, {args.pools} pool(s), {noise.describe()}, "
          f"{time.monotonic() - started:.0f} s)\n")
    if names == list(CONTENDERS):
        print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
