"""The optimize benchmark's searches (bench/optimize.py): one search of one seed on the real
loop, and what it is measured by.

It owns the settings a user sets (``Settings``), the record of one search (``Run``), the benchmark's
notion of a right answer (``right``: truly safe and within ``NEAR`` of ``BEST``'s true throughput)
and of a claim against production (``claim``, one of ``CLAIMS``), the search itself on the real loop
(``measure``: ``drive`` over ``KnobPools`` into a SQLite store of its own, the study in memory), its
judgement (``judged``: the answer after each trial, the first right one, the GPU-time to it), the
oracle's order of a sampler that ignores the values told (``hits``), and ``search_run``, which runs
a search as bench/optimize.py's docstring describes it.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from bench.knob_space import (
    BEST,
    PRODUCTION,
    KnobPools,
    corruption,
    knob_campaign,
    throughput,
)
from bench.noise import REAL_WORLD, TrialNoise
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
from orchestrator.search.study import OptunaSearch, sampler_for
from orchestrator.stored import evidence

NEAR = 0.02  # "the same answer": within 2% of the best safe configuration's true throughput
GRID = 16 * 8 * 5 * 2  # configurations of the space
ORACLE_ATTEMPTS = 4  # right configurations in the order tried as budgets, at most
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
    # each pool's speed (``--speeds``): that many pools, these offsets instead of random ones;
    # none: one pool, as before
    speeds: tuple[float, ...] = ()

    def campaign(self, sampler: str, seed: int, trials: int | None = None) -> Campaign:
        return knob_campaign(self.strategy(sampler, seed, trials), pools=max(1, len(self.speeds)))

    @property
    def noise(self) -> TrialNoise:
        """The pools' noise between trials: ``trial_noise``, with the pools of ``speeds``."""
        if not self.speeds:
            return self.trial_noise
        return dataclasses.replace(self.trial_noise, pool_spread=0.0, pools=tuple(
            (f"pool-{n}", 1.0, speed) for n, speed in enumerate(self.speeds, start=1)))

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


def measure(campaign: Campaign, seed: int, noise: TrialNoise = REAL_WORLD,
            under: str | None = None, stored_study: bool = False) -> list[TrialEvidence]:
    """One search on the real loop, in a store of its own (in a fresh directory, under
    ``under`` if given), its pools drawing ``noise`` between trials; its trials as the verdict
    reads them. Its Optuna study is in memory: the same picks as the study a user's campaign
    keeps next to its store (``stored_study``; test_bench_optimize checks they agree), at a
    quarter of the CPU (the SQLite study's commits and rereads were three quarters of a
    search's)."""
    with tempfile.TemporaryDirectory(dir=under) as directory:
        store = Store.open(str(Path(directory) / "bench.db"))
        try:
            store.create_campaign("bench", campaign.name, campaign.model_dump(mode="json"),
                                  "bench")
            search = None if stored_study else OptunaSearch(campaign, "bench", None)
            drive(store, "bench", campaign, KnobPools(seed, noise), search=search)
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
    """The answer after each trial: the best safe, confirmed configuration so far (the
    conclusion's ``best``: its standing's first named, without the log the conclusion writes
    of every prefix, which made this cubic in the trials)."""
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
        named = strategy.standing(done[:k]).named
        result.append(dict(named[0].levels) if named else None)
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
        campaign = settings.campaign(sampler, seed)
        done = measure(campaign, seed, settings.noise)
        return judged(search, seed, campaign, done, settings.trials, 1,
                      time.monotonic() - started)
    run = None
    for attempt, budget in enumerate(hits(settings.campaign(sampler, seed), ORACLE_ATTEMPTS), 1):
        campaign = settings.campaign(sampler, seed, budget)
        done = measure(campaign, seed, settings.noise)
        run = judged(search, seed, campaign, done, budget, attempt, time.monotonic() - started)
        if run.right:
            break
    assert run is not None  # the grid holds every right configuration
    return run


def searches(samplers: Sequence[str]) -> list[str]:
    names = [s for s in ("tpe", "gp", "random") if s in samplers]
    names += [f"{s}, oracle-stopped" for s in ("random", "grid") if s in samplers]
    return names
