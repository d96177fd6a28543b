"""Sessions clustered by trial: how much a trial's sessions count once trials differ.

Sessions of one trial share a server, a warm-up and a cache state. On a real fleet a restart
lands in a better or a worse state, so each trial has a failure rate of its own around the
variant's: its sessions are not independent draws, and pooled session counts overstate what is
known. The model here is the one the twins and the simulated pools draw from (a restart
multiplies every rate): a trial's rate is the variant's ``p`` times a multiplier of mean 1 and
variance ``tau2``. Within a trial of ``n`` sessions the sessions then correlate with

    rho(p) = min(1, tau2 * p / (1 - p)),   design effect  d = 1 + (n - 1) * rho(p),

so ``n`` sessions carry the information of ``n / d`` independent ones (Kish's design effect; a
beta-binomial whose intra-trial correlation grows with the rate, as a multiplier's does: a clean
variant stays clean on every restart, and its zeros are worth as much as ever).

``tau2`` is estimated from the spread between trials of the same variant, pooled over variants
(a method of moments on Pearson's statistic, as a quasi-binomial model estimates its
dispersion): only repeated trials of one variant show it, and only variants that fail at all.
Every test then runs on each side's effective counts, ``k / d`` of ``n / d`` (Rao and Scott's
adjustment, 1992, each side with its own design effect), and a bound or a test against a given
rate takes the design effect at that rate. With no spread between trials (``tau2`` = 0) the
counts are the sessions themselves, and every test is as before.

Pure: plain numbers in, plain numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Counts = tuple[int, int]  # (failing, judged) sessions


@dataclass(frozen=True)
class Dispersion:
    """The spread of failure rates between trials of one variant: ``tau2``, the variance of a
    trial's rate multiplier, estimated on ``df`` degrees of freedom (0: no variant had two
    trials with failures, nothing could be seen)."""

    tau2: float = 0.0
    df: int = 0

    def correlation(self, rate: float) -> float:
        """The intra-trial correlation of sessions at ``rate``."""
        if self.tau2 <= 0.0 or rate <= 0.0:
            return 0.0
        if rate >= 1.0:
            return 1.0
        return min(1.0, self.tau2 * rate / (1.0 - rate))

    def design_effect(self, rate: float, size: float) -> float:
        """How many sessions of a trial of ``size`` count as one independent session, at
        ``rate``: 1 without spread, ``size`` (a trial is one observation) at most."""
        return 1.0 + max(0.0, size - 1.0) * self.correlation(rate)

    def effective(self, counts: Counts, trials: int, rate: float | None = None) -> Counts:
        """``counts`` gathered over ``trials`` trials as independent sessions: each divided by
        the design effect at ``rate`` (the counts' own rate unless told: a test of a given
        rate takes the design effect that rate would have), rounded."""
        k, n = counts
        if n <= 0 or trials <= 0 or self.tau2 <= 0.0:
            return counts
        d = self.design_effect(k / n if rate is None else rate, n / trials)
        if d <= 1.0:
            return counts
        k_eff = int(k / d + 0.5)
        return k_eff, max(k_eff, int(n / d + 0.5), 1)

    def at_most(self, k: int, sizes: Sequence[int], rate: float) -> float:
        """P(at most ``k`` failures over trials of these ``sizes``) at a true rate of
        ``rate``, each trial's own rate spread around it: a beta-binomial per trial with the
        correlation at ``rate``, the trials' sums convolved. (A design effect matches the
        variance only; a run of clean trials is far less likely at a failing rate than the
        variance alone says, and a test of "no worse than this rate" is about that tail.)"""
        import numpy as np  # here, not at the top: `bisect show` reads without it
        from scipy.stats import betabinom, binom

        sizes = [n for n in sizes if n > 0]
        if not sizes or rate <= 0.0:
            return 1.0
        rate = min(rate, 1.0)
        rho = min(self.correlation(rate), MAX_CORRELATION)
        if rho <= 0.0 or rate >= 1.0:
            return float(binom.cdf(k, sum(sizes), rate))
        scale = 1.0 / rho - 1.0
        pmfs = {n: betabinom.pmf(np.arange(min(n, k) + 1), n, rate * scale, (1.0 - rate) * scale)
                for n in set(sizes)}  # once a size: trials mostly share theirs
        total = np.ones(1)
        for n in sizes:
            total = np.convolve(total, pmfs[n])[:k + 1]
        return float(min(1.0, total.sum()))

    def with_prior(self, prior: Dispersion) -> Dispersion:
        """The estimate, or more where it rests on few degrees of freedom: ``prior``'s spread
        weighed as its ``df`` against the estimate's own (a moderated variance, as Smyth's
        limma shrinks a gene's, 2004), never below what the trials showed. Two trials of one
        variant that happened to agree say little about the next restart: a PASS on one low
        restart would otherwise be taken as no luck at all."""
        df = self.df + prior.df
        if not df:
            return self
        moderated = (self.tau2 * self.df + prior.tau2 * prior.df) / df
        return Dispersion(max(self.tau2, moderated), self.df)

    def at_least(self, prior: Dispersion) -> Dispersion:
        """The estimate, never below ``prior``'s spread (a floor, where ``with_prior`` weighs
        the prior in by degrees of freedom): at low rates the trials show little of their
        spread whatever their number, so their degrees of freedom overstate what they show."""
        return Dispersion(max(self.tau2, prior.tau2), self.df)

    def to_json(self) -> dict[str, float | int]:
        return {"tau2": round(self.tau2, 6), "df": self.df}


INDEPENDENT = Dispersion()
# What a restart is assumed to do before the trials show it: a rate multiplier of sd 0.5 (a
# restart lands a third lower or a half higher at one sd), worth 4 degrees of freedom. It fades
# as trials of failing variants come in (a fifth of it after 16 df) and a wider spread seen
# replaces it (`Dispersion.with_prior`).
RESTART_PRIOR = Dispersion(0.25, 4)
# A trial's sessions are never taken as one session repeated: the beta-binomial needs some
# independence left (at 1 its shape parameters vanish).
MAX_CORRELATION = 0.999


def dispersion(variants: Iterable[Sequence[Counts]]) -> Dispersion:
    """The spread between trials, from each variant's trials' ``(failing, judged)`` (full
    trials only: a trial stopped at its failures has no rate). A variant counts where it has
    two trials or more and fails in some but not all sessions. Each such variant's Pearson
    statistic exceeds its degrees of freedom by about ``df * (n - 1) * rho`` on average; the
    excess, pooled, gives ``tau2`` (at least 0)."""
    excess = weight = 0.0
    df = 0
    for trials in variants:
        seen = [(k, n) for k, n in trials if n > 0]
        if len(seen) < 2:
            continue
        k_all, n_all = sum(k for k, _ in seen), sum(n for _, n in seen)
        p = k_all / n_all
        if not 0.0 < p < 1.0:
            continue
        pearson = sum((k - n * p) ** 2 / (n * p * (1.0 - p)) for k, n in seen)
        free = len(seen) - 1
        size = n_all / len(seen)
        excess += pearson - free
        weight += free * max(0.0, size - 1.0) * p / (1.0 - p)
        df += free
    if not df or weight <= 0.0:
        return Dispersion(0.0, df)
    return Dispersion(max(0.0, excess / weight), df)
