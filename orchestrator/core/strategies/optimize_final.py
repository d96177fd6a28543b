"""The final phase of ``optimize``: the answer and production alternated, pair by pair.

Confirmation settles the answer on the trials that chose it (it leads because they were good),
and production's trials may be the run's first, hours before the answer's: a machine that
drifted since favours the answer (BENCHMARKS.md, "Better than production": 9 of 150 runs said
better where production was the best). So once confirmation has settled the answer, production
and the answer run alternated in ``confirm_trials`` fresh pairs, as Pinpoint interleaves A and
B, each pair's order the reverse of the last (production first, then the answer first: a steady
trend favours neither side), and the answer is compared with production on those pairs only:
a one-sided paired t-test on the pairs' log ratios (stats/regression.py's ``compare_values``,
``paired``, as a sweep's controls): the drift a pair shares leaves the comparison.

The phase is found in the stored trials alone, so a resumed run replays to the same decision:
it begins after the first trial ``k`` (in the order the run started its trials, ``seq``) at
which the search's budget was spent and confirmation wanted nothing more of the trials up to
``k``. The strategy starts it only when nothing else runs, so every trial before it had ended.
A pair is two trials of the phase next to each other in that order on one pool, one of
production and one of the answer (``Beside``: with several pools, each pair on one pool, and
several pairs at once, one a pool).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from experiments.optimize_config import direction
from orchestrator.core.evidence import Levels, TrialEvidence, variant_key
from orchestrator.core.pairs import adjacent_on_pools, partner_of
from orchestrator.core.stats.regression import compare_values
from orchestrator.core.strategies.optimize_rank import figure
from orchestrator.core.strategies.optimize_versus import Difference

Pair = tuple[TrialEvidence, TrialEvidence]  # (production's trial, the answer's)


@dataclass(frozen=True)
class Final:
    """The final phase as the stored trials show it."""

    after: int  # the seq of confirmation's last trial: the phase is every trial after it
    trials: tuple[TrialEvidence, ...]  # in the order they started

    def _walk(self, production: str, answer: str) -> tuple[list[Pair], list[TrialEvidence]]:
        """The pairs, on each pool apart, and the trials that wait for their partner there."""
        return adjacent_on_pools(self.trials, production, answer, _adjacent)

    def pairs(self, production: Levels, answer: Levels) -> list[Pair]:
        return self._walk(variant_key(production), variant_key(answer))[0]

    def wanted(self, production: Levels, answer: Levels, count: int, most: int,
               pools: int = 1) -> list[dict[str, str]]:
        """The next trials: the partner of each trial waiting for one, on its pool, then the
        first trials of new pairs (one a pool) until ``count`` pairs, while the phase has fewer
        than ``most`` trials (a bound where trials of other configurations, still running
        when it began, break pairs apart)."""
        made, alone = self._walk(variant_key(production), variant_key(answer))
        partners = [partner_of(trial, production, answer) for trial in alone]
        if len(made) + len(alone) >= count or len(self.trials) >= most:
            return list(partners)
        more = min(count - len(made) - len(alone), max(0, pools - len(partners)))
        # each new pair's first trial, the order of each the reverse of the last's; its
        # partner is asked for once it ended, on its pool
        return [*partners, *(dict(answer if (len(made) + len(alone) + index) % 2 else
                                  production) for index in range(more))]


def _adjacent(trials: Sequence[TrialEvidence], production: str, answer: str
              ) -> tuple[list[Pair], TrialEvidence | None]:
    """The pairs of one sequence of trials (a pool's), and its last trial when it is one
    side's still waiting for the other."""
    pairs: list[Pair] = []
    index = 0
    while index < len(trials):
        here = variant_key(trials[index].levels)
        there = variant_key(trials[index + 1].levels) if index + 1 < len(trials) else None
        if {here, there} == {production, answer}:
            first, second = trials[index], trials[index + 1]
            pairs.append((first, second) if here == production else (second, first))
            index += 2
            continue
        if index == len(trials) - 1 and here in (production, answer):
            return pairs, trials[index]
        index += 1
    return pairs, None


def final_phase(done: Sequence[TrialEvidence], budget: int,
                settled: Callable[[list[TrialEvidence], int], bool],
                started: int = 0) -> Final | None:
    """The final phase of these trials: after the first ``k`` from ``budget`` on where
    ``settled(trials up to k, k)``; None where confirmation never settled. ``k`` counts the
    trials started (a failed deployment has its number too), as the search's budget does;
    ``started``: all of them, where the caller knows of failures after the last trial done."""
    ordered = sorted(done, key=lambda t: t.seq)
    last = max(ordered[-1].seq if ordered else 0, started)
    for k in range(max(budget, 1), last + 1):
        before = [t for t in ordered if t.seq <= k]
        if settled(before, k):
            return Final(k, tuple(t for t in ordered if t.seq > k))
    return None


def paired(metric: str, pairs: Sequence[Pair], alpha: float) -> Difference:
    """One objective of the answer against production on the pairs where both measured it:
    the difference of the means, and the one-sided paired t-test that the answer is better."""
    both = [(p, a) for p, a in ((figure(tp, metric), figure(ta, metric)) for tp, ta in pairs)
            if p is not None and a is not None and p > 0 and a > 0]
    theirs, mine = [p for p, _ in both], [a for _, a in both]
    count = len(both)
    difference = statistics.fmean(mine) - statistics.fmean(theirs) if both else None
    if count < 2:
        ratio = mine[0] / theirs[0] if both else None
        return Difference(metric, difference, None, None, None, (count, count), alpha,
                          pairs=count, ratio=ratio)
    # production against the answer: production's worsening is the answer's gain, so the test's
    # p_worse is the one-sided p that the answer is better; its thresholds decide nothing here
    worse: Literal["lower", "higher"] = "lower" if direction(metric) == "maximize" else "higher"
    compared = compare_values(metric, theirs, mine, min_relative=0.01, alpha=alpha,
                              worse=worse, paired=True)
    low, high = compared.interval  # of production's relative worsening
    if worse == "lower":  # worsening 1 - production/answer
        ratio_ci = (1.0 / (1.0 - low), 1.0 / (1.0 - high))
    else:  # production/answer - 1
        ratio_ci = (1.0 / (1.0 + high), 1.0 / (1.0 + low))
    ratio = compared.baseline / compared.current  # of the geometric means
    return Difference(metric, difference, None, None, compared.p_worse, (count, count), alpha,
                      pairs=count, ratio=ratio,
                      ratio_ci=ratio_ci if all(map(math.isfinite, ratio_ci)) else None)
