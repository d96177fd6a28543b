"""Bayesian change-point search over a commit range (git-bayesect, on session counts).

Commits are ordered oldest (known good) to newest (known bad). The hypothesis "commit j is the
first bad one" says every commit before j fails at one unknown rate and every commit from j on at
another; with Beta priors on both rates the likelihood of the stored counts has a closed form
(beta-binomial), so the posterior over j is exact. The next commit to test is the one whose trial
minimises the expected entropy of that posterior; the search stops when one commit holds
``confidence`` of the mass, and otherwise reports a credible range when the budget is spent.
Like the adaptive strategy it is a replay of the evidence: no state of its own. Sessions of one
trial share a server, so each commit's counts enter the posterior (and the reproduction test) at
their design effect (stats/clustered.py), the spread between trials pooled over the commits run
more than once: a commit whose failures all came from one bad restart weighs as one trial would.
The posterior takes each commit's design effect at known-bad's rate (or its own, where higher),
the spread never below the restart prior: a bad commit's trial whose restart landed low looks
clean, and at its own rate of 0 it would count as every session clean.

Commits that cannot be deployed (their build or checkout fails, their server never comes up) are
*skipped*, as ``git bisect skip`` does: they stay possible locations of the change, with their
share of the posterior, but no trial can be run there, so the next commit is chosen among the
deployable ones. No trial can tell a skipped commit from the deployable commit right after it,
so the search stops when such a run (a *block*) holds ``confidence`` of the mass; when the run
has skipped commits in it, the answer is the run itself: "the first bad commit could be any of".
An endpoint that cannot be deployed cannot be verified, and the search stops there.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, gammaln

from orchestrator.core.evidence import CORRUPTING, Failing, Levels, TrialEvidence, target_of
from orchestrator.core.stats.clustered import RESTART_PRIOR, Counts, dispersion
from orchestrator.core.stats.compare import Answer, StopWhenFailing, reproduced
from orchestrator.core.strategies.base import UNFINISHED, Conclusion, Status, Unresolvable
from orchestrator.core.strategies.both_failures import Replaying, both_reason
from orchestrator.core.strategies.commits_said import FACTOR, commit_words, conclude_commit_replay

# Weak priors that still say "clean is clean, broken is broken": rates near 0 before the change,
# anything after it (the data decides how much).
GOOD_PRIOR = (0.5, 20.0)
BAD_PRIOR = (1.0, 1.0)


@dataclass(frozen=True)
class CommitReplay:
    needed: tuple[dict[str, str], ...]
    finished: bool
    status: Status | None  # culprit, not_reproduced or inconclusive; None while trials run
    posterior: tuple[float, ...]  # P(commit i is the first bad one); index 0 is known good
    culprit: str | None
    credible: tuple[str, ...]  # the smallest run of commits holding 90% of the mass
    reason: str = ""
    # When the status is culprit: every commit that can be the first bad one, oldest first (one
    # commit, or skipped commits and the first bad deployable one), and their posterior mass.
    first_bad: tuple[str, ...] = ()
    mass: float = 0.0
    skipped: tuple[str, ...] = ()  # commits that cannot be deployed, oldest first
    unverifiable: str | None = None  # the endpoint that cannot be deployed, if one cannot
    last_good: str | None = None  # when the status is culprit: the commit right before them
    failing: Failing | None = None  # set when it searched another failure than the target's
    also: CommitReplay | None = None  # the other failure the bad commit shows, searched beside

    @property
    def concluded(self) -> Status | None:
        return self.status

    @property
    def asking(self) -> CommitReplay:
        """The search whose trials are needed now (the target's first)."""
        return self.also if self.also is not None and self.finished else self

    def named(self, failing: Failing) -> CommitReplay:
        # its trail is drawn at conclusion, named there (conclude_commit_replay(named=))
        return dataclasses.replace(self, failing=failing)

    def followed_by(self, other: CommitReplay) -> CommitReplay:
        return self  # its trail is drawn from its own posterior at conclusion


def _log_marginal(k: np.ndarray, n: np.ndarray, prior: tuple[float, float]) -> np.ndarray:
    a, b = prior
    return betaln(a + k, b + n - k) - betaln(a, b)


def _sides(ks: np.ndarray, ns: np.ndarray) -> tuple[np.ndarray, ...]:
    """Counts before commit j (commits < j) and from j on, for every j."""
    before_k = np.concatenate(([0.0], np.cumsum(ks)))[:-1]
    before_n = np.concatenate(([0.0], np.cumsum(ns)))[:-1]
    return before_k, before_n, ks.sum() - before_k, ns.sum() - before_n


def _normalised(log_like: np.ndarray) -> np.ndarray:
    """Each row's log likelihoods over j as a posterior (j = 0, known good, gets none)."""
    log_like[..., 0] = -np.inf
    weights = np.exp(log_like - log_like.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def posterior(k: Sequence[int], n: Sequence[int]) -> np.ndarray:
    """P(first bad commit = j) for j = 1..N-1 (index 0 always 0: it is known good)."""
    before_k, before_n, after_k, after_n = _sides(np.asarray(k, dtype=float),
                                                  np.asarray(n, dtype=float))
    return _normalised(_log_marginal(before_k, before_n, GOOD_PRIOR)
                       + _log_marginal(after_k, after_n, BAD_PRIOR))


def _entropy(p: np.ndarray) -> np.ndarray:
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=-1)


def expected_entropy(k: Sequence[int], n: Sequence[int], commit: int, sessions: int) -> float:
    """Expected posterior entropy after one more trial of ``sessions`` sessions at ``commit``."""
    return expected_entropies(k, n, [commit], sessions)[0]


def expected_entropies(k: Sequence[int], n: Sequence[int], commits: Iterable[int],
                       sessions: int) -> list[float]:
    """``expected_entropy`` of each commit, every outcome of a trial at once (the search scores
    every candidate at every step: 256 commits in a fraction of a second)."""
    ks, ns = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    before_k, before_n, after_k, after_n = _sides(ks, ns)
    good = _log_marginal(before_k, before_n, GOOD_PRIOR)
    bad = _log_marginal(after_k, after_n, BAD_PRIOR)
    cumulative = np.cumsum(_normalised(good + bad))
    sum_k, sum_n = np.cumsum(ks), np.cumsum(ns)
    outcomes = np.arange(sessions + 1, dtype=float)
    log_choose = (gammaln(sessions + 1) - gammaln(outcomes + 1)
                  - gammaln(sessions - outcomes + 1))
    # For hypothesis j, a trial at ``commit`` joins the counts from j on when j <= commit, those
    # before j otherwise; the other side's marginal is unchanged.
    hypothesis = np.arange(len(ks))
    scores = []
    for commit in commits:
        after = hypothesis <= commit
        prior_a = np.where(after, BAD_PRIOR[0], GOOD_PRIOR[0])
        prior_b = np.where(after, BAD_PRIOR[1], GOOD_PRIOR[1])
        side_k = np.where(after, after_k, before_k)
        side_n = np.where(after, after_n, before_n) + sessions
        unchanged = (np.where(after, good, bad) - betaln(prior_a, prior_b)
                     - gammaln(prior_a + prior_b + side_n))
        p_after = cumulative[commit]  # P(commit is already bad) = P(j <= commit)
        # Predictive rate at the commit under each side, from the pooled counts of that side.
        bad_k = sum_k[-1] - (sum_k[commit - 1] if commit else 0.0)
        bad_n = sum_n[-1] - (sum_n[commit - 1] if commit else 0.0)
        weight = np.zeros(sessions + 1)
        for prob_side, (a, b), (sk, sn) in (
            (p_after, BAD_PRIOR, (bad_k, bad_n)),
            (1 - p_after, GOOD_PRIOR, (sum_k[commit], sum_n[commit])),
        ):
            if prob_side <= 0:
                continue
            # Beta-binomial predictive of k corrupt sessions out of ``sessions``.
            pred = np.exp(log_choose + betaln(a + sk + outcomes, b + sn - sk + sessions - outcomes)
                          - betaln(a + sk, b + sn - sk))
            weight += np.where(pred > 1e-6, prob_side * pred, 0.0)
        seen = weight > 0
        outcome = outcomes[seen][:, None]
        # The changed side's beta-binomial marginal, its terms in ``outcome`` only.
        log_like = unchanged + gammaln(prior_a + side_k + outcome) + gammaln(
            prior_b + side_n - side_k - outcome)
        scores.append(float((weight[seen] * _entropy(_normalised(log_like))).sum()))
    return scores


def credible_range(post: np.ndarray, mass: float = 0.9) -> tuple[int, int]:
    """The shortest run of consecutive commits holding ``mass`` of the posterior."""
    best = (0, len(post) - 1)
    cumulative = np.concatenate(([0.0], np.cumsum(post)))
    for start in range(len(post)):
        end = int(np.searchsorted(cumulative, cumulative[start] + mass - 1e-12))
        if end <= len(post) and end - 1 - start < best[1] - best[0]:
            best = (start, max(start, end - 1))
    return best


def blocks(size: int, skipped: Collection[int]) -> list[tuple[int, int]]:
    """The runs no trial can split, over commits 1..size-1 (0 is known good): each deployable
    commit with the skipped commits right before it (``git bisect``'s "could be any of")."""
    runs, start = [], 1
    for index in range(1, size):
        if index not in skipped:
            runs.append((start, index))
            start = index + 1
    return runs


class Commits(Replaying[CommitReplay]):
    ENDS = ("the bad commit", "the good commit's")

    def __init__(self, commits: Sequence[str], *, sessions: int, alpha: float = 0.01,
                 confidence: float = 0.95, reproduce_trials: int = 2,
                 max_trials: int = 40, background: Mapping[str, str] | None = None,
                 skipped: Iterable[str] = (),
                 described: Mapping[str, tuple[str, str]] | None = None,
                 failing: Failing = CORRUPTING) -> None:
        if len(commits) < 2:
            raise ValueError("a commit range needs a good and a bad commit")
        self.commits = list(commits)
        self.sessions = sessions
        self.alpha, self.confidence = alpha, confidence
        self.reproduce_trials, self.max_trials = reproduce_trials, max_trials
        self.background = dict(background or {})  # every other factor, held at one level
        self.skipped = frozenset(skipped)  # commits that cannot be deployed
        self.described = dict(described or {})  # commit -> (subject, author), as git gave them
        self.failing = failing  # what the evidence it is given was judged against

    def judging(self, failing: Failing) -> Commits:
        return Commits(self.commits, sessions=self.sessions, alpha=self.alpha,
                       confidence=self.confidence, reproduce_trials=self.reproduce_trials,
                       max_trials=self.max_trials, background=self.background,
                       skipped=self.skipped, described=self.described, failing=failing)

    def skipping(self, commits: Iterable[str]) -> Commits:
        """The same search, told that these commits cannot be deployed."""
        other = copy.copy(self)
        other.skipped = frozenset(commits)
        return other

    def meeting(self, unresolvable: Sequence[Unresolvable]) -> Commits:
        """Commits that cannot be deployed stay possible change points; the search chooses
        among the others."""
        return self.skipping(u.levels[FACTOR] for u in unresolvable if FACTOR in u.levels)

    def conclude(self, done: Sequence[TrialEvidence],
                 unresolvable: Sequence[Unresolvable]) -> Conclusion:
        replay = self.replay(done)
        main = conclude_commit_replay(replay, self.commits, _judged(done, replay.failing),
                                      unresolvable, self.described)
        also = replay.also
        if also is None:
            return dataclasses.replace(main, failing=replay.failing)
        other = also.failing or CORRUPTING
        beside = dataclasses.replace(conclude_commit_replay(
            also, self.commits, _judged(done, other), unresolvable, self.described,
            named=target_of(other)), failing=other)
        log = (*main.log, *beside.log)
        if not also.finished:
            return dataclasses.replace(main, status=Status.INCONCLUSIVE, reason=UNFINISHED,
                                       log=log)
        return dataclasses.replace(main, reason=both_reason(main.status, main.reason, beside),
                                   log=log, also=beside, target_reason=main.reason)

    def variant(self, index: int) -> dict[str, str]:
        return {**self.background, FACTOR: self.commits[index]}

    def trials_at(self, evidence: Sequence[TrialEvidence], index: int) -> list[TrialEvidence]:
        """The trials of one commit of the range."""
        return [t for t in evidence if t.levels.get(FACTOR) == self.commits[index]]

    def bad_trials(self, evidence: Sequence[TrialEvidence]) -> list[TrialEvidence]:
        return self.trials_at(evidence, len(self.commits) - 1)

    def shows(self, seen: Sequence[TrialEvidence]) -> bool:
        bad, good = (self.trials_at(seen, end) for end in (len(self.commits) - 1, 0))
        return reproduced(_pair(bad), _pair(good), self.alpha)[0] is Answer.FAIL

    def stop_rule(
        self, levels: Levels, done: Sequence[TrialEvidence]
    ) -> StopWhenFailing | None:
        return None  # the posterior uses the full counts of every trial

    def replay_target(self, evidence: Sequence[TrialEvidence]) -> CommitReplay:
        """The search for the failure ``evidence`` was judged against."""
        index = {sha: i for i, sha in enumerate(self.commits)}
        per_trial: list[list[Counts]] = [[] for _ in self.commits]
        for trial in evidence:
            i = index.get(trial.levels.get(FACTOR, ""))
            if i is not None:
                per_trial[i].append((trial.failures, trial.judged))
        k = [sum(f for f, _ in seen) for seen in per_trial]
        n = [sum(j for _, j in seen) for seen in per_trial]
        trials = [len(seen) for seen in per_trial]
        # sessions of a trial share a server: each commit's counts at their design effect
        # (stats/clustered.py), the spread between trials pooled over the commits run twice
        # (bench/calibration.py: with restarts that halve or double the rate, and this spread
        # alone, 13.4% of the commits named at 0.95 or more were wrong: most commits of a
        # search run once, and the few run twice show little of the spread)
        spread = dispersion(per_trial)
        effective = [spread.effective((k[i], n[i]), trials[i]) for i in range(len(k))]
        # the posterior tells each commit from known-bad's failing rate: its sessions count at
        # the design effect of that rate (or its own, where higher), the spread at least the
        # restart prior. A clean-looking trial of a bad commit is what a restart that landed
        # low does, and at its own rate of 0 its sessions would count in full (as the
        # adaptive strategy's PASS allows for a low restart, and its FAIL does not need to)
        bad_rate = k[-1] / n[-1] if n[-1] else 0.0
        floored = spread.at_least(RESTART_PRIOR)
        told = [floored.effective((k[i], n[i]), trials[i], max(bad_rate, k[i] / n[i]))
                if n[i] else (0, 0) for i in range(len(k))]
        k_told, n_told = [e for e, _ in told], [m for _, m in told]
        post = posterior(k_told, n_told)
        low, high = credible_range(post)
        credible = tuple(self.commits[low:high + 1])
        skipped = {i for i, sha in enumerate(self.commits) if sha in self.skipped}
        skipped_shas = tuple(self.commits[i] for i in sorted(skipped))

        def result(needed: tuple[dict[str, str], ...], status: Status | None, reason: str = "",
                   first_bad: tuple[int, int] | None = None,
                   unverifiable: str | None = None) -> CommitReplay:
            named: tuple[str, ...] = ()
            mass, last_good = 0.0, None
            if first_bad is not None:
                named = tuple(self.commits[first_bad[0]:first_bad[1] + 1])
                mass = float(post[first_bad[0]:first_bad[1] + 1].sum())
                last_good = self.commits[first_bad[0] - 1]
            return CommitReplay(needed, status is not None, status, tuple(post.tolist()),
                                named[0] if len(named) == 1 else None, credible, reason,
                                named, mass, skipped_shas, unverifiable, last_good)

        def said(index: int) -> str:
            return commit_words(self.commits[index], self.described)

        first, last = 0, len(self.commits) - 1
        for end, name in ((last, "bad"), (first, "good")):
            if end in skipped:
                return result((), Status.INCONCLUSIVE,
                              f"the known-{name} commit {self.commits[end]} cannot be deployed, "
                              f"so it cannot be verified", unverifiable=self.commits[end])
        short = tuple(self.variant(i) for i in (last, first) if trials[i] < self.reproduce_trials)
        if short:
            return result(short, None)
        answer, _ = reproduced(effective[last], effective[first], self.alpha)
        if answer is not Answer.FAIL:
            if trials[last] >= 3 * self.reproduce_trials:
                return result((), Status.NOT_REPRODUCED,
                              f"the bad commit {said(last)} ({k[last]}/{n[last]}) is not worse "
                              f"than the good one {said(first)} ({k[first]}/{n[first]})")
            # the end with fewer trials first: one pool takes only the first proposal
            ends = (last, first) if trials[last] <= trials[first] else (first, last)
            return result(tuple(self.variant(i) for i in ends), None)
        runs = blocks(len(self.commits), skipped)
        masses = [float(post[start:end + 1].sum()) for start, end in runs]
        best = int(np.argmax(masses))
        if masses[best] >= self.confidence:
            start, end = runs[best]
            # The commits strategy's own words (git bisect's, where it has some), each commit
            # with its subject and author.
            last_good = f"; last good: {said(start - 1)}"
            if start == end:
                return result((), Status.CULPRIT, f"first bad commit: {said(end)}, posterior "
                              f"{masses[best]:.3f}{last_good}", runs[best])
            return result((), Status.CULPRIT,
                          "There are only 'skip'ped commits left to test. The first bad commit "
                          f"could be any of: {', '.join(said(i) for i in range(start, end + 1))}"
                          f", posterior {masses[best]:.3f}{last_good}", runs[best])
        if sum(trials) >= self.max_trials:
            return result((), Status.INCONCLUSIVE,
                          f"trial budget spent; 90% credible range {said(low)} .. {said(high)}")
        candidates = [i for i in range(1, last) if i not in skipped]
        scores = dict(zip(candidates, expected_entropies(k_told, n_told, candidates,
                                                         self.sessions), strict=True))
        return result((self.variant(min(scores, key=lambda i: (scores[i], i))),), None)


def _judged(evidence: Sequence[TrialEvidence], failing: Failing | None
            ) -> Sequence[TrialEvidence]:
    return evidence if failing is None else [t.judged_as(failing) for t in evidence]


def _pair(trials: Sequence[TrialEvidence]) -> tuple[int, int]:
    return sum(t.failures for t in trials), sum(t.judged for t in trials)
