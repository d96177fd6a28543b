"""Claims that a variant is quiet (issue 27): "no other culprit is left", "the set does not fail
alone" end or redirect the adaptive search on a test that does not fail. Such a claim rules out
the campaign's smallest failure (its clean rate above known-good's), trial by trial, however high
known-bad measured; a test that leans either way runs on to its looks at 12 and 24 trials, and
past the budget a trial runs in full until the look it counts at.

The cases are seeds of the strategy benchmark's "two culprits at 5%: f0, and f2 x f3" under
noise between trials (BENCHMARKS.md, "Two culprits"), their trials as the benchmark ran them."""

from __future__ import annotations

import pytest

from orchestrator.core.evidence import TrialEvidence, variant_key
from orchestrator.core.stats.compare import Answer, judge
from orchestrator.core.stats.exact import binomial_at_most
from orchestrator.core.strategies import sequential
from orchestrator.core.strategies.adaptive import Adaptive
from orchestrator.core.strategies.confirm import confirm
from orchestrator.core.strategies.sequential import NeedTrials, cells_of
from tests.support.four_factors import traced, trial

pytestmark = pytest.mark.pure

FIVE = {f"f{i}": ["a", "b"] for i in range(5)}
GOOD5, BAD5 = dict.fromkeys(FIVE, "a"), dict.fromkeys(FIVE, "b")
F0_BROKEN = {**BAD5, "f0": "a"}  # known-bad without f0: f2 AND f3 still fail there, at 5%
F0_ALONE = {**GOOD5, "f0": "b"}

# Seed 123: known-bad's two restarts landed high (26 of 160, where both culprits give 9.75%).
# f0's flip ran clean twice (0 of 160), the other flips looked failing, f0 alone failed.
SEED_123 = traced("""
    bbbbb:16 bbbbb:10 aaaaa:0 aaaaa:0 abbbb:0 babbb:1/1s bbabb:1/1s bbbab:1/1s bbbba:1/1s
    baaaa:2 baaaa:5/5s abbbb:0""")


def test_no_other_culprit_is_claimed_on_two_clean_trials() -> None:
    # Known-bad without f0 passed at 0 of 160 against half of known-bad's 16%: two restarts
    # rule out 8%, not the 5% that f2 AND f3 fail at. f0 was named alone.
    replay = Adaptive(FIVE, GOOD5, BAD5).replay(SEED_123)
    assert replay.outcome is None
    assert [variant_key(v) for v in replay.needed] == [variant_key(F0_BROKEN)]
    # the claim rests on the variant's own trials: two more clean ones rule out 2% (0.26 a
    # trial there), and f0 is then the only culprit
    quiet = Adaptive(FIVE, GOOD5, BAD5).replay([*SEED_123, *traced("abbbb:0 abbbb:0")])
    assert quiet.culprits == ({"f0": "b"},)
    assert [(s.phase, s.answer) for s in quiet.trail][-1] == ("more culprits?", "pass")


def test_a_pass_that_says_quiet_rules_out_the_smallest_failure_not_half_of_known_bad() -> None:
    good, bad, clean = (0, 160), (26, 160), (0, 160)
    assert judge(clean, good, bad, 0.01, 0.005).answer is Answer.PASS  # rules out 8.1%
    quiet = judge(clean, good, bad, 0.01, 0.005, smallest=0.02)
    assert quiet.answer is Answer.UNKNOWN and quiet.p_pass == pytest.approx(0.98 ** 160)
    # under background noise the smallest failure stands on known-good's rate: 6 of 480
    # against 4 of 480 + 2%, where half of known-bad's excess would be 3.75%
    background = judge((6, 480), (4, 480), (40, 480), 0.01, 0.005, smallest=0.02)
    assert background.p_pass == pytest.approx(binomial_at_most(6, 480, 4 / 480 + 0.02))
    assert background.answer is Answer.UNKNOWN
    assert judge((6, 480), (4, 480), (40, 480), 0.01, 0.005).answer is Answer.PASS


# Seed 158: f0 alone (5%) ran its 12 trials low, many of them stopped at their first failing
# session while delta debugging narrowed on it: 11 of 565, p of failing 0.016 against
# known-good's 0 of 480, short of alpha. Taken as not failing alone, it was completed with f1
# (innocent), whose neighbour is f0 alone again, and the campaign ended inconclusive.
SEED_158 = traced("""
    bbbbb:17 bbbbb:7 aaaaa:0 aaaaa:0 abbbb:1/1s babbb:1/1s bbabb:1/1s bbbab:1/1s bbbba:1/1s
    bbbaa:1 bbbaa:1 bbbaa:1 aaaaa:0 bbbbb:2 bbbaa:4/4s bbaaa:4 bbaaa:1/1s baaaa:0 baaaa:1
    baaaa:1 bbaaa:1/1s baaaa:1 bbbbb:5 baaaa:2 aaaaa:0 aaaaa:0 bbbbb:3 baaaa:1/1s aaaaa:0
    bbbbb:1 baaaa:1 baaaa:1/1s baaaa:1/1s baaaa:1/1s baaaa:0 baaaa:1/1s""")


def test_a_set_that_leans_failing_alone_runs_on_before_it_is_completed() -> None:
    replay = Adaptive(FIVE, GOOD5, BAD5).replay(SEED_158)
    alone = [s for s in replay.trail if s.phase == "confirm: culprit alone"]
    assert alone == []  # no answer at 12: it runs on to its look at 24
    assert [variant_key(v) for v in replay.needed] == [variant_key(F0_ALONE)]
    # past the budget it answers at the look at 24, at half of alpha (shared with the look at
    # 12): its trials stop only where that is certain, not at alpha (stopped at their first
    # failing session, as most of its 12 were by delta debugging's narrowing level, they
    # count 1 failure in 80, and the look would need ever more of them)
    assert replay.stop_at == {variant_key(F0_ALONE): 0.005}


# A set's neighbour that passes keeps its level in the named set: with several culprits in play,
# "without f1, it does not fail" is a claim of quiet too. Seed 182, once the sufficiency test was
# strict, named {f0, f1, f3}: two neighbours holding f0 (5%) each passed on two clean trials, 0
# of 160, against half of known-bad's 39 of 240 (8.1%). Here known-bad read 16%, the set alone
# fails as much, and each neighbour ran two clean trials.
F013 = {"f0": "b", "f1": "b", "f3": "b"}
NEIGHBOURS = [{**GOOD5, **F013, factor: "a"} for factor in F013]


def _set_with_clean_neighbours(neighbour_trials: int) -> list[TrialEvidence]:
    return [*(trial(BAD5, 13) for _ in range(3)), *(trial(GOOD5, 0) for _ in range(6)),
            *(trial({**GOOD5, **F013}, 13) for _ in range(3)),
            *(trial(n, 0) for n in NEIGHBOURS for _ in range(neighbour_trials))]


def _neighbours_said(several: bool, neighbour_trials: int) -> list[str]:
    strategy = Adaptive(FIVE, GOOD5, BAD5)
    evidence = _set_with_clean_neighbours(neighbour_trials)
    run = sequential.Tests(strategy, cells_of(evidence), len(evidence))
    assert confirm(strategy, run, F013, BAD5, several=several) == F013
    return [s.answer for s in run.trail if s.phase.startswith("confirm: without")]


def test_with_several_culprits_a_neighbour_keeps_its_level_only_ruling_out_the_clean_rate(
        ) -> None:
    strategy = Adaptive(FIVE, GOOD5, BAD5)
    evidence = _set_with_clean_neighbours(2)
    run = sequential.Tests(strategy, cells_of(evidence), len(evidence))
    with pytest.raises(NeedTrials) as need:
        confirm(strategy, run, F013, BAD5, several=True)
    assert [variant_key(v) for v in need.value.variants] == [variant_key(NEIGHBOURS[0])]
    # 2 clean trials rule out 8%, not 2% (0.26 a trial under the restart prior); four do
    assert _neighbours_said(True, 4) == ["pass"] * 3
    # With one culprit, all a neighbour can hold is that culprit, failing as known-bad does:
    # half of known-bad's rate is what its PASS rules out, and two clean trials do
    assert _neighbours_said(False, 2) == ["pass"] * 3


def test_a_quiet_pass_against_the_culprit_alone_rules_out_the_clean_rate_too() -> None:
    # Against the culprit alone (several culprits, the set failing at less than half of
    # known-bad's rate) a neighbour's PASS ruled out no weaker failure: it fails as the set
    # does or not at all. A quiet one must rule out 2% all the same.
    strategy = Adaptive(FIVE, GOOD5, BAD5)
    evidence = [*(trial(BAD5, 40) for _ in range(3)), *(trial(GOOD5, 0) for _ in range(6)),
                *(trial({**GOOD5, **F013}, 10) for _ in range(6)),
                *(trial(NEIGHBOURS[0], 0) for _ in range(2))]
    run = sequential.Tests(strategy, cells_of(evidence), len(evidence))
    assert run.test(NEIGHBOURS[0], "x", against={**GOOD5, **F013}) is Answer.PASS
    with pytest.raises(NeedTrials) as need:
        run.test(NEIGHBOURS[0], "x", against={**GOOD5, **F013}, quiet=True)
    assert [variant_key(v) for v in need.value.variants] == [variant_key(NEIGHBOURS[0])]


def test_a_quiet_test_held_back_by_its_references_few_trials_measures_the_reference() -> None:
    # The set alone had one full trial (its others stopped at their failures): against it, a
    # neighbour's 6 clean trials are no PASS, and its 7th would add nothing; the reference's
    # second full trial does (seed 55: 24 clean trials of each neighbour, p = 0.0012).
    strategy = Adaptive(FIVE, GOOD5, BAD5)
    alone = {**GOOD5, **F013}
    # known-bad's restarts spread (10, 40 and 70 of 80): the set's one full trial, 5 of 80,
    # counts as 1 of 20 independent sessions
    evidence = [trial(BAD5, 10), trial(BAD5, 40), trial(BAD5, 70),
                *(trial(GOOD5, 0) for _ in range(6)), trial(alone, 5),
                TrialEvidence(alone, {"leak": 2}, stopped_early=True, planned=80),
                *(trial(NEIGHBOURS[0], 0) for _ in range(6))]
    run = sequential.Tests(strategy, cells_of(evidence), len(evidence))
    with pytest.raises(NeedTrials) as need:
        run.test(NEIGHBOURS[0], "x", against=alone, quiet=True)
    assert [variant_key(v) for v in need.value.variants] == [variant_key(alone)]


# Seed 182's path, once the sufficiency test was strict: the scan found f3 alone needed, known-good
# with f3 did not fail, every other flip of known-bad still failed, and delta debugging completed
# f3 with f0 and f1: {f0, f1, f3}, a set whose completing levels no single flip cured (f0 is a
# culprit of its own, f3 half of another). Another culprit holds them, and the set's neighbours
# claim quiet: without f0 (f1 AND f3) it must rule out 2%, not half of known-bad's 16%.
SEED_182_COMPLETED = traced("""
    bbbbb:13 bbbbb:13 bbbbb:13 aaaaa:0 aaaaa:0 aaaaa:0 aaaaa:0 aaaaa:0 aaaaa:0
    abbbb:1/1s babbb:1/1s bbabb:1/1s bbbba:1/1s bbbab:0 bbbab:0 bbbab:0 bbbab:0
    aaaba:0 aaaba:0 aaaba:0 aaaba:0 aaaba:0 aaaba:0
    abbbb:8 abbbb:8 babbb:8 babbb:8 bbabb:8 bbabb:8 bbbba:8 bbbba:8
    bbaba:8 bbaba:8 baaba:0 baaba:0 ababa:0 ababa:0""")


def test_a_set_completed_by_delta_debugging_has_neighbours_that_claim_quiet() -> None:
    replay = Adaptive(FIVE, GOOD5, BAD5).replay(SEED_182_COMPLETED)
    assert [(s.phase, s.answer) for s in replay.trail][-1] == ("confirm: culprit alone", "fail")
    assert [variant_key(v) for v in replay.needed] == [variant_key({**GOOD5, "f1": "b",
                                                                    "f3": "b"})]
