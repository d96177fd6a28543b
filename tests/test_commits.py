"""Bayesian change-point search over commits, against simulated pools with a planted change."""

from __future__ import annotations

import random

import numpy as np
import pytest

from orchestrator.evidence import TrialEvidence
from orchestrator.strategies.commits import CommitReplay, Commits, credible_range, posterior


def bisect_commits(n_commits: int, first_bad: int, rate_bad: float, rate_good: float = 0.0,
                   *, seed: int = 0, max_trials: int = 40) -> tuple[int, CommitReplay, list[str]]:
    commits = [f"c{i:03d}" for i in range(n_commits)]
    strategy = Commits(commits, sessions=80, max_trials=max_trials)
    rng = random.Random(seed)
    evidence: list[TrialEvidence] = []
    while proposals := strategy.propose(evidence, []):
        for levels in proposals:
            rate = rate_bad if commits.index(levels["commit"]) >= first_bad else rate_good
            corrupt = sum(rng.random() < rate for _ in range(80))
            evidence.append(TrialEvidence(levels, {"ok": 80 - corrupt, "leak": corrupt}))
    return len(evidence), strategy.replay(evidence), commits


@pytest.mark.parametrize(("n_commits", "first_bad", "rate_bad", "rate_good"), [
    (32, 17, 0.15, 0.0), (32, 5, 0.06, 0.0), (16, 15, 0.15, 0.0), (16, 1, 0.15, 0.0),
    (24, 11, 0.08, 0.01),
])
def test_the_first_bad_commit_is_found(n_commits: int, first_bad: int, rate_bad: float,
                                       rate_good: float) -> None:
    trials, replay, commits = bisect_commits(n_commits, first_bad, rate_bad, rate_good, seed=1)
    assert replay.status == "culprit"
    assert replay.culprit == commits[first_bad]
    assert max(replay.posterior) >= 0.95
    assert trials < n_commits  # fewer trials than testing every commit once


def test_endpoints_are_verified_first_and_a_clean_range_is_not_reproduced() -> None:
    trials, replay, _ = bisect_commits(16, 8, rate_bad=0.0)
    assert replay.status == "not_reproduced" and replay.culprit is None
    assert trials <= 12


def test_a_spent_budget_reports_a_credible_range() -> None:
    _, replay, commits = bisect_commits(40, 20, rate_bad=0.03, max_trials=8, seed=2)
    assert replay.status == "inconclusive" and "credible range" in replay.reason
    assert replay.credible[0] in commits and replay.credible[-1] in commits


def test_posterior_concentrates_on_the_change() -> None:
    k = [0, 0, 0, 12, 12]
    n = [80] * 5
    post = posterior(k, n)
    assert post[0] == 0 and int(np.argmax(post)) == 3 and post.sum() == pytest.approx(1)
    assert credible_range(post) == (3, 3)
    flat = posterior([0, 0, 0, 0, 12], [80, 0, 0, 0, 80])
    low, high = credible_range(flat)
    assert (low, high) == (1, 4)


def test_a_range_needs_two_commits() -> None:
    with pytest.raises(ValueError, match="good and a bad"):
        Commits(["only"], sessions=80)
