"""Exact tests on session counts, and a check that an effect holds trial by trial.

scipy.stats is imported by each function when called, not here: it takes 0.7 s, and every pool
actor imports this module (for its trials' stop rules) though many never stop a trial early."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache


@lru_cache(maxsize=8192)
def fisher_greater(k1: int, n1: int, k2: int, n2: int) -> float:
    """One-sided Fisher exact p-value that group 1's rate exceeds group 2's.

    Kept for the same counts: a trial's stop rule asks after every session with counts that
    mostly did not move, and a search judges the same variants step after step (SciPy's
    ``fisher_exact`` costs some 100 us a call)."""
    from scipy.stats import fisher_exact

    if n1 <= 0 or n2 <= 0:
        return 1.0
    table = [[k1, n1 - k1], [k2, n2 - k2]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def binomial_at_most(k: int, n: int, rate: float) -> float:
    """P(at most ``k`` of ``n`` fail) at ``rate``: how likely so few failures are if the true
    rate were that high (one-sided exact binomial)."""
    from scipy.stats import binom

    if n <= 0 or rate <= 0.0:
        return 1.0
    return float(binom.cdf(k, n, min(rate, 1.0)))


def trials_greater(rates_in: Sequence[float], rates_out: Sequence[float]) -> float:
    """One-sided Mann-Whitney p-value that per-trial rates inside exceed those outside.

    Sessions of one trial share a server and are correlated; pooled counts alone can let one
    bad trial masquerade as an effect. This asks whether the trials, as units, differ.
    """
    from scipy.stats import mannwhitneyu

    if not rates_in or not rates_out:
        return 1.0
    if len(set(rates_in) | set(rates_out)) == 1:
        return 1.0
    return float(mannwhitneyu(rates_in, rates_out, alternative="greater").pvalue)
