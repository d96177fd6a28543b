"""An exact test that one rate is not worse than another by a margin (non-inferiority).

H0: p_cur - p_base >= margin, against p_cur - p_base < margin. A small p rules out a rise of
``margin`` or more: the evidence that a variant is the SAME as its baseline.

Chan's exact unconditional test (Chan 1998, Stat Med 17:1403): the Farrington-Manning score
statistic, its p-value the largest P(statistic <= observed) over every baseline rate on the
boundary p_cur = p_base + margin. Why not an asymptotic bound (Newcombe's, or the score test
read off the normal): computed exactly over every count, their size reaches 1.9 alpha at alpha
0.01 when the current side has four times the baseline's sessions and the rates are low (640
vs 160 sessions, baseline 1%, margin 1 point) — the usual case of a sweep, where UNKNOWN adds
trials to the current side only. This test's size is at most alpha by construction, and it
calls SAME as often as Newcombe's bound where that one holds its size (160 vs 160).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import minimize_scalar
from scipy.special import gammaln, xlog1py, xlogy

# A p-value counts the observed table itself: a statistic this close to it is a tie.
TIE = 1e-9


def score_statistic(k1: NDArray[np.float64], n1: int, k2: NDArray[np.float64], n2: int,
                    margin: float) -> NDArray[np.float64]:
    """Farrington-Manning z of p1 - p2 - margin, its variance at the rates that maximise the
    likelihood under p1 - p2 = margin (the closed-form root of their cubic)."""
    p1, p2 = k1 / n1, k2 / n2
    theta = n2 / n1
    a = 1.0 + theta
    b = -(1.0 + theta + p1 + theta * p2 + margin * (theta + 2.0))
    c = margin * margin + margin * (2.0 * p1 + theta + 1.0) + p1 + theta * p2
    d = -p1 * margin * (1.0 + margin)
    v = b**3 / (27.0 * a**3) - b * c / (6.0 * a * a) + d / (2.0 * a)
    u = np.sign(v) * np.sqrt(np.maximum(b * b / (9.0 * a * a) - c / (3.0 * a), 0.0))
    safe_u = np.where(u == 0.0, 1.0, u)
    cos_arg = np.where(u == 0.0, 0.0, v / safe_u**3)
    w = (math.pi + np.arccos(np.clip(cos_arg, -1.0, 1.0))) / 3.0
    r1 = np.clip(2.0 * u * np.cos(w) - b / (3.0 * a), margin, 1.0)
    r2 = r1 - margin
    # never zero for 0 < margin < 1: r1 >= margin > 0 and r2 <= 1 - margin < 1
    var = r1 * (1.0 - r1) / n1 + r2 * (1.0 - r2) / n2
    result: NDArray[np.float64] = (p1 - p2 - margin) / np.sqrt(var)
    return result


@lru_cache(maxsize=32)
def _statistic(n1: int, n2: int, margin: float) -> NDArray[np.float64]:
    """The statistic of every table, made non-decreasing in k1 (a running maximum): any
    statistic gives an exact test, and this one makes the region of small values a prefix of
    k1 in each column, so the size is largest on the boundary of H0."""
    k1 = np.arange(n1 + 1, dtype=np.float64)[:, None]
    k2 = np.arange(n2 + 1, dtype=np.float64)[None, :]
    table = np.maximum.accumulate(score_statistic(k1, n1, k2, n2, margin), axis=0)
    table.setflags(write=False)
    return table


@lru_cache(maxsize=64)
def _log_choose(n: int) -> NDArray[np.float64]:
    k = np.arange(n + 1, dtype=np.float64)
    result: NDArray[np.float64] = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)
    result.setflags(write=False)
    return result


def _log_pmf(n: int, rates: NDArray[np.float64]) -> NDArray[np.float64]:
    k = np.arange(n + 1, dtype=np.float64)[None, :]
    p = rates[:, None]
    result: NDArray[np.float64] = _log_choose(n)[None, :] + xlogy(k, p) + xlog1py(n - k, -p)
    return result


def _null_probability(prefix: NDArray[np.intp], n1: int, n2: int, margin: float,
                      base_rates: NDArray[np.float64]) -> NDArray[np.float64]:
    """P(k1 < prefix[k2]) at each baseline rate, the current rate ``margin`` above it."""
    cur_rates = np.minimum(base_rates + margin, 1.0)
    pmf1 = np.exp(_log_pmf(n1, cur_rates))
    cdf1 = np.concatenate([np.zeros((len(base_rates), 1)), np.cumsum(pmf1, axis=1)], axis=1)
    pmf2 = np.exp(_log_pmf(n2, base_rates))
    result: NDArray[np.float64] = (pmf2 * cdf1[:, prefix]).sum(axis=1)
    return result


@lru_cache(maxsize=4096)
def noninferiority_p(k_cur: int, n_cur: int, k_base: int, n_base: int, margin: float) -> float:
    """Exact p-value of H0: p_cur >= p_base + margin, from k_cur of n_cur and k_base of n_base.

    1.0 without data on either side. The supremum over the baseline rate is sought on a grid,
    even in arcsine-square-root (where a binomial's spread is the same at every rate), fine
    enough that the null probability moves little between points, then refined around the
    best few points.
    """
    if not 0.0 < margin < 1.0:
        raise ValueError(f"margin must be between 0 and 1, got {margin}")
    if n_cur <= 0 or n_base <= 0:
        return 1.0
    table = _statistic(n_cur, n_base, margin)
    observed = table[k_cur, k_base]
    prefix = np.count_nonzero(table <= observed + TIE, axis=0)
    top = math.asin(math.sqrt(1.0 - margin))
    points = 48 + 8 * math.ceil(math.sqrt(max(n_cur, n_base)))
    angles = np.linspace(0.0, top, points)
    null = _null_probability(prefix, n_cur, n_base, margin, np.sin(angles) ** 2)
    best = float(null.max())
    step = top / (points - 1)
    for i in np.argsort(null)[-3:]:
        found = minimize_scalar(
            lambda a: -float(_null_probability(prefix, n_cur, n_base, margin,
                                               np.array([math.sin(a) ** 2]))[0]),
            bounds=(max(0.0, angles[i] - step), min(top, angles[i] + step)),
            method="bounded", options={"xatol": step * 1e-3})
        best = max(best, -float(found.fun))
    return min(1.0, best)
