"""Sessions clustered by trial (orchestrator/core/stats/clustered.py): the spread between a
variant's trials is estimated from the trials, and the counts a test takes shrink by the design
effect it implies, on pure values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import betabinom, binom

from orchestrator.core.stats.clustered import INDEPENDENT, Dispersion, dispersion

pytestmark = pytest.mark.pure


def _trials(rng: np.random.Generator, p: float, tau2: float, trials: int,
            sessions: int) -> list[tuple[int, int]]:
    """Trials whose rate is ``p`` times a log-normal restart multiplier of mean 1, variance
    ``tau2`` (as the twins' noise draws it)."""
    sigma2 = np.log1p(tau2)
    out = []
    for _ in range(trials):
        multiplier = rng.lognormal(-sigma2 / 2, np.sqrt(sigma2)) if tau2 else 1.0
        out.append((int(rng.binomial(sessions, min(1.0, p * multiplier))), sessions))
    return out


def test_the_spread_between_trials_is_recovered_and_is_none_for_iid_trials() -> None:
    rng = np.random.default_rng(7)
    noisy = dispersion(_trials(rng, 0.15, 0.5, 6, 80) for _ in range(40))
    iid = dispersion(_trials(rng, 0.15, 0.0, 6, 80) for _ in range(40))
    assert noisy.df == 40 * 5
    assert 0.3 < noisy.tau2 < 0.7  # the planted 0.5, within its sampling error
    assert iid.tau2 < 0.05  # chance alone: near zero


def test_clean_variants_and_single_trials_show_no_spread() -> None:
    assert dispersion([[(0, 80), (0, 80)], [(3, 80)]]) == Dispersion(0.0, 0)


def test_counts_shrink_by_the_design_effect_and_not_without_spread() -> None:
    spread = Dispersion(0.5, 10)
    k, n = spread.effective((30, 240), 3)  # 12.5% over 3 trials of 80
    d = 1 + 79 * min(1.0, 0.5 * 0.125 / 0.875)
    assert (k, n) == (int(30 / d + 0.5), int(240 / d + 0.5))
    assert n < 240 and abs(k / n - 0.125) < 0.03  # the rate is kept
    assert INDEPENDENT.effective((30, 240), 3) == (30, 240)
    assert spread.effective((0, 240), 3) == (0, 240)  # a clean variant's zeros keep their worth


def test_a_clean_run_is_likelier_at_a_failing_rate_when_trials_spread() -> None:
    """Few failures at a true rate are likelier when a restart can land well: the PASS test's
    tail is wider than the binomial's, and equal to it without spread."""
    sizes = [80, 80, 80]
    independent = INDEPENDENT.at_most(1, sizes, 0.05)
    assert abs(independent - binom.cdf(1, 240, 0.05)) < 1e-12
    assert Dispersion(1.0, 10).at_most(1, sizes, 0.05) > 10 * independent


def test_trials_of_different_sizes_each_count_at_their_own_size() -> None:
    """The tail over trials of 80, 40, 80 and 12 sessions is the sum's, each trial's count a
    beta-binomial of its own size (convolved in full here, not cut at k)."""
    rate, spread, sizes = 0.04, Dispersion(0.3, 4), [80, 40, 80, 12]
    scale = 1.0 / spread.correlation(rate) - 1.0
    total = np.ones(1)
    for n in sizes:
        total = np.convolve(total, betabinom.pmf(np.arange(n + 1), n, rate * scale,
                                                 (1.0 - rate) * scale))
    for k in (0, 3, 9):
        assert spread.at_most(k, sizes, rate) == pytest.approx(total[:k + 1].sum(), rel=1e-12)
