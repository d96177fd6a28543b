"""The sweep benchmark's runs (bench/sweeps.py): each run of a scenario, drawn from its seed,
replayed by the sweep strategy and judged by the naive sweep, and many runs over processes.

``run_case`` is one run: its baseline run and its current run on one ``Machine``
(bench/sweep_world.py), the current run replayed with the build *not moved* or *moved*
(``confirm_build``), its exit as ``conclude`` gives it (0 clean, 1 regression, 3
inconclusive) and what the naive sweep (bench/sweep_naive.py) says of the same draws, as a
``RunResult``. ``sweep_runs`` runs both cases of every run of every scenario, in chunks, on
``workers`` processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from bench.sweep_fast import fast_comparisons
from bench.sweep_naive import naive
from bench.sweep_world import SCENARIOS, Machine, Rates, Scenario, baseline_run, replay
from experiments.strategy_config import SweepConfig
from orchestrator.core.stats.regression import Difference
from orchestrator.core.strategies.base import Status
from orchestrator.core.strategies.sweep import SweepStrategy

EXIT = {Status.NO_CULPRIT: "clean", Status.CULPRIT: "regression",
        Status.INCONCLUSIVE: "inconclusive"}


@dataclass(frozen=True)
class RunResult:
    scenario: str
    moved: bool  # confirm_build: a suspect confirmed against fresh trials of the baseline build
    index: int
    status: str  # clean | regression | inconclusive
    alerts: tuple[tuple[str, str], ...]  # (variant, metric) confirmed as regressions
    undecided: tuple[tuple[str, str], ...]  # UNKNOWN comparisons of variants left inconclusive
    trials: int  # of the current run, confirmation trials of both builds included
    suspected: bool  # some variant was a suspect (the replays of both cases differ)
    naive: tuple[tuple[str, str], ...] = ()  # what the naive sweep alerted on
    rise: float | None = None  # the planted corruption's rise as the pool stood (Machine.rise)


def run_case(plan: SweepConfig, clean: Rates, scenario: Scenario, seed: int, index: int,
             moved: bool, baseline_trials: int | None = None) -> RunResult:
    """One run: its baseline run and the current run drawn from ``[seed, index]``."""
    machine = Machine(np.random.default_rng([seed, index]), clean, scenario)
    baseline = baseline_run(plan, machine, baseline_trials)
    strategy = SweepStrategy(plan.model_copy(update={"baseline": baseline, "baseline_run": 1,
                                                     "confirm_build": moved}))
    done = replay(strategy, machine)
    conclusion = strategy.conclude(done, [])
    judged = strategy.judged(done)
    alerts = tuple((j.variant.name, metric) for j in judged for metric in j.regressed)
    undecided = tuple((j.variant.name, c.metric) for j in judged if j.state == "inconclusive"
                      for c in (j.confirmation or j.comparisons) if c.answer == Difference.UNKNOWN)
    return RunResult(scenario.name, moved, index, EXIT[conclusion.status], alerts, undecided,
                     len(done), any(j.suspected for j in judged), naive(plan, done, baseline),
                     machine.rise())


@dataclass(frozen=True)
class Job:
    plan: SweepConfig
    clean: Rates
    scenario: Scenario
    seed: int
    indices: range
    baseline_trials: int | None = None


def run_job(job: Job) -> list[RunResult]:
    """Both cases of each run of ``job`` (with the build moved, every trial has a control)."""
    with fast_comparisons():
        return [run_case(job.plan, job.clean, job.scenario, job.seed, index, moved,
                         job.baseline_trials)
                for index in job.indices for moved in (False, True)]


def sweep_runs(plan: SweepConfig, clean: Rates, runs: int, seed: int, workers: int = 1,
               baseline_trials: int | None = None,
               scenarios: Sequence[Scenario] = SCENARIOS) -> list[RunResult]:
    chunk = max(1, runs // max(1, 4 * workers))
    jobs = [Job(plan, clean, s, seed, range(start, min(runs, start + chunk)), baseline_trials)
            for s in scenarios for start in range(0, runs, chunk)]
    if workers <= 1:
        return [r for job in jobs for r in run_job(job)]
    with ProcessPoolExecutor(workers) as executor:
        return [r for batch in executor.map(run_job, jobs) for r in batch]
