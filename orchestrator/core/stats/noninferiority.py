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
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import minimize_scalar
from scipy.special import gammaln

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
    v = b * b * b / (27.0 * a**3) - b * c / (6.0 * a * a) + d / (2.0 * a)
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


def _first_above(threshold: float, n1: int, n2: int, margin: float) -> NDArray[np.intp]:
    """For each k2, the least k1 whose statistic exceeds a NEGATIVE ``threshold`` (n1 + 1 if
    none): the length of the column's prefix at or below it in ``_statistic``'s table, found by
    bisection in every column at once (n2 log n1 statistics, not n1 n2).

    Exact because the statistic rises with k1 wherever it is negative, so "above" is false,
    then true, down a column. Fix p2 = k2/n2; let r be the current rate under H0's boundary
    that maximises the likelihood (what the statistic's variance is taken at), q = r - margin
    the baseline's, s1 = r (1 - r), s2 = q (1 - q). The likelihood's cross derivative in
    (r, p1) is positive, so r never falls as p1 rises. With r inside (margin, 1), its score
    equation n1 (p1 - r) / s1 = n2 (q - p2) / s2 = lam gives p1 - p2 - margin = lam * var, so
    the statistic is lam sqrt(var) = (q - p2) sqrt(A), A = n2 / s2 + (n2^2 / n1) s1 / s2^2: a
    function of q alone, negative exactly where q < p2 (where p1 < p2 + margin). There
    d log|statistic| / dq = A' / 2A - 1 / (p2 - q) < 0: A' / A is a weighted mean of
    (log 1/s2)' = -f(q) and (log s1/s2^2)' = f(r) - 2 f(q), with f(v) = 1/v - 1/(1-v) falling
    and r > q, so A' / 2A <= -f(q) / 2 < 1 / (1 - q) <= 1 / (p2 - q). At r = margin (p2 = 0
    only) the statistic is linear in p1, rising. Where p1 >= p2 + margin it is 0 or more,
    above the threshold. (A proof in exact arithmetic: the tests compare the prefix with the
    table's, count for count.)
    """
    k2 = np.arange(n2 + 1, dtype=np.float64)
    low = np.zeros(n2 + 1, dtype=np.intp)  # every k1 below low is at or below the threshold
    # high is above it, or n1 + 1: from the first k1 with p1 past p2 + margin, where the
    # statistic is positive
    high = np.minimum(np.floor(n1 * (k2 / n2 + margin)) + 2, n1 + 1).astype(np.intp)
    while (searching := low < high).any():
        middle = np.minimum((low + high) // 2, n1)
        above = score_statistic(middle.astype(np.float64), n1, k2, n2, margin) > threshold
        high = np.where(searching & above, middle, high)
        low = np.where(searching & ~above, middle + 1, low)
    return low


def _prefix(k_cur: int, n_cur: int, k_base: int, n_base: int,
            margin: float) -> NDArray[np.intp]:
    """For each baseline count, how many current counts have a statistic (its running maximum
    down the column) at most the observed table's: the region whose null probability is the
    p-value. Without the whole table where the observed statistic is negative (the case of a
    variant that may be the SAME, ``_first_above``); from the table where it is not."""
    observed = float(score_statistic(np.array([float(k_cur)]), n_cur,
                                     np.array([float(k_base)]), n_base, margin)[0])
    if observed + TIE < 0.0:
        return _first_above(observed + TIE, n_cur, n_base, margin)
    table = _statistic(n_cur, n_base, margin)
    return np.count_nonzero(table <= table[k_cur, k_base] + TIE, axis=0)


@lru_cache(maxsize=64)
def _log_choose(n: int) -> NDArray[np.float64]:
    k = np.arange(n + 1, dtype=np.float64)
    result: NDArray[np.float64] = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)
    result.setflags(write=False)
    return result


# How far into a binomial's tails the null probability reaches: Bernstein's inequality puts at
# most exp(-TAIL_EXPONENT) = 1e-20 of its mass beyond np + t, and as much below np - t, where
# t^2 = 2 TAIL_EXPONENT (np(1 - p) + t/3); what lies beyond moves no p-value by 1e-19.
TAIL_EXPONENT = 46.0


def _rows(values: NDArray[np.generic], first: NDArray[np.intp], width: int) -> NDArray[Any]:
    """A copy of values[first[i] : first[i] + width] for each i (each inside ``values``)."""
    step = values.strides[0]
    windows = np.lib.stride_tricks.as_strided(values, shape=(len(values) - width + 1, width),
                                              strides=(step, step), writeable=False)
    return windows[first]


def _pmf_window(n: int, rates: NDArray[np.float64]) -> tuple[NDArray[np.intp],
                                                             NDArray[np.float64]]:
    """Binomial(n, rate) probabilities of the counts that carry the mass at each rate: the
    first count of each row, and the rows, of one width, inside 0..n."""
    reach = TAIL_EXPONENT / 3.0 + np.sqrt(TAIL_EXPONENT**2 / 9.0
                                          + 2.0 * TAIL_EXPONENT * n * rates * (1.0 - rates))
    first = np.maximum(np.floor(n * rates - reach), 0.0).astype(np.intp)
    last = np.minimum(np.ceil(n * rates + reach), n).astype(np.intp)
    width = int((last - first).max()) + 1
    first = np.minimum(first, n + 1 - width)  # a row moved down still covers first..last
    # k log p + (n - k) log(1 - p) as k log(p / (1 - p)) + n log(1 - p): two logarithms a
    # rate, not two a count; a rate of 0 or 1 (infinite odds) puts all on one count, below
    uncertain = (rates > 0.0) & (rates < 1.0)
    odds = np.where(uncertain, rates, 0.5)
    log_odds = np.log(odds) - np.log1p(-odds)
    pmf = _rows(_log_choose(n), first, width)
    pmf += np.arange(width, dtype=np.float64)[None, :] * log_odds[:, None]
    pmf += (first * log_odds + n * np.log1p(-odds))[:, None]
    np.exp(pmf, out=pmf)
    if not uncertain.all():
        certain = np.flatnonzero(~uncertain)
        pmf[certain] = 0.0
        pmf[certain, np.where(rates[certain] >= 1.0, n, 0) - first[certain]] = 1.0
    return first, pmf


def _null_probability(prefix: NDArray[np.intp], n1: int, n2: int, margin: float,
                      base_rates: NDArray[np.float64]) -> NDArray[np.float64]:
    """P(k1 < prefix[k2]) at each baseline rate, the current rate ``margin`` above it (both
    binomials over the counts that carry their mass, ``_pmf_window``)."""
    cur_rates = np.minimum(base_rates + margin, 1.0)
    first1, pmf1 = _pmf_window(n1, cur_rates)
    cdf1 = np.zeros((len(base_rates), pmf1.shape[1] + 1))
    np.cumsum(pmf1, axis=1, out=cdf1[:, 1:])
    first2, pmf2 = _pmf_window(n2, base_rates)
    # P(k1 < prefix) is cdf1 at the number of the row's counts below prefix
    below = _rows(prefix, first2, pmf2.shape[1]) - first1[:, None]
    np.clip(below, 0, pmf1.shape[1], out=below)
    result: NDArray[np.float64] = np.einsum(
        "ij,ij->i", pmf2, np.take_along_axis(cdf1, below, axis=1))
    return result


def _pmf_row(n: int, rate: float) -> tuple[int, NDArray[np.float64]]:
    """``_pmf_window`` at one rate, in the same operations (so to the same bits) on a row
    instead of a table of rows: the refinement's dozens of calls a p-value spent most of
    their time building tables of one row."""
    reach = TAIL_EXPONENT / 3.0 + math.sqrt(TAIL_EXPONENT**2 / 9.0
                                            + 2.0 * TAIL_EXPONENT * n * rate * (1.0 - rate))
    first = max(math.floor(n * rate - reach), 0)
    last = min(math.ceil(n * rate + reach), n)
    if not 0.0 < rate < 1.0:  # all on one count
        pmf = np.zeros(last - first + 1)
        pmf[(n if rate >= 1.0 else 0) - first] = 1.0
        return first, pmf
    log_odds = np.log(rate) - np.log1p(-rate)
    pmf = _log_choose(n)[first:last + 1] + np.arange(last - first + 1.0) * log_odds
    pmf += first * log_odds + n * np.log1p(-rate)
    return first, np.exp(pmf, out=pmf)


def _null_probability_at(prefix: NDArray[np.intp], n1: int, n2: int, margin: float,
                         base_rate: float) -> float:
    """``_null_probability`` at one baseline rate (``_pmf_row``)."""
    first1, pmf1 = _pmf_row(n1, min(base_rate + margin, 1.0))
    cdf1 = np.zeros(len(pmf1) + 1)
    np.add.accumulate(pmf1, out=cdf1[1:])  # np.cumsum's own work, without its wrappers
    first2, pmf2 = _pmf_row(n2, base_rate)
    below = prefix[first2:first2 + len(pmf2)] - first1
    np.minimum(np.maximum(below, 0, out=below), len(pmf1), out=below)
    return float(np.einsum("j,j->", pmf2, cdf1[below]))


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
    prefix = _prefix(k_cur, n_cur, k_base, n_base, margin)
    top = math.asin(math.sqrt(1.0 - margin))
    points = 48 + 8 * math.ceil(math.sqrt(max(n_cur, n_base)))
    angles = np.linspace(0.0, top, points)
    null = _null_probability(prefix, n_cur, n_base, margin, np.sin(angles) ** 2)
    best = float(null.max())
    step = top / (points - 1)

    for i in np.argsort(null)[-3:]:
        found = minimize_scalar(
            lambda a: -_null_probability_at(prefix, n_cur, n_base, margin, math.sin(a) ** 2),
            bounds=(max(0.0, angles[i] - step), min(top, angles[i] + step)),
            method="bounded", options={"xatol": step * 1e-3})
        best = max(best, -float(found.fun))
    return min(1.0, best)
