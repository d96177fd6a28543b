"""Bayesian change-point search over a commit range (git-bayesect, on session counts).

Commits are ordered oldest (known good) to newest (known bad). The hypothesis "commit j is the
first bad one" says every commit before j fails at one unknown rate and every commit from j on at
another; with Beta priors on both rates the likelihood of the stored counts has a closed form
(beta-binomial), so the posterior over j is exact. The next commit to test is the one whose trial
minimises the expected entropy of that posterior; the search stops when one commit holds
``confidence`` of the mass, and otherwise reports a credible range when the budget is spent.
Like the adaptive strategy it is a replay of the evidence: no state of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, gammaln

from orchestrator.evidence import Levels, TrialEvidence
from orchestrator.stats.compare import Answer, StopWhenFailing, reproduced
from orchestrator.strategies.base import not_yet_running

FACTOR = "commit"
# Weak priors that still say "clean is clean, broken is broken": rates near 0 before the change,
# anything after it (the data decides how much).
GOOD_PRIOR = (0.5, 20.0)
BAD_PRIOR = (1.0, 1.0)


@dataclass(frozen=True)
class CommitReplay:
    needed: tuple[dict[str, str], ...]
    finished: bool
    status: str | None  # culprit | not_reproduced | inconclusive
    posterior: tuple[float, ...]  # P(commit i is the first bad one); index 0 is known good
    culprit: str | None
    credible: tuple[str, ...]  # the smallest run of commits holding 90% of the mass
    reason: str = ""


def _log_marginal(k: np.ndarray, n: np.ndarray, prior: tuple[float, float]) -> np.ndarray:
    a, b = prior
    return betaln(a + k, b + n - k) - betaln(a, b)


def posterior(k: Sequence[int], n: Sequence[int]) -> np.ndarray:
    """P(first bad commit = j) for j = 1..N-1 (index 0 always 0: it is known good)."""
    ks, ns = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    before_k = np.concatenate(([0.0], np.cumsum(ks)))[:-1]  # sums over commits < j
    before_n = np.concatenate(([0.0], np.cumsum(ns)))[:-1]
    after_k, after_n = ks.sum() - before_k, ns.sum() - before_n
    log_like = _log_marginal(before_k, before_n, GOOD_PRIOR) + _log_marginal(after_k, after_n,
                                                                              BAD_PRIOR)
    log_like[0] = -np.inf
    weights = np.exp(log_like - log_like.max())
    return weights / weights.sum()


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def expected_entropy(k: Sequence[int], n: Sequence[int], commit: int, sessions: int) -> float:
    """Expected posterior entropy after one more trial of ``sessions`` sessions at ``commit``."""
    post = posterior(k, n)
    p_after = post[: commit + 1].sum()  # P(commit is already bad) = P(j <= commit)
    ks, ns = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    # Predictive rate at the commit under each side, from the pooled counts of that side.
    bad_k, bad_n = ks[commit:].sum(), ns[commit:].sum()
    good_k, good_n = ks[: commit + 1].sum(), ns[: commit + 1].sum()
    outcomes = np.arange(sessions + 1)
    total = 0.0
    for prob_side, (a, b), (sk, sn) in (
        (p_after, BAD_PRIOR, (bad_k, bad_n)),
        (1 - p_after, GOOD_PRIOR, (good_k, good_n)),
    ):
        if prob_side <= 0:
            continue
        # Beta-binomial predictive of k corrupt sessions out of ``sessions``.
        log_pred = (gammaln(sessions + 1) - gammaln(outcomes + 1) - gammaln(sessions - outcomes + 1)
                    + betaln(a + sk + outcomes, b + sn - sk + sessions - outcomes)
                    - betaln(a + sk, b + sn - sk))
        pred = np.exp(log_pred)
        for outcome in np.flatnonzero(pred > 1e-6):
            k2 = list(k)
            n2 = list(n)
            k2[commit] += int(outcome)
            n2[commit] += sessions
            total += prob_side * pred[outcome] * _entropy(posterior(k2, n2))
    return total


def credible_range(post: np.ndarray, mass: float = 0.9) -> tuple[int, int]:
    """The shortest run of consecutive commits holding ``mass`` of the posterior."""
    best = (0, len(post) - 1)
    cumulative = np.concatenate(([0.0], np.cumsum(post)))
    for start in range(len(post)):
        end = int(np.searchsorted(cumulative, cumulative[start] + mass - 1e-12))
        if end <= len(post) and end - 1 - start < best[1] - best[0]:
            best = (start, max(start, end - 1))
    return best


class Commits:
    def __init__(self, commits: Sequence[str], *, sessions: int, alpha: float = 0.01,
                 confidence: float = 0.95, reproduce_trials: int = 2,
                 max_trials: int = 40, background: Mapping[str, str] | None = None) -> None:
        if len(commits) < 2:
            raise ValueError("a commit range needs a good and a bad commit")
        self.commits = list(commits)
        self.sessions = sessions
        self.alpha, self.confidence = alpha, confidence
        self.reproduce_trials, self.max_trials = reproduce_trials, max_trials
        self.background = dict(background or {})  # every other factor, held at one level

    def variant(self, index: int) -> dict[str, str]:
        return {**self.background, FACTOR: self.commits[index]}

    def propose(self, done: Sequence[TrialEvidence], pending: Sequence[Levels]) -> list[
            dict[str, str]]:
        return not_yet_running(self.replay(done).needed, pending)

    def stop_rule(
        self, levels: Levels, done: Sequence[TrialEvidence]
    ) -> StopWhenFailing | None:
        return None  # the posterior uses the full counts of every trial

    def replay(self, evidence: Sequence[TrialEvidence]) -> CommitReplay:
        index = {sha: i for i, sha in enumerate(self.commits)}
        k = [0] * len(self.commits)
        n = [0] * len(self.commits)
        trials = [0] * len(self.commits)
        for trial in evidence:
            i = index.get(trial.levels.get(FACTOR, ""))
            if i is not None:
                k[i] += trial.corrupted
                n[i] += trial.judged
                trials[i] += 1
        post = posterior(k, n)
        low, high = credible_range(post)
        credible = tuple(self.commits[low:high + 1])

        def result(needed: tuple[dict[str, str], ...], status: str | None, reason: str = "",
                   culprit: str | None = None) -> CommitReplay:
            return CommitReplay(needed, status is not None, status, tuple(post.tolist()), culprit,
                                credible, reason)

        first, last = 0, len(self.commits) - 1
        short = tuple(self.variant(i) for i in (last, first) if trials[i] < self.reproduce_trials)
        if short:
            return result(short, None)
        answer, _ = reproduced((k[last], n[last]), (k[first], n[first]), self.alpha)
        if answer is not Answer.FAIL:
            if trials[last] >= 3 * self.reproduce_trials:
                return result((), "not_reproduced",
                              f"the bad commit ({k[last]}/{n[last]}) is not worse than the good "
                              f"one ({k[first]}/{n[first]})")
            return result((self.variant(last), self.variant(first)), None)
        best = int(np.argmax(post))
        if post[best] >= self.confidence:
            return result((), "culprit",
                          f"{self.commits[best]} is the first bad commit "
                          f"(posterior {post[best]:.3f})", self.commits[best])
        if sum(trials) >= self.max_trials:
            return result((), "inconclusive",
                          f"trial budget spent; 90% credible range {credible[0]}..{credible[-1]}")
        candidates = range(1, last)
        if not candidates:
            return result((), "culprit", f"{self.commits[last]} is the only candidate",
                          self.commits[last])
        scores = {i: expected_entropy(k, n, i, self.sessions) for i in candidates}
        return result((self.variant(min(scores, key=lambda i: (scores[i], i))),), None)
