"""What a search's evidence says of each configuration: its objectives with intervals over its
trials, whether it is proven safe, by how much, and the ranking of the safe ones.

On several pools the ranking compares configurations with each pool's own speed taken out
(optimize_pools.py). The answer against production: optimize_versus.py.

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

from scipy.stats import beta, t

from experiments.optimize_config import UNITS, OptimizeConfig, direction
from orchestrator.core.evidence import CORRUPTING, WEDGING, Levels, TrialEvidence, variant_key
from orchestrator.core.strategies.optimize_pools import (
    Offsets,
    on_one_scale,
    pool_offsets,
)

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
    pools: tuple[str, ...] = ()  # each value's pool ("" not known; () none given)

    def on(self, pool: str) -> tuple[float, ...]:
        """The values measured on ``pool``."""
        return tuple(v for v, p in zip(self.values, self.pools, strict=True) if p == pool)

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "direction": direction(self.metric),
                "unit": UNITS.get(self.metric, "ms"), "mean": self.mean,
                "ci": None if self.low is None else [self.low, self.high],
                "values": list(self.values)}


def estimate(metric: str, trials: Sequence[TrialEvidence], alpha: float) -> Estimate:
    measured = [(v, trial.pool) for trial in trials
                if (v := figure(trial, metric)) is not None]
    values, pools = tuple(v for v, _ in measured), tuple(p for _, p in measured)
    if not values:
        return Estimate(metric, None, None, None, ())
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Estimate(metric, mean, None, None, values, pools)
    half = t_quantile(1 - alpha / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(
        len(values))
    return Estimate(metric, mean, mean - half, mean + half, values, pools)


@functools.lru_cache(maxsize=1 << 12)
def t_quantile(q: float, df: int) -> float:
    """Student's t quantile, cached as the bounds are: a verdict (and each step of the loop)
    estimates every configuration again for each prefix of the trials, from a few sizes."""
    return float(t.ppf(q, df))


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
    # each objective's mean with every pool's own offset taken out (optimize_pools.py): what
    # the ranking sorts by; () where no pool has an offset (the plain means)
    adjusted: tuple[float | None, ...] = ()

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

    @functools.cached_property
    def safe(self) -> bool:  # computed once: the ranking and each phase ask it of every one
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
        """The objectives as larger-is-better numbers (what the ranking sorts by), each pool's
        offset taken out where pools have one."""
        return self._score

    @functools.cached_property
    def _score(self) -> tuple[float, ...]:  # once: a Pareto front compares every pair
        means = self.adjusted or tuple(e.mean for e in self.objectives)
        return tuple(-math.inf if mean is None else
                     (mean if direction(e.metric) == "maximize" else -mean)
                     for e, mean in zip(self.objectives, means, strict=True))

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
                # the ranking's figures: the means, each pool's offset taken out
                "adjusted": list(self.adjusted) or None,
                "why": self.why_unsafe()}


def candidate(levels: Levels, trials: Sequence[TrialEvidence], plan: OptimizeConfig,
              offsets: Mapping[str, Offsets] | None = None) -> Candidate:
    """``offsets``: each objective's pool offsets (``pool_offsets`` of the run's trials)."""
    def bound(failing: frozenset[str], limit: float) -> Bound:
        counted = [trial.counted(failing) for trial in trials]
        failed, n = sum(k for k, _ in counted), sum(j for _, j in counted)
        return Bound(failed, n, upper_bound(failed, n, plan.alpha),
                     lower_bound(failed, n, plan.alpha), limit)

    slo = []
    for metric, limit in plan.slo.limits().items():
        values = [v for v in (figure(trial, metric) for trial in trials) if v is not None]
        slo.append((metric, statistics.fmean(values) if values else None, limit))
    objectives = tuple(estimate(m, trials, plan.alpha) for m in plan.objectives)
    adjusted: tuple[float | None, ...] = ()
    if offsets and any(offsets.get(e.metric) for e in objectives):
        adjusted = tuple(None if e.mean is None else
                         on_one_scale(e.values, e.pools, offsets.get(e.metric, {}))
                         for e in objectives)
    return Candidate(dict(levels), len(trials), objectives,
                     bound(CORRUPTING, plan.max_corruption), bound(WEDGING, plan.max_wedging),
                     tuple(slo), sum(trial.stopped_early for trial in trials), adjusted)


def candidates(done: Sequence[TrialEvidence], plan: OptimizeConfig) -> list[Candidate]:
    """Every measured configuration, in the order it was first measured; ranked on several
    pools with each pool's offset, estimated from all of ``done``, taken out."""
    grouped: dict[str, list[TrialEvidence]] = {}
    for trial in done:
        grouped.setdefault(variant_key(trial.levels), []).append(trial)
    offsets: dict[str, Offsets] = {}
    if len(grouped) > 1 and len({trial.pool for trial in done}) > 1:
        offsets = {metric: pool_offsets([(trial, v) for trial in done
                                         if (v := figure(trial, metric)) is not None and v > 0])
                   for metric in plan.objectives}
    return [candidate(trials[0].levels, trials, plan, offsets) for trials in grouped.values()]


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
