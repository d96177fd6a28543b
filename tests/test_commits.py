"""Bayesian change-point search over commits, against simulated pools with a planted change."""

from __future__ import annotations

import random

import numpy as np
import pytest

from orchestrator.core.evidence import WEDGING, TrialEvidence
from orchestrator.core.strategies.base import Status
from orchestrator.core.strategies.commits import (
    CommitReplay,
    Commits,
    blocks,
    credible_range,
    posterior,
)

pytestmark = pytest.mark.pure


def bisect_commits(n_commits: int, first_bad: int, rate_bad: float, rate_good: float = 0.0,
                   *, seed: int = 0, max_trials: int = 40,
                   skipped: frozenset[int] = frozenset()) -> tuple[int, CommitReplay, list[str]]:
    commits = [f"c{i:03d}" for i in range(n_commits)]
    strategy = Commits(commits, sessions=80, max_trials=max_trials).skipping(
        commits[i] for i in skipped)
    rng = random.Random(seed)
    evidence: list[TrialEvidence] = []
    while proposals := strategy.propose(evidence, []):
        for levels in proposals:
            assert commits.index(levels["commit"]) not in skipped  # never a skipped commit
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


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(("first_bad", "skipped"), [
    (17, {3, 4, 9, 24, 25}), (17, {18, 19, 20}), (1, {2, 30}), (30, {19, 1}),
])
def test_skipped_commits_elsewhere_leave_the_culprit_exact(seed: int, first_bad: int,
                                                           skipped: set[int]) -> None:
    trials, replay, commits = bisect_commits(32, first_bad, 0.15, seed=seed,
                                             skipped=frozenset(skipped))
    assert replay.status == "culprit"
    assert replay.culprit == commits[first_bad] and replay.first_bad == (commits[first_bad],)
    assert replay.mass >= 0.95
    assert replay.skipped == tuple(commits[i] for i in sorted(skipped))
    assert trials < 32


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(("first_bad", "skipped", "expected"), [
    (17, {15, 16}, (15, 17)),  # the first bad commit is deployable, skipped ones before it
    (16, {15, 16}, (15, 17)),  # the first bad commit is itself skipped
    (15, {15, 16}, (15, 17)),
    (1, {1, 2, 3}, (1, 4)),  # right after the known-good commit
    (31, {30}, (30, 31)),  # right before the known-bad one
])
def test_a_first_bad_commit_next_to_skipped_ones_is_a_range(
        seed: int, first_bad: int, skipped: set[int], expected: tuple[int, int]) -> None:
    trials, replay, commits = bisect_commits(32, first_bad, 0.15, seed=seed,
                                             skipped=frozenset(skipped))
    assert replay.status == "culprit" and replay.culprit is None  # no single commit is named
    assert replay.first_bad == tuple(commits[expected[0]:expected[1] + 1])
    assert replay.mass >= 0.95
    assert replay.mass == pytest.approx(sum(replay.posterior[expected[0]:expected[1] + 1]))
    assert replay.reason.startswith("There are only 'skip'ped commits left to test. The first "
                                    "bad commit could be any of: " + ", ".join(replay.first_bad))
    assert trials < 32


def test_every_commit_between_the_endpoints_skipped_leaves_the_whole_range() -> None:
    commits = ["good", "s1", "s2", "bad"]
    strategy = Commits(commits, sessions=80, skipped=["s1", "s2"])
    evidence = [TrialEvidence({"commit": "good"}, {"ok": 80}),
                TrialEvidence({"commit": "bad"}, {"ok": 60, "leak": 20})] * 2
    replay = strategy.replay(evidence)
    assert replay.status == "culprit" and replay.first_bad == ("s1", "s2", "bad")
    assert replay.mass == pytest.approx(1.0)
    assert strategy.propose(evidence, []) == []


@pytest.mark.parametrize(("skipped", "name"), [("c015", "bad"), ("c000", "good")])
def test_an_endpoint_that_cannot_be_deployed_stops_the_search(skipped: str, name: str) -> None:
    commits = [f"c{i:03d}" for i in range(16)]
    strategy = Commits(commits, sessions=80).skipping([skipped])
    evidence = [TrialEvidence({"commit": "c000"}, {"ok": 80}),
                TrialEvidence({"commit": "c015"}, {"ok": 60, "leak": 20})]
    replay = strategy.replay([e for e in evidence if e.levels["commit"] != skipped])
    assert replay.finished and replay.status == "inconclusive" and replay.needed == ()
    assert replay.unverifiable == skipped
    assert f"known-{name} commit {skipped} cannot be deployed" in replay.reason
    assert "cannot be verified" in replay.reason


def test_blocks_end_at_each_deployable_commit() -> None:
    assert blocks(6, set()) == [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]
    assert blocks(6, {1, 3, 4}) == [(1, 2), (3, 5)]


def test_only_failures_of_the_commit_itself_skip_it() -> None:
    from datetime import UTC, datetime

    from db.records import TrialRecord
    from orchestrator.executor.trial import INFRA_ERROR
    from orchestrator.stored import MAX_FAILED_ATTEMPTS, skipping, unresolvable

    def failed(seq: int, commit: str, error: str) -> TrialRecord:
        failure = "infrastructure" if error.startswith(INFRA_ERROR) else "variant"
        return TrialRecord(seq, "c", 1, {"commit": commit}, seq, "p", "failed",
                           datetime.now(UTC), None, 0.0, 0.0, 0.0, 0, error, seq,
                           failure=failure)

    trials = [failed(1, "c001", "here: build `make` in /src exited 2: error"),
              failed(2, "c002", f"{INFRA_ERROR}here: connection lost while running sh"),
              failed(3, "c001", "here: build `make` in /src exited 2: error"),
              *(failed(4 + i, "c002", f"{INFRA_ERROR}here: sh timed out after 60s")
                for i in range(3))]
    [skipped] = unresolvable(trials)  # an SSH drop says nothing about c002: retried, not skipped
    assert skipped.levels == {"commit": "c001"} and skipped.attempts == MAX_FAILED_ATTEMPTS
    assert "exited 2" in skipped.error
    strategy = skipping(Commits([f"c{i:03d}" for i in range(4)], sessions=8), [skipped])
    assert isinstance(strategy, Commits) and strategy.skipped == {"c001"}


def test_the_verdict_names_commits_with_subject_and_author() -> None:
    commits = [f"c{i:03d}" for i in range(16)]
    described = {sha: (f"change {i}", "Jane Doe" if i % 2 else "John Roe")
                 for i, sha in enumerate(commits)}
    strategy = Commits(commits, sessions=80, described=described)
    rng = random.Random(3)
    evidence: list[TrialEvidence] = []
    while proposals := strategy.propose(evidence, []):
        for levels in proposals:
            corrupt = sum(rng.random() < (0.15 if commits.index(levels["commit"]) >= 9 else 0)
                          for _ in range(80))
            evidence.append(TrialEvidence(levels, {"ok": 80 - corrupt, "leak": corrupt}))
    conclusion = strategy.conclude(evidence, [])
    found = conclusion.finding_json("commits")
    assert conclusion.status == "culprit" and found is not None
    mass = found["posterior"]
    assert conclusion.reason == (f"first bad commit: c009 'change 9' (Jane Doe), posterior "
                                 f"{mass:.3f}; last good: c008 'change 8' (John Roe)")
    assert found["first_bad"] == ["c009"]
    assert found["last_good"] == "c008"
    assert found["described"]["c009"] == {"subject": "change 9", "author": "Jane Doe"}
    # The trail states the posterior mass beside each commit's words; no test was made.
    step = next(s.to_json() for s in conclusion.log
                if s.to_json()["levels"] == {"commit": "c009"})
    assert step["posterior"] == pytest.approx(mass) and step["subject"] == "change 9"
    assert step["p_fail"] is None and step["p_pass"] is None
    # Without descriptions (a campaign stored before them), SHAs alone.
    bare = Commits(commits, sessions=80).conclude(evidence, [])
    assert bare.reason == f"first bad commit: c009, posterior {mass:.3f}; last good: c008"
    said = bare.finding_json("commits")
    assert said is not None and said["described"] == {}


def test_one_pool_retries_both_endpoints_of_a_faint_change() -> None:
    """One pool runs only the first proposal: a retry of the reproduction alternates the
    endpoints instead of running the bad one alone until it gives up."""
    commits = [f"c{i:03d}" for i in range(16)]
    strategy = Commits(commits, sessions=80)
    evidence = [TrialEvidence({"commit": "c015"}, {"ok": 78, "leak": 2}),
                TrialEvidence({"commit": "c015"}, {"ok": 79, "leak": 1}),
                TrialEvidence({"commit": "c000"}, {"ok": 80}),
                TrialEvidence({"commit": "c000"}, {"ok": 80})]  # 3/160 against 0/160: not yet
    ran: list[str] = []
    while (proposals := strategy.propose(evidence, [])) and len(ran) < 8:
        ran.append(proposals[0]["commit"])
        corrupt = 1 if ran[-1] == "c015" else 0  # still faint: never significant
        evidence.append(TrialEvidence(proposals[0], {"ok": 80 - corrupt, "leak": corrupt}))
    assert ran == ["c015", "c000", "c015", "c000", "c015", "c000", "c015"]
    assert strategy.replay(evidence).status == "not_reproduced"


def _both(n_commits: int, leak_from: int | None, wedge_from: int | None, *, seed: int = 0,
          ) -> tuple[Commits, list[TrialEvidence], list[str]]:
    """A commit search on a range where one commit starts leaking (10%) and another starts
    hanging sessions (15%, timeouts): a default campaign watches both."""
    commits = [f"c{i:03d}" for i in range(n_commits)]
    strategy = Commits(commits, sessions=80, max_trials=60)
    rng = random.Random(seed)
    evidence: list[TrialEvidence] = []
    while proposals := strategy.propose(evidence, []):
        for levels in proposals:
            at = commits.index(levels["commit"])
            counts = {"ok": 0, "leak": 0, "timeout": 0}
            for _ in range(80):
                if wedge_from is not None and at >= wedge_from and rng.random() < 0.15:
                    counts["timeout"] += 1
                elif leak_from is not None and at >= leak_from and rng.random() < 0.10:
                    counts["leak"] += 1
                else:
                    counts["ok"] += 1
            evidence.append(TrialEvidence(levels, counts))
    return strategy, evidence, commits


def test_a_range_that_only_wedges_is_searched_for_its_wedging() -> None:
    # corruption, what it was asked, is not reproduced; the wedging's search is beside it, its
    # first bad commit a wedge culprit, never a corruption one (issue 27)
    strategy, evidence, commits = _both(16, leak_from=None, wedge_from=9, seed=3)
    replay = strategy.replay(evidence)
    assert replay.status == "not_reproduced" and replay.failing is None
    assert replay.reason.startswith("the bad commit c015")
    assert "0 corrupt" in replay.reason and "timeouts" in replay.reason
    assert replay.also is not None and replay.also.failing == WEDGING
    assert replay.also.culprit == commits[9]
    conclusion = strategy.conclude(evidence, [])
    assert conclusion.status == "not_reproduced" and conclusion.culprits == ()
    assert conclusion.reason.startswith(
        "corruption not reproduced; wedging follows the first bad commit: c009")
    assert conclusion.reason.endswith(f"({replay.reason})")
    assert conclusion.also is not None and conclusion.also.failing == WEDGING
    assert conclusion.also.culprits[0].factors == {"commit": commits[9]}


def test_a_range_that_leaks_and_wedges_names_a_commit_for_each() -> None:
    strategy, evidence, commits = _both(16, leak_from=5, wedge_from=11, seed=4)
    replay = strategy.replay(evidence)
    assert replay.culprit == commits[5] and replay.also is not None
    assert replay.also.failing == WEDGING and replay.also.culprit == commits[11]
    conclusion = strategy.conclude(evidence, [])
    assert conclusion.culprits[0].factors == {"commit": commits[5]}
    assert conclusion.also is not None and conclusion.also.culprits[0].factors == {
        "commit": commits[11]}
    assert "; wedging: first bad commit: c011" in conclusion.reason
    assert any(step.phase == "wedging: posterior" for step in conclusion.log)


def test_a_clean_range_says_what_the_bad_commit_showed() -> None:
    strategy, evidence, _ = _both(8, leak_from=None, wedge_from=None)
    replay = strategy.replay(evidence)
    assert replay.status == "not_reproduced" and replay.also is None
    assert "the bad commit: 0 corrupt, 0 timeouts, 0 errors" in replay.reason


def test_a_commit_s_failures_from_one_bad_restart_weigh_as_one_trial() -> None:
    # issue 27, item 2: sessions of a trial share a server. 24 leaks of 160 at the bad end
    # reproduce at once as independent sessions; all 24 in one trial of two (the other
    # clean) is a restart that landed badly, until more trials agree
    commits = [f"c{i}" for i in range(8)]
    strategy = Commits(commits, sessions=80)

    def trials(commit: str, *leaks: int) -> list[TrialEvidence]:
        return [TrialEvidence({"commit": commit}, {"ok": 80 - k, "leak": k}) for k in leaks]

    good = trials("c0", 0, 0)
    one_bad_restart = good + trials("c7", 0, 24)
    replay = strategy.replay_target(one_bad_restart)
    assert replay.status is None and {"commit": "c7"} in replay.needed  # not reproduced yet
    spread_evenly = good + trials("c7", 12, 12)
    replay = strategy.replay_target(spread_evenly)
    assert replay.needed and replay.needed[0]["commit"] not in ("c0", "c7")  # bisecting


def test_a_clean_looking_trial_of_a_commit_counts_as_a_restart_of_a_bad_one_may() -> None:
    # issue 27: with restarts that halve or double the rate, a bad commit at 10% shows 0 of 80
    # now and then; taken as 80 independent clean sessions, one such trial names the commit
    # after it at once. Told from known-bad's rate, at that rate's design effect, one trial
    # leaves 10% of the mass where it was, and a second clean trial settles it.
    commits = [f"c{i}" for i in range(8)]
    strategy = Commits(commits, sessions=80)

    def trials(commit: str, *leaks: int) -> list[TrialEvidence]:
        return [TrialEvidence({"commit": commit}, {"ok": 80 - k, "leak": k}) for k in leaks]

    seen = trials("c0", 0, 0) + trials("c7", 8, 8) + trials("c3", 8) + trials("c1", 0)
    as_sessions = posterior([0, 0, 0, 8, 0, 0, 0, 16], [160, 80, 80, 80, 0, 0, 0, 160])
    assert as_sessions[3] >= 0.95  # what independent sessions would say after one clean c2
    once = strategy.replay_target(seen + trials("c2", 0))
    assert once.status is None and once.needed == ({"commit": "c2"},)
    assert 0.85 < once.posterior[3] < 0.95
    twice = strategy.replay_target(seen + trials("c2", 0, 0))
    assert twice.status is Status.CULPRIT and twice.posterior[3] >= 0.95
