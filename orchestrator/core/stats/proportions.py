"""Intervals for proportions of sessions."""

from __future__ import annotations

import math
import operator
from functools import lru_cache

from scipy.special import ndtri


@lru_cache(maxsize=8)
def _z(confidence: float) -> float:
    if not 0.0 <= confidence <= 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    return float(ndtri(0.5 + 0.5 * confidence))


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for k of n; (0, 1) when there is no data.

    SciPy's formula (``binomtest(k, n).proportion_ci(method="wilson")``), operation for
    operation, so the same bits (compared on every count of up to 259 sessions and more, at six
    confidences): ``binomtest`` first computes a two-sided p-value by a search over the
    binomial's probabilities, which no caller read: 750 us a call, this 1 us."""
    if n <= 0:
        return (0.0, 1.0)
    k, n = operator.index(k), operator.index(n)
    if not 0 <= k <= n:
        raise ValueError(f"{k} of {n} is not a count of sessions")
    z = _z(confidence)
    p = k / n
    denom = 2 * (n + z**2)
    center = (2 * n * p + z**2) / denom
    delta = z / denom * math.sqrt(4 * n * p * (1 - p) + z**2)
    return (0.0 if k == 0 else center - delta, 1.0 if k == n else center + delta)


def newcombe_difference(k1: int, n1: int, k2: int, n2: int,
                        confidence: float = 0.95) -> tuple[float, float]:
    """Interval of p1 - p2 (95% unless told) by Newcombe's hybrid score method (built on Wilson
    intervals at the same confidence).

    Unlike the Wald interval it stays sensible when a count is zero, which is the usual case
    here (a clean variant has 0 corrupt sessions).
    """
    p1 = k1 / n1 if n1 else 0.0
    p2 = k2 / n2 if n2 else 0.0
    l1, u1 = wilson(k1, n1, confidence)
    l2, u2 = wilson(k2, n2, confidence)
    diff = p1 - p2
    low = diff - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = diff + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return (max(-1.0, low), min(1.0, high))
