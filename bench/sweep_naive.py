"""The sweep benchmark's contender (bench/sweeps.py): the naive sweep, what one writes by hand.

The first ``NAIVE_TRIALS`` trials of each variant of a run against the first ones of its
baseline run, a one-sided Fisher test at ``NAIVE_ALPHA`` per binary metric and Welch's t at
``NAIVE_ALPHA`` per continuous one, no minimum effect, no confirmation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import stdtr

from bench.sweep_world import FACTOR
from experiments.strategy_config import BaselineTrial, SweepConfig
from orchestrator.core.evidence import TrialEvidence
from orchestrator.core.stats.exact import fisher_greater
from orchestrator.core.strategies.sweep import BUILD, of_trial

NAIVE_ALPHA = 0.05
NAIVE_TRIALS = 2


def naive(plan: SweepConfig, done: Sequence[TrialEvidence], baseline: Sequence[BaselineTrial]
          ) -> tuple[tuple[str, str], ...]:
    """The naive sweep on the first ``NAIVE_TRIALS`` trials of each variant of the run and of
    its baseline run."""
    alerts = []
    for variant in plan.variants:
        mine = [of_trial(t) for t in done if t.levels[FACTOR] == variant.name
                and t.levels.get(BUILD) != "baseline"][:NAIVE_TRIALS]
        then = [b for b in baseline if b.variant == variant.name][:NAIVE_TRIALS]
        for metric, wedge in (("corruption", False), ("wedging", True)):
            k1, n1 = _binary([s.counts for s in mine], wedge)
            k2, n2 = _binary([b.counts for b in then], wedge)
            if fisher_greater(k1, n1, k2, n2) <= NAIVE_ALPHA:
                alerts.append((variant.name, metric))
        for metric in ("throughput", "p99_latency"):
            now = [s.output_throughput if metric == "throughput" else s.p99_e2e_ms for s in mine]
            base = [b.output_throughput if metric == "throughput" else b.p99_e2e_ms for b in then]
            if welch_p(now, base, lower_is_worse=metric == "throughput") <= NAIVE_ALPHA:
                alerts.append((variant.name, metric))
    return tuple(alerts)


def welch_p(current: Sequence[float | None], baseline: Sequence[float | None],
            lower_is_worse: bool) -> float:
    """One-sided p of Welch's t on the raw values, towards worse (scipy's ttest_ind, less its
    overhead)."""
    a = np.asarray(current, dtype=float)
    b = np.asarray(baseline, dtype=float)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    if va + vb == 0:
        return 1.0
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    t = (a.mean() - b.mean()) / math.sqrt(va + vb)
    return float(stdtr(df, t if lower_is_worse else -t))


def _binary(counts: Sequence[Any], wedge: bool) -> tuple[int, int]:
    infra = sum(c.get("timeout", 0) + c.get("error", 0) for c in counts)
    total = sum(sum(c.values()) for c in counts)
    return (infra, total) if wedge else (sum(c.get("leak", 0) for c in counts), total - infra)
