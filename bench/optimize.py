"""Optimize benchmark: the GPU-time `bisect optimize` spends to reach the best safe configuration
of a space with a planted trade-off (bench/knob_space.py: the fastest configurations corrupt
30% of sessions), against grid and random search of the same space, in one run (issue 17).

Every search runs the real loop: ``drive`` over the simulated pools (``KnobPools``), a real SQLite
store and the real Optuna study, in memory (it picks what the study next to the store picks, at a
quarter of the CPU: ``bench.optimize_runs.measure``), the strategy's defaults but where the command
line says otherwise. Seed ``s`` is both the sampler's seed and the pools' noise seed, the same for
every sampler. Trials carry the noise between trials (bench/noise.py) of ``--trial-noise``: ``real``
by default (a restart halves or doubles the corruption rate at one sd, moves the speed, pools apart,
a drift), ``iid`` as before issue 27. ``--speeds``: that many pools, each of that speed (no random
pool offsets), the trials placed on them by the driver.

*Reach*: the first trial after which the answer (``Optimize.conclude`` on the stored trials up
to it: the best safe configuration with ``confirm_trials`` trials) is *right*: truly safe
(``corruption == 0``) and within 2% of the true throughput of ``BEST``. There are 11 such
configurations of 1,280. GPU-time to reach: the verdict's ``gpu_s_equivalent`` of those trials
(restart + workload, a stopped trial's share of it, x 8 GPUs). Every prefix's answer is also
checked for an unsafe best (it must never be).

*Against production* (issue 27): the final verdict's ``versus_production`` (a one-sided paired
t-test of the answer against production on the final phase's pairs, run alternated after
confirmation; a Welch test on all trials where production was shown unsafe) is one claim of
``CLAIMS``: ``better`` (shown better), ``no better`` (not shown better: tested, or untested with
fewer than 2 pairs, or trials on a side), ``production best`` (production itself is the answer),
``production not measured`` (a grid that never reached it) or ``nothing named``. Each is held
against the space's truth, noise-free: a ``better`` answer is *truly faster* when its true
throughput is above production's, and *truly safe* when it corrupts nothing; a ``no better``
one is *right* when its true throughput is not above production's. Shares with their 95%
Clopper-Pearson intervals, per search and over all runs; the target: of the runs that say
better, at least 95% truly faster. ``--production best`` declares ``BEST`` as production:
nothing safe is truly faster, so every ``better`` of a safe answer is a false one.

Searches compared, for each seed:

- ``tpe``, ``gp``: ``--trials`` search trials (seeds included), then the confirmation re-runs;
- ``random``: the same budget (how often it reaches within it);
- ``random, oracle-stopped`` and ``grid, oracle-stopped``: the sampler's order is drawn first
  (an in-memory study with the same sampler and seed: random and grid orders do not depend on
  the values told), and the budget is set to the first trial that measures a right
  configuration; if that run's confirmed answer is not right, the next one. A lower bound of
  their cost: neither can know when to stop;
- ``grid, full``: what the grid costs as ``sampler: grid`` runs it: all 1,280 configurations
  (production and known-good among them, not before), then the confirmation. Computed, not
  run (the loop rereads the store every trial: too slow here for 1,280 trials): the
  oracle-stopped grid's GPU-s per search trial (a random sample of the grid's order, stops
  included) x 1,280, plus its confirmation's GPU-s.

    .venv/bin/python -m bench.optimize [--seeds 5] [--first-seed 1] [--trials 30]
        [--samplers tpe,gp,random,grid] [--startup-trials 8] [--confirm-top 3]
        [--confirm-trials 3] [--gp-seeds N] [--workers 2] [--json FILE]
        [--trial-noise real|iid] [--production space|best] [--speeds 0.9,1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

from bench.knob_space import BEST, throughput
from bench.noise import NOISES
from bench.optimize_figures import (
    against_production,
    better_verdict,
    ratios,
    render,
    render_against,
    rows,
    verdicts,
)
from bench.optimize_runs import NEAR, PRODUCTIONS, Run, Settings, search_run, searches

SAMPLERS = ("tpe", "gp", "random", "grid")


def _job(args: tuple[str, int, Settings]) -> Run:
    run = search_run(*args)
    print(f"  {run.search}, seed {run.seed}: {run.trials} trials, reached at {run.reached}, "
          f"against production: {run.claim} ({run.production_trials} trials of it), "
          f"{run.wall_s:.0f} s", file=sys.stderr, flush=True)
    return run


def benchmark(settings: Settings, seeds: Sequence[int], samplers: Sequence[str],
              workers: int, gp_seeds: int | None = None) -> list[Run]:
    """``gp_seeds``: GP searches of the first so many seeds only (each takes minutes here)."""
    jobs = [(search, seed, settings) for search in searches(samplers)
            for seed in (seeds[:gp_seeds] if search == "gp" else seeds)]
    if workers <= 1:
        return [_job(job) for job in jobs]
    slow = sorted(jobs, key=lambda job: job[0] != "gp")  # the longest first: less idle at the end
    with ProcessPoolExecutor(workers) as pool:
        done = dict(zip(slow, pool.map(_job, slow), strict=True))
    return [done[job] for job in jobs]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.optimize", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--trials", type=int, default=Settings.trials)
    parser.add_argument("--startup-trials", type=int, default=Settings.startup_trials)
    parser.add_argument("--confirm-top", type=int, default=Settings.confirm_top)
    parser.add_argument("--confirm-trials", type=int, default=Settings.confirm_trials)
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    parser.add_argument("--gp-seeds", type=int, default=None,
                        help="GP on the first so many seeds only (default: all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--trial-noise", choices=list(NOISES), default="real",
                        help="noise between trials (bench/noise.py): real (default) or iid")
    parser.add_argument("--production", choices=list(PRODUCTIONS), default=Settings.production,
                        help="the production configuration declared: the space's (default) or "
                             "BEST (nothing safe truly faster)")
    parser.add_argument("--speeds", default="",
                        help="each pool's speed, comma-separated (0.9,1: two pools 10%% apart, "
                             "no random pool offsets); default: one pool")
    args = parser.parse_args(argv)
    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()]
    unknown = [s for s in samplers if s not in SAMPLERS]
    if unknown or args.seeds < 1 or args.trials < 1:
        print(f"bench.optimize: --samplers takes {', '.join(SAMPLERS)} (got "
              f"{', '.join(unknown)}); --seeds and --trials at least 1"
              if unknown else "bench.optimize: --seeds and --trials at least 1", file=sys.stderr)
        return 2
    try:
        speeds = tuple(float(s) for s in args.speeds.split(",") if s.strip())
    except ValueError:
        print(f"bench.optimize: --speeds takes numbers, comma-separated (got {args.speeds!r})",
              file=sys.stderr)
        return 2
    settings = Settings(args.trials, args.startup_trials, args.confirm_top, args.confirm_trials,
                        NOISES[args.trial_noise], args.production, speeds)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    started = time.monotonic()
    runs = benchmark(settings, seeds, samplers, args.workers, args.gp_seeds)
    table = rows(runs)
    ratio = ratios(table)
    versus = against_production(runs)
    said = [*verdicts(table, ratio), better_verdict(versus)]
    print(render(table, ratio, settings))
    print()
    print("The final answer against production (true: the space's, noise-free):")
    print(render_against(versus))
    print()
    print("\n".join(said))
    print(f"\n{len(runs)} searches in {time.monotonic() - started:.0f} s")
    if args.json is not None:
        document = {"settings": asdict(settings), "seeds": seeds, "near": NEAR,
                    "best": {"levels": BEST, "throughput": throughput(BEST)}, "rows": table,
                    "ratios": ratio, "versus_production": versus, "verdicts": said,
                    "runs": [asdict(r) for r in runs]}
        with os.fdopen(os.open(args.json, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                       "w") as out:
            json.dump(document, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
