"""Optimize benchmark: the GPU-time `bisect optimize` spends to reach the best safe configuration
of a space with a planted trade-off (bench/knob_space.py: the fastest configurations corrupt
30% of sessions), against grid and random search of the same space, in one run (issue 17).

Every search runs the real loop: ``drive`` over the simulated pools (``KnobPools``), a real
SQLite store and the real Optuna study next to it, the strategy's defaults but where the
command line says otherwise. Seed ``s`` is both the sampler's seed and the pools' noise seed,
the same for every sampler. Trials carry the noise between trials (bench/noise.py) of
``--trial-noise``: ``real`` by default (a restart halves or doubles the corruption rate at one
sd, moves the speed, pools apart, a drift), ``iid`` as before issue 27.

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
        [--trial-noise real|iid] [--production space|best]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna
from scipy.stats import binomtest

from bench.knob_space import (
    BEST,
    GPUS,
    PRODUCTION,
    RESTART_S,
    WORKLOAD_S,
    KnobPools,
    corruption,
    knob_campaign,
    throughput,
)
from bench.noise import NOISES, REAL_WORLD, TrialNoise
from db.store import Store
from experiments.campaign import Campaign
from experiments.optimize_config import OptimizeConfig
from orchestrator.core.evidence import TrialEvidence, failing_for, variant_key
from orchestrator.core.strategies.base import Conclusion
from orchestrator.core.strategies.optimize import Optimize
from orchestrator.core.strategies.registry import strategy_for
from orchestrator.core.verdict import CostModel, verdict_from
from orchestrator.executor.driver import drive
from orchestrator.search.space import distributions, levels_of, params
from orchestrator.search.study import sampler_for
from orchestrator.stored import evidence

NEAR = 0.02  # "the same answer": within 2% of the best safe configuration's true throughput
TARGET = 1 / 3  # of the grid's GPU-time at the same answer (issue 17)
GRID = 16 * 8 * 5 * 2  # configurations of the space
ORACLE_ATTEMPTS = 4  # right configurations in the order tried as budgets, at most
SAMPLERS = ("tpe", "gp", "random", "grid")
TRIAL_GPU_S = (RESTART_S + WORKLOAD_S) * GPUS
BETTER_TARGET = 0.95  # of the answers said better than production, truly faster (issue 27)
# What the final verdict says of its answer against production (``versus_production``)
CLAIMS = ("better", "no better", "production best", "production not measured", "nothing named")
# The production configuration a run declares (``--production``): the space's (885 tok/s, BEST
# 2,004), or BEST itself (nothing safe is truly faster: a "better" is then always wrong)
PRODUCTIONS = {"space": PRODUCTION, "best": BEST}


@dataclass(frozen=True)
class Settings:
    """What a user sets in the campaign's ``optimize`` section (the rest: defaults)."""

    trials: int = 30
    startup_trials: int = 8
    confirm_top: int = 3
    confirm_trials: int = 3
    trial_noise: TrialNoise = REAL_WORLD  # of the simulated pools, not of the section
    production: str = "space"  # of PRODUCTIONS

    def strategy(self, sampler: str, seed: int, trials: int | None = None) -> dict[str, Any]:
        return {"sampler": sampler, "seed": seed, "trials": trials or self.trials,
                "startup_trials": self.startup_trials, "confirm_top": self.confirm_top,
                "confirm_trials": self.confirm_trials,
                "production": dict(PRODUCTIONS[self.production])}


@dataclass(frozen=True)
class Run:
    """One search of one seed, as measured."""

    search: str  # tpe | gp | random | random, oracle-stopped | grid, oracle-stopped
    seed: int
    budget: int  # the search's trials (seeds included)
    trials: int  # all, the confirmation included
    reached: int | None  # trials up to the first right answer; None: never
    gpu_s_reach: float | None
    gpu_s: float  # of the whole run (the verdict's)
    search_gpu_s: float  # of its first ``budget`` trials
    best: dict[str, str] | None  # the final answer
    best_true: float | None  # its true throughput
    right: bool  # the final answer is right
    unsafe_best: int  # prefixes whose answer was truly unsafe (must be 0)
    attempts: int  # budgets run (oracle-stopped: more than one when the first fell short)
    wall_s: float
    claim: str  # of CLAIMS: the final answer against production
    tested: bool  # the test ran (2 pairs or more; Welch: 2 trials or more on each side)
    production_trials: int  # production's trials in the run
    truly_faster: bool | None  # the final answer's true throughput above production's
    truly_safe: bool | None  # the final answer truly corrupts nothing


def right(levels: dict[str, str] | None) -> bool:
    return levels is not None and corruption(levels) == 0 and \
        throughput(levels) >= (1 - NEAR) * throughput(BEST)


def claim(conclusion: Conclusion) -> tuple[str, bool]:
    """The conclusion's answer against production, one of ``CLAIMS``, and whether its test
    ran (a p-value: 2 pairs or more, or 2 trials or more on each side)."""
    versus = (conclusion.finding_json("optimize") or {}).get("versus_production")
    if versus is None:
        return "nothing named", False
    if not versus["measured"]:
        return "production not measured", False
    if versus["is_production"]:
        return "production best", False
    return "better" if versus["shown_better"] else "no better", versus["p_value"] is not None


def measure(campaign: Campaign, seed: int, noise: TrialNoise = REAL_WORLD
            ) -> list[TrialEvidence]:
    """One search on the real loop, in a store of its own, its pools drawing ``noise``
    between trials; its trials as the verdict reads them."""
    with tempfile.TemporaryDirectory() as directory:
        store = Store.open(str(Path(directory) / "bench.db"))
        try:
            store.create_campaign("bench", campaign.name, campaign.model_dump(mode="json"),
                                  "bench")
            drive(store, "bench", campaign, KnobPools(seed, noise))
            trials = store.trials("bench", status=None)
        finally:
            store.close()
    return sorted(evidence(trials, failing_for(campaign.strategy.target),
                           campaign.workload.sessions), key=lambda t: t.seq)


def gpu_s(campaign: Campaign, done: Sequence[TrialEvidence]) -> float:
    """The verdict's ``gpu_s_equivalent`` of these trials."""
    cost = CostModel(campaign.cost.restart_s, campaign.cost.workload_s, campaign.cost.gpus)
    conclusion = strategy_for(campaign).conclude(done, [])
    verdict = verdict_from(conclusion, done, campaign.level_names(), cost)
    return float(verdict.cost_json()["gpu_s_equivalent"])


def answers(campaign: Campaign, done: Sequence[TrialEvidence]) -> list[dict[str, str] | None]:
    """The answer after each trial: the best safe, confirmed configuration so far."""
    strategy = strategy_for(campaign)
    assert isinstance(strategy, Optimize) and isinstance(campaign.strategy, OptimizeConfig)
    confirm = campaign.strategy.confirm_trials
    result: list[dict[str, str] | None] = []
    counts: dict[str, int] = {}
    for k, trial in enumerate(done, 1):
        key = variant_key(trial.levels)
        counts[key] = counts.get(key, 0) + 1
        if max(counts.values()) < confirm:  # nothing can be named yet
            result.append(None)
            continue
        named = strategy.conclude(done[:k], []).finding_json("optimize")
        result.append(None if named is None or named["best"] is None else dict(named["best"]))
    return result


def judged(search: str, seed: int, campaign: Campaign, done: Sequence[TrialEvidence],
           budget: int, attempts: int, wall_s: float) -> Run:
    said = answers(campaign, done)
    reached = next((k for k, levels in enumerate(said, 1) if right(levels)), None)
    best = said[-1] if said else None
    stated, tested = claim(strategy_for(campaign).conclude(done, []))
    assert isinstance(campaign.strategy, OptimizeConfig) and campaign.strategy.production
    production = dict(campaign.strategy.production)
    return Run(search, seed, budget, len(done), reached,
               None if reached is None else gpu_s(campaign, done[:reached]),
               gpu_s(campaign, done), gpu_s(campaign, done[:budget]), best,
               None if best is None else throughput(best), right(best),
               sum(1 for levels in said if levels is not None and corruption(levels) > 0),
               attempts, wall_s, stated, tested,
               sum(variant_key(t.levels) == variant_key(production) for t in done),
               None if best is None else throughput(best) > throughput(production),
               None if best is None else corruption(best) == 0)


def hits(campaign: Campaign, count: int) -> list[int]:
    """The trials (1-based, seeds included) at which the campaign's sampler first asks each of
    ``count`` right configurations, the seeds enqueued first as the strategy does (none for a
    grid); for
    samplers whose picks ignore the values told (random, grid)."""
    plan, strategy = campaign.strategy, strategy_for(campaign)
    assert isinstance(plan, OptimizeConfig) and isinstance(strategy, Optimize)
    factors = list(campaign.factors)
    study = optuna.create_study(sampler=sampler_for(plan, campaign), direction="maximize")
    for seed in strategy.seeds:  # none for a grid: it measures them among the others
        study.enqueue_trial(params(factors, seed))
    space, found = distributions(factors), []
    for number in range(1, GRID + len(strategy.seeds) + 1):
        trial = study.ask(space)
        if right(levels_of(factors, trial.params)):
            found.append(number)
            if len(found) == count:
                break
        study.tell(trial, 0.0)
    return found


def search_run(search: str, seed: int, settings: Settings) -> Run:
    """One seed of one search (see the module's docstring)."""
    started = time.monotonic()
    sampler = search.split(",")[0]
    if not search.endswith("oracle-stopped"):
        campaign = knob_campaign(settings.strategy(sampler, seed))
        done = measure(campaign, seed, settings.trial_noise)
        return judged(search, seed, campaign, done, settings.trials, 1,
                      time.monotonic() - started)
    run = None
    for attempt, budget in enumerate(hits(knob_campaign(settings.strategy(sampler, seed)),
                                          ORACLE_ATTEMPTS), 1):
        campaign = knob_campaign(settings.strategy(sampler, seed, budget))
        done = measure(campaign, seed, settings.trial_noise)
        run = judged(search, seed, campaign, done, budget, attempt, time.monotonic() - started)
        if run.right:
            break
    assert run is not None  # the grid holds every right configuration
    return run


def searches(samplers: Sequence[str]) -> list[str]:
    names = [s for s in ("tpe", "gp", "random") if s in samplers]
    names += [f"{s}, oracle-stopped" for s in ("random", "grid") if s in samplers]
    return names


def median(values: Sequence[float | None]) -> float | None:
    """None (never reached) counts as infinite; None when most never reached."""
    m = statistics.median([math.inf if v is None else v for v in values]) if values else None
    return None if m is None or math.isinf(m) else m


def full_budget() -> int:
    """The search trials of ``sampler: grid`` over the whole space (the strategy's budget)."""
    strategy = strategy_for(knob_campaign(Settings().strategy("grid", 0, 10_000)))
    assert isinstance(strategy, Optimize)
    return strategy.budget


def full_grid(run: Run) -> float:
    """GPU-s of ``sampler: grid`` over the whole space, from an oracle-stopped grid run."""
    per_trial = run.search_gpu_s / run.budget
    return per_trial * full_budget() + (run.gpu_s - run.search_gpu_s)


def rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    table = []
    for search in dict.fromkeys(r.search for r in runs):
        mine = [r for r in runs if r.search == search]
        table.append({
            "search": search, "seeds": len(mine),
            "reached": sum(r.reached is not None for r in mine),
            "trials_reach": median([r.reached for r in mine]),
            "gpu_h_reach": _hours(median([r.gpu_s_reach for r in mine])),
            "trials": statistics.median(r.trials for r in mine),
            "gpu_h": _hours(median([r.gpu_s for r in mine])),
            "final_true_min": min((r.best_true or 0.0) for r in mine),
            "final_true_median": statistics.median((r.best_true or 0.0) for r in mine),
            "final_right": sum(r.right for r in mine),
            "unsafe_best": sum(r.unsafe_best for r in mine),
            "wall_s": round(sum(r.wall_s for r in mine), 1)})
    grids = [r for r in runs if r.search == "grid, oracle-stopped"]
    if grids:
        full = [full_grid(r) for r in grids]
        table.append({
            "search": "grid, full (computed)", "seeds": len(grids), "reached": len(grids),
            "trials_reach": None, "gpu_h_reach": _hours(statistics.median(full)),
            "trials": full_budget() + statistics.median(r.trials - r.budget for r in grids),
            "gpu_h": _hours(statistics.median(full)), "final_true_min": None,
            "final_true_median": None, "final_right": None, "unsafe_best": None,
            "wall_s": None})
    return table


@dataclass(frozen=True)
class Share:
    """``k`` of ``n`` runs, with the share's two-sided 95% Clopper-Pearson interval."""

    k: int
    n: int

    @property
    def interval(self) -> tuple[float, float] | None:
        if not self.n:
            return None
        ci = binomtest(self.k, self.n).proportion_ci(0.95, method="exact")
        return float(ci.low), float(ci.high)

    def to_json(self) -> dict[str, Any]:
        interval = self.interval
        return {"k": self.k, "n": self.n, "share": self.k / self.n if self.n else None,
                "ci": None if interval is None else list(interval)}

    def __str__(self) -> str:
        interval = self.interval
        if interval is None:
            return "-"
        return (f"{self.k}/{self.n} ({self.k / self.n:.1%}; "
                f"{interval[0]:.1%}-{interval[1]:.1%})")


def against_production(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Each search's final answers against production, then all runs': how often each claim
    was made, and how often it was true (``Share`` as JSON)."""
    groups = {search: [r for r in runs if r.search == search]
              for search in dict.fromkeys(r.search for r in runs)}
    table = []
    for search, mine in [*groups.items(), ("all", list(runs))]:
        better = [r for r in mine if r.claim == "better"]
        worse = [r for r in mine if r.claim == "no better"]
        table.append({
            "search": search, "runs": len(mine),
            "claims": {c: sum(r.claim == c for r in mine) for c in CLAIMS},
            "better_truly_faster": Share(sum(bool(r.truly_faster) for r in better),
                                         len(better)).to_json(),
            "better_truly_safe": Share(sum(bool(r.truly_safe) for r in better),
                                       len(better)).to_json(),
            "no_better_untested": sum(not r.tested for r in worse),
            "no_better_right": Share(sum(not r.truly_faster for r in worse),
                                     len(worse)).to_json(),
            "production_trials": statistics.median(r.production_trials for r in mine)})
    return table


def _share(cell: dict[str, Any]) -> Share:
    return Share(cell["k"], cell["n"])


def better_verdict(table: Sequence[dict[str, Any]]) -> str:
    """All runs' answers said better than production, against the target."""
    total = _share(table[-1]["better_truly_faster"])
    interval = total.interval
    if interval is None:
        return (f"said better than production: no run (target >= {BETTER_TARGET:.0%} truly "
                "faster: not measurable)")
    if interval[0] >= BETTER_TARGET:
        reading = "met (the interval's lower end above it)"
    elif interval[1] < BETTER_TARGET:
        reading = "missed (the interval's upper end below it)"
    else:
        side = "at or above" if total.k / total.n >= BETTER_TARGET else "below"
        reading = f"the share {side} it, the interval across it"
    return (f"said better than production, truly faster: {total} "
            f"(target >= {BETTER_TARGET:.0%}): {reading}")


def render_against(table: Sequence[dict[str, Any]]) -> str:
    out = ["| search | runs | said better | truly faster (95% CI) | truly safe (95% CI) | "
           "said no better (untested) | no better, right (95% CI) | production best | "
           "production not measured | nothing named | production trials (median) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        claims = row["claims"]
        out.append(
            f"| {row['search']} | {row['runs']} | {claims['better']} | "
            f"{_share(row['better_truly_faster'])} | {_share(row['better_truly_safe'])} | "
            f"{claims['no better']} ({row['no_better_untested']}) | "
            f"{_share(row['no_better_right'])} | {claims['production best']} | "
            f"{claims['production not measured']} | {claims['nothing named']} | "
            f"{_cell(float(row['production_trials']), 1)} |")
    return "\n".join(out)


def _hours(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 3600, 2)


def ratios(table: Sequence[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each search's median GPU-time to reach against each grid's."""
    by = {row["search"]: row["gpu_h_reach"] for row in table}
    result: dict[str, dict[str, float | None]] = {}
    for grid in ("grid, oracle-stopped", "grid, full (computed)"):
        if by.get(grid):
            result[grid] = {s: None if h is None else round(h / by[grid], 3)
                            for s, h in by.items() if not s.startswith("grid")}
    return result


def verdicts(table: Sequence[dict[str, Any]], ratio: dict[str, dict[str, float | None]]
             ) -> list[str]:
    lines = []
    for grid, against in ratio.items():
        for search in ("tpe", "gp"):
            if search in against:
                value = against[search]
                said = "not reached" if value is None else f"{value:.2f}"
                met = value is not None and value <= TARGET
                lines.append(f"{search} against {grid}: {said} of its GPU-time (target <= 1/3): "
                             f"{'met' if met else 'missed'}")
    unsafe = sum(row["unsafe_best"] or 0 for row in table)
    lines.append(f"unsafe configurations ever reported as best: {unsafe} (must be 0)")
    return lines


def _cell(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}" if not value.is_integer() or digits == 0 else \
            f"{value:,.0f}"
    return str(value)


def render(table: Sequence[dict[str, Any]], ratio: dict[str, dict[str, float | None]],
           settings: Settings) -> str:
    heading = (f"optimize: {GRID} configurations, 11 right (within {NEAR:.0%} of BEST "
               f"{throughput(BEST):,.0f} tok/s, safe); trials={settings.trials}, "
               f"startup_trials={settings.startup_trials}, confirm_top={settings.confirm_top}, "
               f"confirm_trials={settings.confirm_trials}; a trial {TRIAL_GPU_S / 3600:.2f} "
               f"GPU-h (a stopped one less); {settings.trial_noise.describe()}; production "
               f"{settings.production} ({throughput(PRODUCTIONS[settings.production]):,.0f} "
               "tok/s)")
    out = [heading, "",
           "| search | seeds | reached | trials to reach | GPU-h to reach | trials | GPU-h | "
           "final answer, true tok/s (min / median) | unsafe best | vs grid oracle | "
           "vs grid full |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        against = [ratio.get(g, {}).get(row["search"]) for g in
                   ("grid, oracle-stopped", "grid, full (computed)")]
        final = "-" if row["final_true_min"] is None else \
            f"{row['final_true_min']:,.0f} / {row['final_true_median']:,.0f}"
        out.append(f"| {row['search']} | {row['seeds']} | {row['reached']}/{row['seeds']} | "
                   f"{_cell(row['trials_reach'], 0)} | {_cell(row['gpu_h_reach'])} | "
                   f"{_cell(float(row['trials']), 0)} | {_cell(row['gpu_h'])} | {final} | "
                   f"{_cell(row['unsafe_best'])} | {_cell(against[0])} | {_cell(against[1])} |")
    return "\n".join(out)


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
    args = parser.parse_args(argv)
    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()]
    unknown = [s for s in samplers if s not in SAMPLERS]
    if unknown or args.seeds < 1 or args.trials < 1:
        print(f"bench.optimize: --samplers takes {', '.join(SAMPLERS)} (got "
              f"{', '.join(unknown)}); --seeds and --trials at least 1"
              if unknown else "bench.optimize: --seeds and --trials at least 1", file=sys.stderr)
        return 2
    settings = Settings(args.trials, args.startup_trials, args.confirm_top, args.confirm_trials,
                        NOISES[args.trial_noise], args.production)
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
