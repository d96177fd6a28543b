"""What a search's evidence says of each configuration: its objectives with intervals over its
trials, whether it is proven safe, by how much, and the ranking of the safe ones.

Safe means proven, not merely unseen: the one-sided Clopper-Pearson upper bound of the
corruption rate (every trial's sessions pooled) is below the declared limit, the same for
wedging (errors and timeouts), and the mean of each trial's p99 latency within the SLOs. Each
configuration is judged on all of its trials, so a lucky first trial is corrected by the
re-runs a candidate gets before it is named.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy.stats import beta, t, ttest_ind

from experiments.optimize_config import UNITS, OptimizeConfig, direction
from orchestrator.core.evidence import CORRUPTING, WEDGING, Levels, TrialEvidence, variant_key

# An objective's or an SLO's figure, from one trial's performance
FIGURES = {
    "output_throughput": lambda p: p.output_throughput,
    "request_throughput": lambda p: p.request_throughput,
    "goodput": lambda p: p.goodput,
    "ttft_p99_ms": lambda p: None if p.ttft is None else p.ttft.p99_ms,
    "itl_p99_ms": lambda p: None if p.itl is None else p.itl.p99_ms,
    "tpot_p99_ms": lambda p: None if p.tpot is None else p.tpot.p99_ms,
    "e2e_p99_ms": lambda p: None if p.e2e is None else p.e2e.p99_ms,
}


def figure(trial: TrialEvidence, metric: str) -> float | None:
    return None if trial.performance is None else FIGURES[metric](trial.performance)


# Memoized: every replay recomputes each configuration's bounds after every trial (the log,
# the final phase's start), on the same few counts; scipy's ppf dominated the time otherwise
@functools.lru_cache(maxsize=1 << 16)
def upper_bound(failed: int, judged: int, alpha: float) -> float:
    """One-sided exact (Clopper-Pearson) upper bound of a rate at confidence 1 - alpha."""
    if judged <= 0 or failed >= judged:
        return 1.0
    return float(beta.ppf(1 - alpha, failed + 1, judged - failed))


@functools.lru_cache(maxsize=1 << 16)
def lower_bound(failed: int, judged: int, alpha: float) -> float:
    """One-sided exact (Clopper-Pearson) lower bound of a rate at confidence 1 - alpha."""
    if judged <= 0 or failed <= 0:
        return 0.0
    return float(beta.ppf(alpha, failed, judged - failed + 1))


@dataclass(frozen=True)
class Estimate:
    """An objective of one configuration: the mean of its trials' figures and its two-sided
    (1 - alpha) t interval (None with one trial: one measurement has no spread)."""

    metric: str
    mean: float | None
    low: float | None
    high: float | None
    values: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "direction": direction(self.metric),
                "unit": UNITS.get(self.metric, "ms"), "mean": self.mean,
                "ci": None if self.low is None else [self.low, self.high],
                "values": list(self.values)}


def estimate(metric: str, trials: Sequence[TrialEvidence], alpha: float) -> Estimate:
    values = tuple(v for v in (figure(trial, metric) for trial in trials) if v is not None)
    if not values:
        return Estimate(metric, None, None, None, ())
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Estimate(metric, mean, None, None, values)
    half = float(t.ppf(1 - alpha / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(
        len(values))
    return Estimate(metric, mean, mean - half, mean + half, values)


@dataclass(frozen=True)
class Bound:
    """Failing sessions of a configuration against the limit on their rate."""

    failed: int
    judged: int
    upper: float
    lower: float
    limit: float

    @property
    def margin(self) -> float:
        return self.limit - self.upper

    def to_json(self) -> dict[str, Any]:
        rate = self.failed / self.judged if self.judged else None
        return {"failed": self.failed, "judged": self.judged, "rate": rate,
                "upper": self.upper, "lower": self.lower, "limit": self.limit,
                "margin": self.margin}

    @property
    def rate(self) -> float:
        return self.failed / self.judged if self.judged else 0.0


@dataclass(frozen=True)
class Candidate:
    """One configuration with everything its trials say."""

    levels: Mapping[str, str]
    trials: int
    objectives: tuple[Estimate, ...]
    corruption: Bound
    wedging: Bound
    slo: tuple[tuple[str, float | None, float], ...]  # (metric, mean p99, limit)
    stopped_early: int  # trials a stop rule ended

    @property
    def key(self) -> str:
        return variant_key(self.levels)

    def why_unsafe(self) -> list[str]:
        """Every limit it is not proven to keep, in words; [] when it is safe."""
        reasons = []
        for name, bound in (("corruption", self.corruption), ("wedging", self.wedging)):
            if bound.upper >= bound.limit:
                seen = f"{bound.failed}/{bound.judged}" if bound.judged else "no sessions"
                reasons.append(f"{name} {seen}: upper bound {bound.upper:.1%} is not below "
                               f"{bound.limit:.1%}")
        for metric, value, limit in self.slo:
            if value is None:
                reasons.append(f"{metric} not measured (SLO {limit:g} ms)")
            elif value > limit:
                reasons.append(f"{metric} {value:.0f} ms above the SLO {limit:g} ms")
        if any(e.mean is None for e in self.objectives):
            reasons.append("an objective was not measured")
        return reasons

    @property
    def safe(self) -> bool:
        return not self.why_unsafe()

    @property
    def plausible(self) -> bool:
        """Not yet shown unsafe: each rate's lower bound below its limit, the SLOs kept so far
        (a candidate worth re-running until it is proven safe, or shown not to be)."""
        return (self.corruption.lower < self.corruption.limit
                and self.wedging.lower < self.wedging.limit
                and all(value is not None and value <= limit for _, value, limit in self.slo)
                and all(e.mean is not None for e in self.objectives))

    def score(self) -> tuple[float, ...]:
        """The objectives as larger-is-better numbers (what the ranking sorts by)."""
        return tuple(-math.inf if e.mean is None else
                     (e.mean if direction(e.metric) == "maximize" else -e.mean)
                     for e in self.objectives)

    def constraints(self) -> dict[str, float]:
        """As Optuna's sampler reads them (feasible where every value is <= 0): the observed
        rates against their limits, not the proof's upper bounds. A sampler must learn where
        corruption lies from single trials, and no single trial of tens of sessions proves a
        2% limit (0 of 60: upper bound 4.9%): bounds would mark every trial infeasible and
        leave it blind. What is reported safe is proven on the bounds (``safe``)."""
        values = {"corruption": self.corruption.rate - self.corruption.limit,
                  "wedging": self.wedging.rate - self.wedging.limit}
        for metric, value, limit in self.slo:
            values[metric] = (value - limit) / limit if value is not None else 1.0
        return values

    def to_json(self) -> dict[str, Any]:
        return {"levels": dict(self.levels), "key": self.key, "trials": self.trials,
                "objectives": [e.to_json() for e in self.objectives],
                "corruption": self.corruption.to_json(), "wedging": self.wedging.to_json(),
                "slo": [{"metric": m, "value": v, "limit": lim,
                         "margin": None if v is None else lim - v} for m, v, lim in self.slo],
                "stopped_early": self.stopped_early, "safe": self.safe,
                "why": self.why_unsafe()}


def candidate(levels: Levels, trials: Sequence[TrialEvidence],
              plan: OptimizeConfig) -> Candidate:
    def bound(failing: frozenset[str], limit: float) -> Bound:
        judged = [trial.judged_as(failing) for trial in trials]
        failed, n = sum(j.failures for j in judged), sum(j.judged for j in judged)
        return Bound(failed, n, upper_bound(failed, n, plan.alpha),
                     lower_bound(failed, n, plan.alpha), limit)

    slo = []
    for metric, limit in plan.slo.limits().items():
        values = [v for v in (figure(trial, metric) for trial in trials) if v is not None]
        slo.append((metric, statistics.fmean(values) if values else None, limit))
    return Candidate(dict(levels), len(trials),
                     tuple(estimate(m, trials, plan.alpha) for m in plan.objectives),
                     bound(CORRUPTING, plan.max_corruption), bound(WEDGING, plan.max_wedging),
                     tuple(slo), sum(trial.stopped_early for trial in trials))


def candidates(done: Sequence[TrialEvidence], plan: OptimizeConfig) -> list[Candidate]:
    """Every measured configuration, in the order it was first measured."""
    grouped: dict[str, list[TrialEvidence]] = {}
    for trial in done:
        grouped.setdefault(variant_key(trial.levels), []).append(trial)
    return [candidate(trials[0].levels, trials, plan) for trials in grouped.values()]


def dominates(a: Candidate, b: Candidate) -> bool:
    sa, sb = a.score(), b.score()
    return all(x >= y for x, y in zip(sa, sb, strict=True)) and sa != sb


def pareto(safe: Sequence[Candidate]) -> list[Candidate]:
    """The safe configurations no other safe one beats on every objective."""
    return [c for c in safe if not any(dominates(o, c) for o in safe)]


def ranked(safe: Sequence[Candidate]) -> list[Candidate]:
    """Best first: by Pareto layer (one objective: a single order), then the first objective."""
    layers, rest = [], list(safe)
    while rest:
        front = pareto(rest)
        layers.append(sorted(front, key=lambda c: c.score(), reverse=True))
        rest = [c for c in rest if c not in front]
    return [c for layer in layers for c in layer]


@dataclass(frozen=True)
class Difference:
    """One objective of a configuration against production's: the difference of the means
    (the configuration's less production's, in the objective's unit), its two-sided
    (1 - alpha) Welch interval, and the one-sided Welch p-value that the configuration is better
    (higher throughput, lower latency). Fewer than 2 trials on either side: no test (p None)."""

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
                "ratio": self.ratio,
                "ratio_ci": None if self.ratio_ci is None else list(self.ratio_ci)}


def welch(mine: Estimate, theirs: Estimate, alpha: float) -> Difference:
    """Welch's t-test of one objective, one-sided in its direction, on per-trial values."""
    a, b = mine.values, theirs.values
    counts = (len(a), len(b))
    difference = (None if mine.mean is None or theirs.mean is None
                  else mine.mean - theirs.mean)
    if difference is None or min(counts) < 2:
        return Difference(mine.metric, difference, None, None, None, counts, alpha)
    if statistics.variance(a) == statistics.variance(b) == 0.0:  # scipy's p would be nan
        gain = difference if direction(mine.metric) == "maximize" else -difference
        p = 0.0 if gain > 0 else 1.0 if gain < 0 else 0.5
        return Difference(mine.metric, difference, difference, difference, p, counts, alpha)
    better = "greater" if direction(mine.metric) == "maximize" else "less"
    p = float(ttest_ind(a, b, equal_var=False, alternative=better).pvalue)
    ci = ttest_ind(a, b, equal_var=False).confidence_interval(1 - alpha)
    return Difference(mine.metric, difference, float(ci.low), float(ci.high), p, counts, alpha)


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
        if first.p_value is None:
            mine, theirs = first.trials
            return (f"not tested: fewer than 2 trials on a side ({mine} of the answer, {theirs} "
                    "of production)")
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
