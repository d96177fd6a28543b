"""The answer of an `optimize` search against production, measured in the same run: one
objective's ``Difference`` (a Welch test on per-trial values, or the final phase's paired test:
optimize_final.py) and the answer's ``VersusProduction``, in words and as JSON.

On several pools a Welch test reads the trials of one pool (optimize_pools.py's ``one_pool``):
one pool's trials against another's would compare the pools as much as the configurations.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from scipy.stats import ttest_ind

from experiments.optimize_config import UNITS, direction
from orchestrator.core.strategies.optimize_pools import one_pool
from orchestrator.core.strategies.optimize_rank import Candidate, Estimate


@dataclass(frozen=True)
class Difference:
    """One objective of a configuration against production's: the difference of the means
    (the configuration's less production's, in the objective's unit), its two-sided
    (1 - alpha) Welch interval, and the one-sided Welch p-value that the configuration is better
    (higher throughput, lower latency). Fewer than 2 trials on either side: no test (p None).
    The trials of several pools: those of one pool (``pool``; optimize_pools.py's ``one_pool``),
    never one pool's against another's; the two never on one pool: no test."""

    metric: str
    difference: float | None
    low: float | None
    high: float | None
    p_value: float | None
    trials: tuple[int, int]  # (the configuration's, production's) with a value
    alpha: float
    # paired (the final phase, optimize_final.py): how many pairs, and the geometric mean of
    # the answer's value over production's with its two-sided (1 - 2 alpha) interval
    pairs: int | None = None
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    pool: str | None = None  # a Welch test on several pools: the one pool it read
    apart: bool = False  # the two sides never ran on one pool: no test

    @property
    def shown_better(self) -> bool:
        return self.p_value is not None and self.p_value < self.alpha

    @property
    def shown_worse(self) -> bool:
        """The same test the other way: production shown better on this objective."""
        if self.p_value is None:
            return False
        return 1.0 - self.p_value < self.alpha

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "direction": direction(self.metric),
                "unit": UNITS.get(self.metric, "ms"), "difference": self.difference,
                "ci": None if self.low is None else [self.low, self.high],
                "p_value": self.p_value, "trials": list(self.trials),
                "shown_better": self.shown_better, "shown_worse": self.shown_worse,
                "test": "welch" if self.pairs is None else "paired", "pairs": self.pairs,
                "pool": self.pool, "apart": self.apart,
                "ratio": self.ratio,
                "ratio_ci": None if self.ratio_ci is None else list(self.ratio_ci)}


def welch(mine: Estimate, theirs: Estimate, alpha: float) -> Difference:
    """Welch's t-test of one objective, one-sided in its direction, on per-trial values; on
    several pools, on one pool's (``Difference``)."""
    a, b, pool = mine.values, theirs.values, None
    if len(set(mine.pools) | set(theirs.pools)) > 1:
        pool = one_pool(mine.pools, theirs.pools)
        if pool is None:
            return Difference(mine.metric, None, None, None, None, (len(a), len(b)), alpha,
                              apart=True)
        a, b = mine.on(pool), theirs.on(pool)
    counts = (len(a), len(b))
    difference = None if not a or not b else statistics.fmean(a) - statistics.fmean(b)
    if difference is None or min(counts) < 2:
        return Difference(mine.metric, difference, None, None, None, counts, alpha, pool=pool)
    if statistics.variance(a) == statistics.variance(b) == 0.0:  # scipy's p would be nan
        gain = difference if direction(mine.metric) == "maximize" else -difference
        p = 0.0 if gain > 0 else 1.0 if gain < 0 else 0.5
        return Difference(mine.metric, difference, difference, difference, p, counts, alpha,
                          pool=pool)
    better = "greater" if direction(mine.metric) == "maximize" else "less"
    p = float(ttest_ind(a, b, equal_var=False, alternative=better).pvalue)
    ci = ttest_ind(a, b, equal_var=False).confidence_interval(1 - alpha)
    return Difference(mine.metric, difference, float(ci.low), float(ci.high), p, counts, alpha,
                      pool=pool)


@dataclass(frozen=True)
class VersusProduction:
    """The answer against production, measured in the same run: shown better only when it is
    shown better on some objective (one-sided at alpha) and worse on none. ``paired``: decided
    on the final phase's pairs (optimize_final.py), ``pairs`` their trials' numbers
    (production's, the answer's), of ``wanted``; else a Welch test on all trials (production
    shown unsafe: no final phase)."""

    best: Candidate
    production: Candidate | None  # None: production was never measured (not deployable)
    objectives: tuple[Difference, ...]
    paired: bool = False
    pairs: tuple[tuple[int, int], ...] = ()
    wanted: int = 0

    @property
    def is_production(self) -> bool:
        return self.production is not None and self.production.key == self.best.key

    @property
    def shown_better(self) -> bool:
        if self.production is None or self.is_production:
            return False
        return (any(d.shown_better for d in self.objectives)
                and not any(d.shown_worse for d in self.objectives))

    def why_not(self) -> str:
        """Why it is not shown better, in words ("" when it is)."""
        if self.production is None:
            return "production was not measured"
        if self.is_production:
            return "production itself is the best safe configuration"
        if self.shown_better:
            return ""
        first = self.objectives[0]
        if self.paired and first.p_value is None:
            return (f"not tested: {len(self.pairs)} of {self.wanted} pairs of the final phase "
                    "(production and the answer alternated), 2 at least")
        if first.apart:
            return ("not tested: the answer and production never ran on one pool (a pool's "
                    "own speed would stand between them)")
        if first.p_value is None:
            mine, theirs = first.trials
            where = "" if first.pool is None else f" on {first.pool}, of one pool"
            return (f"not tested: fewer than 2 trials on a side ({mine} of the answer, {theirs} "
                    f"of production{where})")
        worse = [d.metric for d in self.objectives if d.shown_worse]
        if worse:
            return f"worse than production on {', '.join(worse)}"
        test = "paired t-test on the final phase's pairs" if self.paired else "Welch test"
        return (f"not shown better on {' or '.join(d.metric for d in self.objectives)} "
                f"(one-sided {test} at alpha {first.alpha:g})")

    def to_json(self) -> dict[str, Any]:
        first = self.objectives[0] if self.objectives else None
        return {
            "production": None if self.production is None else dict(self.production.levels),
            "measured": self.production is not None,
            "trials": None if self.production is None else self.production.trials,
            "is_production": self.is_production, "shown_better": self.shown_better,
            "why": self.why_not(), "test": (
                "one-sided paired t-test on the log ratios of the final phase's pairs"
                if self.paired else "one-sided Welch t-test on per-trial values"),
            "paired": self.paired, "pairs": len(self.pairs) if self.paired else None,
            "pairs_wanted": self.wanted if self.paired else None,
            # each pair's trial numbers: (production's, the answer's)
            "pair_trials": [list(pair) for pair in self.pairs],
            # the first objective's (the one the answer is ranked by), then every objective's
            "metric": None if first is None else first.metric,
            "p_value": None if first is None else first.p_value,
            "difference": None if first is None else first.difference,
            "ci": None if first is None or first.low is None else [first.low, first.high],
            "ratio": None if first is None else first.ratio,
            "ratio_ci": None if first is None or first.ratio_ci is None else list(
                first.ratio_ci),
            "objectives": [d.to_json() for d in self.objectives]}


def versus_production(best: Candidate, production: Candidate | None,
                      alpha: float) -> VersusProduction:
    """``best`` against ``production`` on each objective. Both are candidates of the same
    run's trials (``candidates`` of one campaign's evidence): production's trials were
    measured in the same window as the answer's, never taken from an earlier campaign."""
    if production is None or production.key == best.key:
        return VersusProduction(best, production, ())
    return VersusProduction(best, production, tuple(
        welch(mine, theirs, alpha)
        for mine, theirs in zip(best.objectives, production.objectives, strict=True)))
