"""What the benchmark compares: the strategies, two baselines and an oracle, on one scenario.

Each returns the culprits it names ([] for "nothing to blame", None for no answer); its cost is
what the pool ran. The strategies get their own stop rules, as `bisect run` gives them; the
baselines are what an engineer does by hand (fixed trials, every trial in full).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bench.scenarios import ALPHA, COST, Levels, Pool, Scenario
from orchestrator.evidence import TrialEvidence
from orchestrator.stats.exact import fisher_greater
from orchestrator.strategies.adaptive import Adaptive
from orchestrator.strategies.base import Status
from orchestrator.strategies.factorial import Factorial, decide, fraction

Contender = Callable[[Scenario, Pool], list[Levels] | None]


def _seen(s: Scenario, trials: Sequence[TrialEvidence]) -> list[TrialEvidence]:
    """Trials as the strategy sees them (runner.evidence): wedges are the failures if targeted."""
    return [t.as_wedging() for t in trials] if s.target == "wedging" else list(trials)


def run_adaptive(s: Scenario, pool: Pool) -> list[Levels] | None:
    return _run(Adaptive(s.factors, s.good, s.bad, alpha=ALPHA, failure=s.target), s, pool)


def _run(strategy: Adaptive, s: Scenario, pool: Pool) -> list[Levels] | None:
    done: list[TrialEvidence] = []
    while proposals := strategy.propose(_seen(s, done), []):
        for levels in proposals:
            rule = strategy.stop_rule(levels, _seen(s, done))
            done.append(pool.trial(levels, rule, s.target))
    replay = strategy.replay(_seen(s, done))
    if replay.outcome is Status.CULPRIT:
        return [dict(c) for c in replay.culprits]
    return [] if replay.outcome is Status.NOT_REPRODUCED else None


def run_factorial(s: Scenario, pool: Pool, repeats: int = 2,
                  fractional: bool = False) -> list[Levels] | None:
    """The factorial strategy, on every variant or on a resolution-V fraction (which is the full
    design up to 4 factors), ``repeats`` trials each, every trial in full."""
    strategy = Factorial(s.factors, repeats, fraction(s.factors, 5, s.bad) if fractional else None)
    trials = [pool.trial(levels) for levels in strategy.plan]
    verdict = decide(_seen(s, trials), s.factors, alpha=ALPHA, clean_rate=0.02, cost=COST,
                     known_bad=s.bad, design=strategy.design)
    if verdict.status is Status.CULPRIT:
        return [dict(c.factors) for c in verdict.culprits]
    return [] if verdict.status in (Status.NO_CULPRIT, Status.NOT_REPRODUCED) else None


def _flip(levels: Levels, factor: str, s: Scenario) -> Levels:
    other = s.good[factor] if s.good[factor] != levels[factor] else next(
        lvl for lvl in s.factors[factor] if lvl != levels[factor])
    return {**levels, factor: other}


def _pair(trials: Sequence[TrialEvidence]) -> tuple[int, int]:
    return sum(t.corrupted for t in trials), sum(t.judged for t in trials)


def run_one_at_a_time(s: Scenario, pool: Pool, trials: int = 2) -> list[Levels] | None:
    """Flip each factor of known-bad alone; blame those whose flip clears the failure."""
    def counts(levels: Levels) -> tuple[int, int]:
        return _pair(_seen(s, [pool.trial(levels) for _ in range(trials)]))

    bad, good = counts(s.bad), counts(s.good)
    if fisher_greater(*bad, *good) > ALPHA:
        return []
    blamed = {f: s.bad[f] for f in s.factors
              if fisher_greater(*bad, *counts(_flip(s.bad, f, s))) <= ALPHA}
    return [blamed] if blamed else None


class _Oracle(Adaptive):
    """The adaptive strategy told the answer: it reproduces as adaptive does, with the same
    sequential tests and early stops, then tests only the neighbours of each planted culprit."""

    def __init__(self, s: Scenario) -> None:
        super().__init__(s.factors, s.good, s.bad, alpha=ALPHA, failure=s.target)
        self.truth = s.culprits

    def _culprit_in(self, run: Any, bad: dict[str, str]) -> tuple[dict[str, str], list[str]]:
        for culprit in self.truth:
            if all(bad[f] == level for f, level in culprit.items()):
                return self._necessary(run, bad, list(culprit))
        return {}, []


def run_oracle(s: Scenario, pool: Pool) -> list[Levels] | None:
    return _run(_Oracle(s), s, pool)


CONTENDERS: dict[str, Contender] = {
    "adaptive": run_adaptive,
    "fractional factorial x2": lambda s, pool: run_factorial(s, pool, fractional=True),
    "factorial x2 (baseline)": run_factorial,
    "one-at-a-time x2 (baseline)": run_one_at_a_time,
    # the same with 4 trials per variant: what one-at-a-time costs to get closer to right
    "one-at-a-time x4": lambda s, pool: run_one_at_a_time(s, pool, trials=4),
    "oracle": run_oracle,
}
