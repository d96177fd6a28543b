"""Confirmation's neighbours implied by the scan (issue 27): under monotone failures (a level of
known-bad's added never cures a failure), known-good with one level of the set put back holds
only some of the bad levels of the scan's flip of that factor. Where that flip passed against
known-bad with p at a tenth of the level the neighbour's own PASS would need, the neighbour
passes with no trial of its own; a flip that passed short of that or only looked passing, or a
neighbour whose PASS is a claim of quiet, still runs."""

from __future__ import annotations

import pytest

from orchestrator.core.evidence import TrialEvidence, variant_key
from orchestrator.core.strategies.adaptive import Adaptive
from orchestrator.core.strategies.confirm import confirm
from orchestrator.core.strategies.sequential import NeedTrials, cells_of
from orchestrator.core.strategies.sequential import Tests as Replayed  # not a test class
from tests.support.four_factors import BAD, FACTORS, GOOD, flip, trial, with_

pytestmark = pytest.mark.pure

# f1 AND f3 fail at 20%: the flips of f0 and f2 still fail, those of f1 and f3 ran clean three
# times each (a PASS at the scan's level, against known-bad's 32 of 160), and known-good with
# the pair alone fails.
SCANNED = [
    trial(BAD, 16), trial(BAD, 16), trial(GOOD, 0), trial(GOOD, 0),
    trial(flip("f0"), 16), trial(flip("f2"), 16),
    *[trial(flip("f1"), 0) for _ in range(3)],
    *[trial(flip("f3"), 0) for _ in range(3)],
    trial(with_("f1", "f3"), 16),
]
PAIR = {"f1": "b", "f3": "b"}


def _confirmed(evidence: list[TrialEvidence]) -> list[tuple[str, str, str]]:
    trail = Adaptive(FACTORS, GOOD, BAD).replay(evidence).trail
    return [(s.phase, variant_key(s.levels), s.answer) for s in trail
            if s.phase.startswith("confirm")]


def test_a_neighbour_within_a_flip_the_scan_passed_runs_no_trial() -> None:
    replay = Adaptive(FACTORS, GOOD, BAD).replay(SCANNED)
    # neither neighbour is asked for: what runs next is "more culprits?" (known-bad with f1
    # broken, the scan's own flip)
    assert [variant_key(v) for v in replay.needed] == [variant_key(flip("f1"))]
    assert _confirmed(SCANNED) == [
        ("confirm: culprit alone", variant_key(with_("f1", "f3")), "fail"),
        ("confirm: without f1", variant_key(with_("f3")), "pass (implied)"),
        ("confirm: without f3", variant_key(with_("f1")), "pass (implied)")]
    implied = [s for s in replay.trail if s.answer == "pass (implied)"]
    assert [(s.trials, s.reason) for s in implied] == [
        (0, "implied by the scan's PASS of flip f1 (f0=b,f1=a,f2=b,f3=b)"),
        (0, "implied by the scan's PASS of flip f3 (f0=b,f1=b,f2=b,f3=a)")]


def test_a_flip_that_only_looked_passing_implies_no_neighbour() -> None:
    # the flip of f3 ran once, clean: "looks passing" (p = 0.05 where a PASS needs alpha/2),
    # which confirmation is there to prove. Known-good with f1 alone is within that flip only
    # (not within the flip of f1, which has f1 at known-good's level): it runs.
    looked = [t for t in SCANNED if variant_key(t.levels) != variant_key(flip("f3"))]
    looked.append(trial(flip("f3"), 0))
    replay = Adaptive(FACTORS, GOOD, BAD).replay(looked)
    assert [(s.phase, s.answer) for s in replay.trail if s.phase == "flip f3"] == [
        ("flip f3", "looks passing")]
    assert [variant_key(v) for v in replay.needed] == [variant_key(with_("f1"))]
    assert _confirmed(looked)[1:] == [
        ("confirm: without f1", variant_key(with_("f3")), "pass (implied)")]


def test_a_neighbour_whose_pass_is_a_claim_of_quiet_still_runs() -> None:
    # A set completed by levels another culprit holds too: a neighbour may hold that other
    # culprit, and its PASS must rule out the clean rate, which the scan's PASS (half of
    # known-bad's rate) did not.
    for completed, needed in ((False, None), (True, with_("f3"))):
        strategy = Adaptive(FACTORS, GOOD, BAD)
        run = Replayed(strategy, cells_of(SCANNED), len(SCANNED))
        assert strategy._scan(run, BAD, list(FACTORS), look=False)[0] == PAIR
        if needed is None:
            assert confirm(strategy, run, PAIR, BAD, completed=completed) == PAIR
            continue
        with pytest.raises(NeedTrials) as need:
            confirm(strategy, run, PAIR, BAD, completed=completed)
        assert [variant_key(v) for v in need.value.variants] == [variant_key(needed)]
        assert not any(s.answer == "pass (implied)" for s in run.trail)


# Known-bad fails 10 of 80 a trial; the flip of f1 ran clean four times (p of passing 3e-05),
# the flip of f3 twice: a PASS at the scan's level (p = 0.00094 where 0.005 is needed), short
# of the tenth of it an implied neighbour needs.
THIN = [
    trial(BAD, 10), trial(BAD, 10), trial(GOOD, 0), trial(GOOD, 0),
    trial(flip("f0"), 10), trial(flip("f2"), 10),
    *[trial(flip("f1"), 0) for _ in range(4)],
    *[trial(flip("f3"), 0) for _ in range(2)],
    trial(with_("f1", "f3"), 10),
]


def test_a_pass_short_of_a_tenth_of_the_level_implies_no_neighbour() -> None:
    replay = Adaptive(FACTORS, GOOD, BAD).replay(THIN)
    [scan] = [s for s in replay.trail if s.phase == "flip f3"]
    assert scan.answer == "pass" and 0.0005 < (scan.p_pass or 1.0) <= 0.005
    # known-good with f1 alone is within the flip of f3 only: it runs
    assert [variant_key(v) for v in replay.needed] == [variant_key(with_("f1"))]
    assert _confirmed(THIN)[1:] == [
        ("confirm: without f1", variant_key(with_("f3")), "pass (implied)")]


def test_the_neighbour_of_a_thin_pass_that_still_fails_drops_its_level() -> None:
    # f1 alone fails (the flip of f3 passed by luck, as the 2-way scenario's seed 92 did):
    # its neighbour's own trial drops f3, and {f1} is confirmed in turn
    evidence = [*THIN, trial(with_("f1"), 10)]
    confirmed = _confirmed(evidence)
    assert ("confirm: without f3", variant_key(with_("f1")), "fail") in confirmed
    assert confirmed[-1] == ("confirm: without f1", variant_key(GOOD), "pass (known)")
