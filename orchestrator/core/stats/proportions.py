"""Intervals for proportions of sessions."""

from __future__ import annotations

import math

from scipy.stats import binomtest


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for k of n; (0, 1) when there is no data."""
    if n <= 0:
        return (0.0, 1.0)
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


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
