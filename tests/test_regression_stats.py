"""The sweep's three-way comparisons (orchestrator/core/stats/regression.py): how often each
answer comes, measured by simulation with a fixed seed or computed exactly over every count.

Each bound on a simulated rate is a binomial quantile that the draws would exceed once in a
billion seeds if the true rate were at the bound, so no seed makes these tests flaky.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom, ttest_ind
from scipy.stats import t as student_t

from orchestrator.core.stats.noninferiority import (
    TIE,
    _null_probability,
    _prefix,
    noninferiority_p,
    score_statistic,
)
from orchestrator.core.stats.proportions import newcombe_difference
from orchestrator.core.stats.regression import (
    NOISE_FLOOR,
    Comparison,
    Difference,
    compare_counts,
    compare_values,
    worst,
)

pytestmark = pytest.mark.pure

RANK = {Difference.SAME: 0, Difference.UNKNOWN: 1, Difference.DIFFERENT: 2}
TAIL = 1e-9


def most(draws: int, rate: float) -> int:
    """The most hits ``draws`` draws give at ``rate``, but once in 1/TAIL."""
    return int(binom.isf(TAIL, draws, rate))


def least(draws: int, rate: float) -> int:
    return int(binom.ppf(TAIL, draws, rate))


def simulate(n_cur: int, p_cur: float, n_base: int, p_base: float, *, draws: int,
             min_effect: float, alpha: float, seed: int = 16) -> Counter[Difference]:
    """Answers of ``draws`` sweeps, failing sessions drawn independently (one compare per
    distinct pair of counts: the answer is a function of them)."""
    rng = np.random.default_rng(seed)
    pairs = Counter(zip(rng.binomial(n_cur, p_cur, draws).tolist(),
                        rng.binomial(n_base, p_base, draws).tolist(), strict=True))
    answers: Counter[Difference] = Counter()
    for (k_cur, k_base), times in pairs.items():
        found = compare_counts("corruption", (k_cur, n_cur), (k_base, n_base),
                               min_effect=min_effect, alpha=alpha)
        answers[found.answer] += times
    return answers


# -- binary: corruption and wedging -------------------------------------------------------------

def test_background_noise_alone_is_rarely_different() -> None:
    # 1% background on both sides, two trials of 80 sessions each (exactly: 0.5% at 0.05)
    draws = 4000
    for alpha, min_effect in ((0.05, 0.01), (0.01, 0.01)):
        seen = simulate(160, 0.01, 160, 0.01, draws=draws, min_effect=min_effect, alpha=alpha)
        assert seen[Difference.DIFFERENT] <= most(draws, alpha), (alpha, seen)


def test_a_five_point_rise_is_different_most_of_the_time() -> None:
    # 1% -> 6%, four trials of 80 a side, alpha 0.01 (exactly: 87% DIFFERENT, never SAME)
    draws = 300
    seen = simulate(320, 0.06, 320, 0.01, draws=draws, min_effect=0.02, alpha=0.01)
    assert seen[Difference.DIFFERENT] >= least(draws, 0.8), seen
    assert seen[Difference.SAME] == 0


def test_a_clean_variant_with_enough_sessions_is_same() -> None:
    clean = compare_counts("corruption", (0, 320), (0, 320), min_effect=0.02, alpha=0.01)
    assert clean.answer == Difference.SAME
    assert clean.p_same is not None and clean.p_same <= 0.01
    too_few = compare_counts("corruption", (0, 240), (0, 240), min_effect=0.02, alpha=0.01)
    assert too_few.answer == Difference.UNKNOWN  # 240 sessions cannot rule out 2 points at 1%
    # at a 1% background, 4 x 80 a side rule out 5 points nearly always (exactly: 99.3%)
    draws = 300
    seen = simulate(320, 0.01, 320, 0.01, draws=draws, min_effect=0.05, alpha=0.01)
    assert seen[Difference.SAME] >= least(draws, 0.95), seen


def _same_prefix(n_cur: int, n_base: int, margin: float, alpha: float,
                 k_base_top: int) -> list[int]:
    """For each baseline count, how many current counts (0, 1, ...) are SAME: a prefix, since
    the p-value never falls as the current count rises (walked from the last column's)."""
    prefix, k = [], 0
    for k_base in range(k_base_top + 1):
        while k > 0 and noninferiority_p(k - 1, n_cur, k_base, n_base, margin) > alpha:
            k -= 1
        while k <= n_cur and noninferiority_p(k, n_cur, k_base, n_base, margin) <= alpha:
            k += 1
        prefix.append(k)
    return prefix


@pytest.mark.parametrize(("n_cur", "n_base", "margin", "alpha"), [
    (160, 160, 0.05, 0.01),
    (320, 80, 0.02, 0.05),  # the current side 4x the baseline: Newcombe's bound errs 6.1%
])
def test_same_errs_at_most_alpha_when_current_is_worse_by_the_margin(
        n_cur: int, n_base: int, margin: float, alpha: float) -> None:
    """The size of SAME, computed exactly (every pair of counts, not a sample) at baseline
    rates 0 to 10%, the current rate exactly ``margin`` above (the worst case of H0)."""
    top = int(binom.isf(1e-12, n_base, 0.1))
    prefix = np.array(_same_prefix(n_cur, n_base, margin, alpha, top))
    k_base = np.arange(top + 1)
    sizes = [float((binom.pmf(k_base, n_base, p) * binom.cdf(prefix - 1, n_cur, p + margin)).sum())
             for p in np.linspace(0.0, 0.1, 201)]
    assert max(sizes) <= alpha
    assert max(sizes) > alpha / 2  # and not wastefully conservative
    # the decision follows the prefix: SAME inside, not SAME just outside
    for k in (0, 3, 8):
        inside = compare_counts("wedging", (int(prefix[k]) - 1, n_cur), (k, n_base),
                                min_effect=margin, alpha=alpha)
        outside = compare_counts("wedging", (int(prefix[k]), n_cur), (k, n_base),
                                 min_effect=margin, alpha=alpha)
        assert inside.answer == Difference.SAME and outside.answer != Difference.SAME


@pytest.mark.parametrize(("k_cur", "n_cur", "k_base", "n_base", "margin"), [
    (2, 160, 3, 160, 0.05), (0, 80, 0, 80, 0.05), (9, 160, 1, 40, 0.02), (30, 120, 20, 120, 0.1),
])
def test_the_exact_p_is_the_largest_null_probability(
        k_cur: int, n_cur: int, k_base: int, n_base: int, margin: float) -> None:
    """Against a plain search: the statistic of every table (running maximum over the current
    count), the null probability of the region at or below the observed one on 4,001 rates."""
    stat = np.maximum.accumulate(score_statistic(
        np.arange(n_cur + 1.0)[:, None], n_cur, np.arange(n_base + 1.0)[None, :], n_base,
        margin), axis=0)
    prefix = np.count_nonzero(stat <= stat[k_cur, k_base] + 1e-9, axis=0)
    rates = np.linspace(0.0, 1.0 - margin, 4001)[:, None]
    null = (binom.pmf(np.arange(n_base + 1)[None, :], n_base, rates)
            * binom.cdf(prefix[None, :] - 1, n_cur, rates + margin)).sum(axis=1)
    plain = float(null.max())
    found = noninferiority_p(k_cur, n_cur, k_base, n_base, margin)
    assert plain * (1 - 1e-9) <= found <= plain * (1 + 1e-4)


@pytest.mark.parametrize(("n_cur", "n_base", "margin"), [
    (1, 1, 0.05), (3, 20, 0.005), (20, 3, 0.2), (12, 12, 0.05), (6, 16, 0.5),
])
def test_every_table_s_region_and_null_probability_are_those_counted_one_table_at_a_time(
        n_cur: int, n_base: int, margin: float) -> None:
    """Against the plainest computation, at every table of small samples: the region is the
    tables whose statistic (running maximum over the current count) is at most the observed
    one's, counted table by table (not searched for); its null probability sums the two
    binomials' probabilities over those tables (no tail left out) at 201 rates; the p-value
    is their largest (to the refinement's own error, 1e-11 here)."""
    stat = np.maximum.accumulate(score_statistic(
        np.arange(n_cur + 1.0)[:, None], n_cur, np.arange(n_base + 1.0)[None, :], n_base,
        margin), axis=0)
    rates = np.linspace(0.0, 1.0 - margin, 201)
    every_table = (binom.pmf(np.arange(n_cur + 1)[None, :, None], n_cur,
                             np.minimum(rates + margin, 1.0)[:, None, None])
                   * binom.pmf(np.arange(n_base + 1)[None, None, :], n_base,
                               rates[:, None, None]))
    for k_cur in range(n_cur + 1):
        for k_base in range(n_base + 1):
            region = stat <= stat[k_cur, k_base] + TIE
            null = (every_table * region).sum(axis=(1, 2))
            prefix = _prefix(k_cur, n_cur, k_base, n_base, margin)
            assert prefix.tolist() == region.sum(axis=0).tolist(), (k_cur, k_base)
            computed = _null_probability(prefix, n_cur, n_base, margin, rates)
            np.testing.assert_allclose(computed, null, rtol=1e-12, atol=1e-18,
                                       err_msg=str((k_cur, k_base)))
            found = noninferiority_p(k_cur, n_cur, k_base, n_base, margin)
            assert float(null.max()) * (1 - 1e-9) <= found <= 1.0, (k_cur, k_base)


@pytest.mark.parametrize(("n_cur", "n_base", "margin"), [
    (400, 300, 0.02), (150, 900, 0.1), (700, 700, 0.005),
])
def test_the_null_probability_of_large_samples_leaves_out_no_mass_that_counts(
        n_cur: int, n_base: int, margin: float) -> None:
    """Where the binomials' tails are left out (samples of hundreds): the region counted from
    the whole table, its null probability from SciPy's binomials over every count, at 201 rates
    and tables at 0, at the mean, in the tails and past the margin."""
    stat = np.maximum.accumulate(score_statistic(
        np.arange(n_cur + 1.0)[:, None], n_cur, np.arange(n_base + 1.0)[None, :], n_base,
        margin), axis=0)
    rates = np.linspace(0.0, 1.0 - margin, 201)
    base_pmf = binom.pmf(np.arange(n_base + 1)[None, :], n_base, rates[:, None])
    for rate_cur, rate_base in ((0.0, 0.0), (0.01, 0.01), (0.05, 0.01), (0.01, 0.05),
                                (0.3, 0.3 - margin / 2), (0.5, 0.5 - 2 * margin), (1.0, 0.9)):
        k_cur, k_base = round(rate_cur * n_cur), round(rate_base * n_base)
        count = np.count_nonzero(stat <= stat[k_cur, k_base] + TIE, axis=0)
        prefix = _prefix(k_cur, n_cur, k_base, n_base, margin)
        assert prefix.tolist() == count.tolist(), (k_cur, k_base)
        null = (base_pmf * binom.cdf(count[None, :] - 1, n_cur,
                                     np.minimum(rates + margin, 1.0)[:, None])).sum(axis=1)
        np.testing.assert_allclose(_null_probability(prefix, n_cur, n_base, margin, rates),
                                   null, rtol=1e-10, atol=1e-18, err_msg=str((k_cur, k_base)))


@settings(max_examples=40, deadline=None, database=None)
@given(n_cur=st.integers(1, 160), n_base=st.integers(1, 160), data=st.data(),
       min_effect=st.sampled_from([0.01, 0.02, 0.05, 0.2]),
       alpha=st.sampled_from([0.01, 0.05]))
def test_more_failures_in_current_never_make_it_look_better(
        n_cur: int, n_base: int, data: st.DataObject, min_effect: float, alpha: float) -> None:
    k_base = data.draw(st.integers(0, n_base))
    fewer = data.draw(st.integers(0, n_cur))
    more = data.draw(st.integers(fewer, n_cur))
    a = compare_counts("corruption", (fewer, n_cur), (k_base, n_base),
                       min_effect=min_effect, alpha=alpha)
    b = compare_counts("corruption", (more, n_cur), (k_base, n_base),
                       min_effect=min_effect, alpha=alpha)
    assert RANK[a.answer] <= RANK[b.answer]
    assert a.p_same is not None and b.p_same is not None
    assert b.p_worse <= a.p_worse + 1e-12 and b.p_same >= a.p_same * (1 - 1e-6)
    for c in (a, b):
        assert c.interval[0] <= c.change <= c.interval[1] and c.p_same is not None
        assert not (c.answer == Difference.DIFFERENT and c.p_same <= alpha)


def test_a_comparison_says_what_it_saw() -> None:
    c = compare_counts("corruption", (12, 240), (1, 240), min_effect=0.02, alpha=0.01)
    assert c.answer == Difference.DIFFERENT
    assert c.counts == ((12, 240), (1, 240)) and c.values is None
    assert c.current == pytest.approx(0.05) and c.baseline == pytest.approx(1 / 240)
    assert c.change == pytest.approx(0.05 - 1 / 240)
    assert c.interval == newcombe_difference(12, 240, 1, 240, confidence=0.98)
    assert c.p_same is not None
    assert c.p_worse <= 0.01 < c.p_same and (c.min_effect, c.alpha) == (0.02, 0.01)
    # significant but small is not DIFFERENT (Perfherder): 1.9 points where 2 are asked
    small = compare_counts("corruption", (20, 800), (5, 800), min_effect=0.02, alpha=0.01)
    assert small.p_worse <= 0.01 and small.answer != Difference.DIFFERENT


def test_no_judged_session_on_a_side_is_unknown() -> None:
    for current, baseline in (((0, 0), (0, 320)), ((0, 320), (0, 0)), ((0, 0), (0, 0))):
        c = compare_counts("wedging", current, baseline, min_effect=0.02, alpha=0.01)
        assert c.answer == Difference.UNKNOWN and c.p_worse == 1.0 and c.p_same == 1.0


@pytest.mark.parametrize(("current", "baseline", "kwargs", "says"), [
    ((5, 4), (0, 80), {}, "current counts"),
    ((-1, 80), (0, 80), {}, "current counts"),
    ((0, 80), (1.5, 80), {}, "baseline counts"),
    ((0, 80), (0, 80), {"min_effect": 0.0}, "min_effect"),
    ((0, 80), (0, 80), {"alpha": 0.5}, "alpha"),
])
def test_bad_counts_are_refused_naming_the_metric(
        current: tuple[int, int], baseline: tuple[int, int], kwargs: dict[str, float],
        says: str) -> None:
    limits = {"min_effect": 0.02, "alpha": 0.01, **kwargs}
    with pytest.raises(ValueError, match=f"^wedging: {says}"):
        compare_counts("wedging", current, baseline, min_effect=limits["min_effect"],
                       alpha=limits["alpha"])


def test_newcombe_keeps_its_95_percent_by_default() -> None:
    assert newcombe_difference(3, 80, 0, 80) == newcombe_difference(3, 80, 0, 80, 0.95)
    low95, high95 = newcombe_difference(3, 80, 0, 80)
    low98, high98 = newcombe_difference(3, 80, 0, 80, confidence=0.98)
    assert low98 < low95 < high95 < high98


# -- continuous: throughput and p99 latency -----------------------------------------------------

def _trials(rng: np.random.Generator, center: float, noise: float, n: int) -> list[float]:
    return (center * np.exp(rng.normal(0.0, noise, n))).tolist()


def test_a_30_percent_throughput_drop_in_three_trials_is_different() -> None:
    rng = np.random.default_rng(16)
    draws = 500
    hits = sum(compare_values("throughput", _trials(rng, 700.0, 0.03, 3),
                              _trials(rng, 1000.0, 0.03, 3), min_relative=0.05, alpha=0.01,
                              worse="lower").answer == Difference.DIFFERENT for _ in range(draws))
    assert hits >= least(draws, 0.95)


def test_equal_distributions_are_rarely_different_and_often_same() -> None:
    draws = 2000
    seen: dict[int, Counter[Difference]] = {}
    for trials, seed in ((3, 17), (5, 18)):
        rng = np.random.default_rng(seed)
        seen[trials] = Counter(
            compare_values("p99_latency", _trials(rng, 2.5, 0.03, trials),
                           _trials(rng, 2.5, 0.03, trials), min_relative=0.05, alpha=0.05,
                           worse="higher").answer for _ in range(draws))
        assert seen[trials][Difference.DIFFERENT] <= most(draws, 0.05), seen
    # 3% noise: 5 trials a side rule out a 5% worsening most of the time (measured: 74%)
    assert seen[5][Difference.SAME] >= least(draws, 0.6), seen
    # Student's p alone (no minimum effect) errs at most alpha too
    rng = np.random.default_rng(19)
    worse = sum(compare_values("throughput", _trials(rng, 900.0, 0.03, 4),
                               _trials(rng, 900.0, 0.03, 4), min_relative=0.05, alpha=0.05,
                               worse="lower").p_worse <= 0.05 for _ in range(draws))
    assert worse <= most(draws, 0.05)


def test_signs_and_student_agree_with_scipy() -> None:
    base = [1000.0, 1030.0, 985.0, 1012.0]
    slow = [900.0, 940.0, 915.0]
    c = compare_values("throughput", slow, base, min_relative=0.05, alpha=0.01, worse="lower")
    gm = math.exp(float(np.mean(np.log(slow)))) / math.exp(float(np.mean(np.log(base))))
    assert c.change == pytest.approx(1.0 - gm) and c.change > 0
    assert c.interval[0] < c.change < c.interval[1]
    student = ttest_ind(np.log(slow), np.log(base), equal_var=True, alternative="less")
    assert c.p_worse == pytest.approx(float(student.pvalue))
    assert c.values == (tuple(slow), tuple(base)) and c.counts is None
    slower = compare_values("p99_latency", base, slow, min_relative=0.05, alpha=0.01,
                            worse="higher")
    assert slower.change == pytest.approx(1.0 / gm - 1.0) and slower.change > 0
    assert slower.answer == Difference.DIFFERENT and slower.p_worse == pytest.approx(c.p_worse)
    better = compare_values("throughput", base, slow, min_relative=0.05, alpha=0.01,
                            worse="lower")
    assert better.change < 0 and better.answer == Difference.SAME


def test_identical_trials_are_credited_the_noise_floor_not_certainty() -> None:
    same = compare_values("throughput", [800.0] * 3, [800.0] * 3, min_relative=0.02,
                          alpha=0.01, worse="lower")
    assert same.p_worse == pytest.approx(0.5) and same.change == 0.0
    assert same.answer == Difference.UNKNOWN  # 1% floor, 3 a side: cannot rule out 2%
    half = float(student_t.ppf(0.99, 4)) * NOISE_FLOOR * math.sqrt(2 / 3)
    assert same.interval == pytest.approx((-math.expm1(half), -math.expm1(-half)))
    assert compare_values("throughput", [800.0] * 3, [800.0] * 3, min_relative=0.05,
                          alpha=0.01, worse="lower").answer == Difference.SAME
    # a 0.5% drop between identical trials: real to a t-test without a floor, not here
    tiny = compare_values("throughput", [796.0] * 3, [800.0] * 3, min_relative=0.002,
                          alpha=0.01, worse="lower")
    assert tiny.p_worse > 0.1 and tiny.answer == Difference.UNKNOWN
    # a 10% drop is still plain
    drop = compare_values("throughput", [720.0] * 3, [800.0] * 3, min_relative=0.05,
                          alpha=0.01, worse="lower")
    assert drop.answer == Difference.DIFFERENT and drop.p_same is not None
    assert all(math.isfinite(x) for x in (*drop.interval, drop.p_same, drop.p_worse))


@settings(max_examples=60, deadline=None, database=None)
@given(seed=st.integers(0, 2**32 - 1), factor=st.floats(0.5, 1.0),
       worse=st.sampled_from(["lower", "higher"]))
def test_a_worse_current_never_looks_better(seed: int, factor: float,
                                           worse: Literal["lower", "higher"]) -> None:
    rng = np.random.default_rng(seed)
    base, cur = _trials(rng, 100.0, 0.05, 3), _trials(rng, 100.0, 0.05, 4)
    # scale the current side towards worse: lower values where lower is worse, higher else
    scaled = [v * factor for v in cur] if worse == "lower" else [v / factor for v in cur]
    a = compare_values("m", cur, base, min_relative=0.05, alpha=0.05, worse=worse)
    b = compare_values("m", scaled, base, min_relative=0.05, alpha=0.05, worse=worse)
    assert RANK[a.answer] <= RANK[b.answer] and b.change >= a.change - 1e-12


def test_fewer_than_two_trials_on_a_side_are_unknown() -> None:
    for cur, base in (([900.0], [1000.0, 1010.0]), ([900.0, 905.0], [1000.0]), ([], [])):
        c = compare_values("throughput", cur, base, min_relative=0.05, alpha=0.01,
                           worse="lower")
        assert c.answer == Difference.UNKNOWN and c.interval == (-math.inf, math.inf)


@pytest.mark.parametrize("bad", [[100.0, math.nan], [100.0, math.inf], [100.0, 0.0],
                                 [100.0, -5.0]])
def test_non_finite_or_non_positive_values_are_refused_naming_the_metric(
        bad: list[float]) -> None:
    with pytest.raises(ValueError, match=r"^p99_latency: current values"):
        compare_values("p99_latency", bad, [1.0, 1.1], min_relative=0.05, alpha=0.01,
                       worse="higher")
    with pytest.raises(ValueError, match=r"^p99_latency: baseline values"):
        compare_values("p99_latency", [1.0, 1.1], bad, min_relative=0.05, alpha=0.01,
                       worse="higher")
    with pytest.raises(ValueError, match=r"^throughput: min_relative"):
        compare_values("throughput", [1.0, 1.1], [1.0, 1.1], min_relative=1.0, alpha=0.01,
                       worse="lower")


# -- several metrics -----------------------------------------------------------------------------

def test_worst_answer_of_several() -> None:
    assert worst([Difference.SAME, Difference.SAME]) == Difference.SAME
    assert worst([Difference.SAME, Difference.UNKNOWN]) == Difference.UNKNOWN
    mixed = [Difference.UNKNOWN, Difference.DIFFERENT, Difference.SAME]
    assert worst(iter(mixed)) == Difference.DIFFERENT
    with pytest.raises(ValueError):
        worst([])


def test_a_comparison_is_a_frozen_value() -> None:
    c = compare_counts("corruption", (0, 80), (0, 80), min_effect=0.05, alpha=0.05)
    assert isinstance(c, Comparison)
    with pytest.raises(AttributeError):
        c.answer = Difference.DIFFERENT  # type: ignore[misc]


def test_same_at_a_share_of_alpha_is_decided_at_that_share() -> None:
    # A caller that settles SAME at several looks tests each at a share of alpha
    # (``alpha_same``): SAME then needs p_same at or below the share, on counts and on values
    # alike, and the comparison says the level it was held to.
    alpha, share = 0.01, 0.0025
    between = 0  # cases SAME at alpha that its share holds back
    for k in range(0, 12):
        for n in (320, 480, 640):
            at_alpha = compare_counts("corruption", (k, n), (3, 320), min_effect=0.03,
                                      alpha=alpha)
            at_share = compare_counts("corruption", (k, n), (3, 320), min_effect=0.03,
                                      alpha=alpha, alpha_same=share)
            assert at_alpha.p_same is not None and at_share.p_same is not None
            assert at_alpha.p_same == at_share.p_same and at_share.level_same == share
            assert (at_share.answer is Difference.SAME) == (at_share.p_same <= share)
            between += share < at_alpha.p_same <= alpha and at_alpha.answer is Difference.SAME
    assert between >= 2
    between = 0
    base = [1000.0, 1030.0, 985.0, 1012.0]
    for drop in np.linspace(0.0, 0.06, 61):
        now = [v * (1.0 - drop) for v in base]
        at_alpha = compare_values("throughput", now, base, min_relative=0.08, alpha=alpha,
                                  worse="lower")
        at_share = compare_values("throughput", now, base, min_relative=0.08, alpha=alpha,
                                  worse="lower", alpha_same=share)
        assert at_share.p_same is not None and at_alpha.p_same is not None
        assert at_alpha.level_same == alpha
        assert (at_share.answer is Difference.SAME) == (at_share.p_same < share)
        between += share < at_alpha.p_same < alpha and at_alpha.answer is Difference.SAME
    assert between >= 2
    with pytest.raises(ValueError, match="alpha_same"):
        compare_counts("corruption", (0, 320), (0, 320), min_effect=0.02, alpha=0.01,
                       alpha_same=0.02)
