"""Three-way comparisons of a sweep's variant with its baseline, one metric at a time.

DIFFERENT: significantly worse AND worse by at least the metric's minimum effect (Perfherder
alerts on a significant and large change only: a significant 0.3% change is noise to a human).
SAME: the data rule out a worsening of the minimum effect or more at level alpha. UNKNOWN
otherwise, which means "add trials" (Pinpoint). Each side of a decision errs at most alpha.

Binary metrics (corruption, wedging) compare failing sessions of judged sessions; continuous
ones (throughput, p99 latency) compare one value per trial, on the log scale. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import numpy as np
from scipy.special import stdtr, stdtrit

from orchestrator.core.stats.exact import fisher_greater
from orchestrator.core.stats.noninferiority import noninferiority_p
from orchestrator.core.stats.proportions import newcombe_difference

# The least run-to-run spread a per-trial measure is credited with, as a standard deviation of
# its log (about 1%). Trials that repeat a value exactly (a twin, a rounded measure, two lucky
# runs) would otherwise give a zero standard error: a division by zero, or the certainty that a
# 0.1% change is real. Serving benchmarks on real machines move by 1% or more between runs
# (chromeperf ignores changes under 1% relative), so the floor hides no real precision; it only
# bounds how sure a few identical trials can make us.
NOISE_FLOOR = 0.01
# An effect computed as exactly the minimum (12/240 - 0/240 against 0.05) is at the minimum,
# whatever the last bit of its floating-point difference says.
SLACK = 1e-12


class Difference(StrEnum):
    """The answer of a comparison: did the metric change?"""

    DIFFERENT = "different"
    SAME = "same"
    UNKNOWN = "unknown"


_RANK = {Difference.SAME: 0, Difference.UNKNOWN: 1, Difference.DIFFERENT: 2}


@dataclass(frozen=True)
class Comparison:
    metric: str  # "corruption" | "wedging" | "throughput" | "p99_latency"
    answer: Difference
    baseline: float  # the baseline's rate (binary) or geometric mean (continuous)
    current: float
    # binary: current rate - baseline rate (0.05 is 5 points); continuous: relative change,
    # signed so that > 0 is worse (a 30% throughput drop and a 30% p99 rise are both 0.3);
    # words a person reads sign it as the metric moved (``moved``: "throughput -30%")
    change: float
    interval: tuple[float, float]  # of change, two-sided 1 - 2 alpha (each side errs alpha)
    p_worse: float  # one-sided p that current is worse than baseline
    # p of H0 "current is worse by min_effect or more" (small => SAME); None where SAME was
    # not tested (``same=False``: a sweep settles SAME at its looks only)
    p_same: float | None
    min_effect: float  # in the units of change
    alpha: float
    counts: tuple[tuple[int, int], tuple[int, int]] | None = None  # ((k, n) current, baseline)
    # the counts the tests took: sessions as independent ones, at each side's design effect
    # (stats/clustered.py); None where they are the sessions themselves
    effective: tuple[tuple[int, int], tuple[int, int]] | None = None
    # the p of the current side's trials, each spread as a restart spreads it, were its rate
    # the baseline's plus min_effect (SAME must pass it too); None where none was given
    p_same_trials: float | None = None
    values: tuple[tuple[float, ...], tuple[float, ...]] | None = None  # current, baseline
    # the p_worse DIFFERENT needed where it is not ``alpha``: a caller that tests at several
    # looks spends its alpha over them (None: ``alpha``)
    alpha_worse: float | None = None
    # the p_same SAME needed where it is not ``alpha``, spent over looks as ``alpha_worse`` is
    alpha_same: float | None = None

    @property
    def level_worse(self) -> float:
        """The p_worse DIFFERENT needed."""
        return self.alpha if self.alpha_worse is None else self.alpha_worse

    @property
    def level_same(self) -> float:
        """The p_same SAME needed."""
        return self.alpha if self.alpha_same is None else self.alpha_same


# The per-trial figures whose drop is the worsening (``compare_values(worse="lower")``).
LOWER_IS_WORSE = frozenset({"throughput"})


def moved(metric: str, change: float) -> float:
    """A comparison's ``change`` as the metric itself moved, for words a person reads: a
    throughput drop is negative (``change`` 0.31 is "throughput -31%"), a p99 rise and a
    rate's rise positive. ``change`` stays signed worse-positive, as the tests decide."""
    return -change if metric in LOWER_IS_WORSE else change


def said_change(metric: str, change: float, digits: int = 0) -> str:
    """A continuous metric's change as it moved, signed: "throughput -31%", "p99_latency +30%"."""
    return f"{metric} {moved(metric, change):+.{digits}%}"


def worst(answers: Iterable[Difference]) -> Difference:
    """The worst answer of several (DIFFERENT > UNKNOWN > SAME): a variant is the SAME only
    when every metric is. No answers at all is an error, not a clean bill."""
    found = list(answers)
    if not found:
        raise ValueError("worst() of no answers")
    return max(found, key=_RANK.__getitem__)


def _check_alpha(metric: str, alpha: float) -> None:
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"{metric}: alpha must be between 0 and 0.5, got {alpha}")


def _check_level(metric: str, name: str, alpha: float, level: float | None) -> float:
    """A test's own level (``alpha_worse``, ``alpha_same``): ``alpha`` where None."""
    if level is None:
        return alpha
    if not 0.0 < level <= alpha:
        raise ValueError(f"{metric}: {name} must be above 0 and at most alpha ({alpha}), "
                         f"got {level}")
    return level


def _check_counts(metric: str, side: str, counts: tuple[int, int]) -> tuple[int, int]:
    k, n = counts
    if isinstance(k, bool) or isinstance(n, bool) or not isinstance(k, int | np.integer) \
            or not isinstance(n, int | np.integer) or not 0 <= k <= n:
        raise ValueError(f"{metric}: {side} counts must be whole numbers 0 <= k <= n, "
                         f"got {counts!r}")
    return int(k), int(n)


def compare_counts(metric: str, current: tuple[int, int], baseline: tuple[int, int], *,
                   min_effect: float, alpha: float, detect: float | None = None,
                   effective: tuple[tuple[int, int], tuple[int, int]] | None = None,
                   p_same_trials: float | None = None,
                   alpha_worse: float | None = None, alpha_same: float | None = None,
                   same: bool = True) -> Comparison:
    """Compare failing sessions of judged sessions, ``(k, n)``, current against baseline.

    DIFFERENT: one-sided Fisher p <= alpha and a rise of at least ``detect`` (a rate
    difference: 0.02 is 2 points; default ``min_effect``: a true rise of exactly the minimum
    effect is then seen below it half the time, so a caller that must catch it asks less).
    SAME: Chan's exact test rules out a rise of ``min_effect``
    or more at level alpha (``noninferiority_p``; its size is at most alpha, where asymptotic
    bounds are not when the current side has many more sessions than the baseline).
    ``interval`` is Newcombe's, descriptive only: at its edge it may disagree with the exact
    tests that decide.

    ``effective``: the (current, baseline) counts the tests and the interval take, where
    sessions are clustered by trial (each side's counts at its design effect,
    stats/clustered.py: a trial's sessions share a server); the rates and the change stay
    those of the sessions themselves. ``p_same_trials``: a second test of SAME, on the
    current side's trials one by one (stats/clustered.py ``Dispersion.at_most``): a variant
    failing at the rate SAME rules out, whose few restarts landed low, shows fewer failures
    than a design effect taken at those trials' own rate allows for. SAME must pass both;
    ``p_same`` is the larger. ``alpha_worse``: the p_worse DIFFERENT needs, where a caller
    looking several times spends ``alpha`` over its looks (default ``alpha``); ``alpha_same``
    likewise the p_same SAME needs. ``same=False``:
    SAME is not tested (``p_same`` None, never the answer), only DIFFERENT: the exact test of
    SAME is the costly one, and a caller between its looks asks only whether it is worse.
    """
    _check_alpha(metric, alpha)
    worse_at = _check_level(metric, "alpha_worse", alpha, alpha_worse)
    same_at = _check_level(metric, "alpha_same", alpha, alpha_same)
    if not 0.0 < min_effect < 1.0:
        raise ValueError(f"{metric}: min_effect must be between 0 and 1, got {min_effect}")
    k1, n1 = _check_counts(metric, "current", current)
    k2, n2 = _check_counts(metric, "baseline", baseline)
    rate1 = k1 / n1 if n1 else 0.0
    rate2 = k2 / n2 if n2 else 0.0
    change = rate1 - rate2
    tested = ((k1, n1), (k2, n2)) if effective is None else (
        _check_counts(metric, "current effective", effective[0]),
        _check_counts(metric, "baseline effective", effective[1]))
    (e1, m1), (e2, m2) = tested
    interval = newcombe_difference(e1, m1, e2, m2, confidence=1.0 - 2.0 * alpha)
    p_worse = fisher_greater(e1, m1, e2, m2)
    p_same = max(noninferiority_p(e1, m1, e2, m2, float(min_effect)),
                 0.0 if p_same_trials is None else p_same_trials) if same else None
    if n1 == 0 or n2 == 0:
        answer = Difference.UNKNOWN
    elif p_worse <= worse_at and change >= (min_effect if detect is None else detect) - SLACK:
        answer = Difference.DIFFERENT
    elif p_same is not None and p_same <= same_at and change < min_effect - SLACK:
        answer = Difference.SAME
    else:
        answer = Difference.UNKNOWN
    return Comparison(metric, answer, rate2, rate1, change, interval, p_worse, p_same,
                      min_effect, alpha, counts=((k1, n1), (k2, n2)),
                      effective=None if tested == ((k1, n1), (k2, n2)) else tested,
                      p_same_trials=p_same_trials, alpha_worse=alpha_worse,
                      alpha_same=alpha_same)


def _logs(metric: str, side: str, values: Sequence[float]) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        array = np.array([math.nan])
    if array.ndim != 1 or not np.all(np.isfinite(array)) or not np.all(array > 0.0):
        raise ValueError(f"{metric}: {side} values must be finite and positive, "
                         f"got {list(values)!r}")
    return np.log(array)


def compare_values(metric: str, current: Sequence[float], baseline: Sequence[float], *,
                   min_relative: float, alpha: float, worse: Literal["lower", "higher"],
                   noise_floor: float = NOISE_FLOOR, paired: bool = False,
                   detect: float | None = None, alpha_worse: float | None = None,
                   alpha_same: float | None = None, same: bool = True) -> Comparison:
    """Compare one value per trial, current against baseline, on the log scale (a ratio of
    geometric means: a 10% drop means the same at 100 and at 10,000 tokens/s).

    ``paired``: ``baseline[i]`` is the control run beside ``current[i]`` (Pinpoint's
    alternated A/B): the test is Student's one-sample t on the pairs' log ratios, so the
    machine's drift over the hours of a run, which a pair shares, leaves the comparison (the
    two sides unpaired would count it as spread). The pairs' differences' standard deviation is
    at least ``noise_floor`` times the square root of 2 (two trials' floors).

    ``worse``: "lower" for throughput, "higher" for latency. Student's t with the two sides'
    spread pooled, one-sided towards worse: a sweep's baseline has a few trials, and Welch's
    degrees of freedom fall towards its own (two, for three trials), where no bound is ever
    tight enough to say SAME (bench/sweeps.py measured 46% of clean runs left undecided).
    DIFFERENT: p_worse <= alpha and a relative worsening of at least ``detect`` (default
    ``min_relative``: a caller that must catch a worsening of ``min_relative`` asks less, as
    ``compare_counts`` does);
    SAME: the one-sided 1 - alpha upper bound of the worsening is below ``min_relative``.
    The pooled standard deviation of log values is at least ``noise_floor`` (NOISE_FLOOR).
    Fewer than two values on a side: UNKNOWN, and its interval is infinite. ``alpha_worse``,
    ``alpha_same`` and ``same``: as ``compare_counts`` takes them (SAME at ``alpha_same``: the
    upper bound at that level).
    """
    _check_alpha(metric, alpha)
    worse_at = _check_level(metric, "alpha_worse", alpha, alpha_worse)
    same_at = _check_level(metric, "alpha_same", alpha, alpha_same)
    if worse not in ("lower", "higher"):
        raise ValueError(f"{metric}: worse must be 'lower' or 'higher', got {worse!r}")
    if not min_relative > 0.0 or (worse == "lower" and not min_relative < 1.0):
        raise ValueError(f"{metric}: min_relative must be above 0 (and below 1 where lower is "
                         f"worse), got {min_relative}")
    if not noise_floor > 0.0:
        raise ValueError(f"{metric}: noise_floor must be above 0, got {noise_floor}")
    log1 = _logs(metric, "current", current)
    log2 = _logs(metric, "baseline", baseline)
    sign = -1.0 if worse == "lower" else 1.0

    def relative(log_worsening: float) -> float:
        # the worsening as a share of the baseline: 1 - cur/base for lower, cur/base - 1 higher
        if worse == "lower":
            return -math.expm1(-max(log_worsening, -700.0))  # clamped: no overflow
        return math.expm1(log_worsening) if log_worsening < 700.0 else math.inf

    mean1 = float(log1.mean()) if log1.size else 0.0
    mean2 = float(log2.mean()) if log2.size else 0.0
    current_mean = math.exp(mean1) if log1.size else 0.0
    baseline_mean = math.exp(mean2) if log2.size else 0.0
    values = (tuple(float(v) for v in current), tuple(float(v) for v in baseline))
    if log1.size < 2 or log2.size < 2:
        change = relative(sign * (mean1 - mean2)) if log1.size and log2.size else 0.0
        return Comparison(metric, Difference.UNKNOWN, baseline_mean, current_mean, change,
                          (-math.inf, math.inf), 1.0, 1.0, min_relative, alpha, values=values,
                          alpha_worse=alpha_worse, alpha_same=alpha_same)
    worsening = sign * (mean1 - mean2)
    if paired:
        if log1.size != log2.size:
            raise ValueError(f"{metric}: paired values need as many on each side, got "
                             f"{log1.size} and {log2.size}")
        df = log1.size - 1
        spread = float((log1 - log2).std(ddof=1))
        se = max(spread, noise_floor * math.sqrt(2.0)) / math.sqrt(log1.size)
    else:
        df = log1.size + log2.size - 2
        pooled = ((log1.size - 1) * float(log1.var(ddof=1))
                  + (log2.size - 1) * float(log2.var(ddof=1))) / df
        se = max(math.sqrt(pooled), noise_floor) * math.sqrt(1 / log1.size + 1 / log2.size)
    margin = -math.log1p(-min_relative) if worse == "lower" else math.log1p(min_relative)
    # Student's t distribution function and its inverse (scipy.stats.t without its overhead)
    p_worse = float(stdtr(df, -worsening / se))
    p_same = float(stdtr(df, (worsening - margin) / se)) if same else None
    half = float(stdtrit(df, 1.0 - alpha)) * se
    low, high = relative(worsening - half), relative(worsening + half)
    change = relative(worsening)
    if p_worse <= worse_at and change >= (min_relative if detect is None else detect) - SLACK:
        answer = Difference.DIFFERENT
    elif same and (high if same_at == alpha else relative(
            worsening + float(stdtrit(df, 1.0 - same_at)) * se)) < min_relative:
        answer = Difference.SAME
    else:
        answer = Difference.UNKNOWN
    return Comparison(metric, answer, baseline_mean, current_mean, change, (low, high),
                      p_worse, p_same, min_relative, alpha, values=values,
                      alpha_worse=alpha_worse, alpha_same=alpha_same)
