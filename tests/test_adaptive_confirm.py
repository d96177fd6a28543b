"""Confirmation (issue 13): a culprit set is named only once known-good with exactly that set
fails and each neighbour with one of its levels put back passes; a PASS the search rested on is
re-tested, and a neighbour that fails sends the search back."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.core.evidence import TrialEvidence, variant_key
from orchestrator.core.strategies.adaptive import Adaptive

FACTORS = {f"f{i}": ["a", "b"] for i in range(4)}
GOOD = dict.fromkeys(FACTORS, "a")
BAD = dict.fromkeys(FACTORS, "b")


def _trial(levels: Mapping[str, str], corrupt: int) -> TrialEvidence:
    return TrialEvidence(dict(levels), {"ok": 80 - corrupt, "leak": corrupt})


def _with(*factors: str) -> dict[str, str]:
    return {**GOOD, **dict.fromkeys(factors, "b")}


def _flip(factor: str) -> dict[str, str]:
    return {**BAD, factor: "a"}


# f0 alone fails, at 20%. The scan's flip of f1 kept f0 but saw 0 of 240 by luck, so the
# search found {f0, f1}; confirmation tests known-good with each level alone.
SEARCH = [
    _trial(BAD, 16), _trial(BAD, 16), _trial(GOOD, 0), _trial(GOOD, 0),
    *[_trial(_flip("f0"), 0) for _ in range(3)],
    *[_trial(_flip("f1"), 0) for _ in range(3)],  # the lucky PASS
    _trial(_flip("f2"), 16), _trial(_flip("f3"), 16),
    _trial(_with("f0", "f1"), 16),
    *[_trial(_with("f1"), 0) for _ in range(3)],
]


def test_a_neighbour_that_still_fails_drops_the_level_a_lucky_pass_had_added() -> None:
    strategy = Adaptive(FACTORS, GOOD, BAD)
    first = strategy.replay(SEARCH)
    # the set as found fails alone and passes without f0; without f1 is asked for next
    assert [variant_key(v) for v in first.needed] == [variant_key(_with("f0"))]
    confirmed = [(s.phase, variant_key(s.levels), s.answer) for s in first.trail
                 if s.phase.startswith("confirm")]
    assert confirmed == [("confirm: culprit alone", variant_key(_with("f0", "f1")), "fail"),
                         ("confirm: without f0", variant_key(_with("f1")), "pass")]

    # known-good with f0 alone fails: f1 was not needed, and {f0} is confirmed in turn
    done = strategy.replay([*SEARCH, _trial(_with("f0"), 16)])
    assert done.outcome is not None and done.culprits == ({"f0": "b"},)
    confirmed = [(s.phase, variant_key(s.levels), s.answer) for s in done.trail
                 if s.phase.startswith("confirm")]
    assert confirmed[2:] == [("confirm: without f1", variant_key(_with("f0")), "fail"),
                             ("confirm: culprit alone", variant_key(_with("f0")), "fail"),
                             ("confirm: without f0", variant_key(GOOD), "pass (known)")]


def test_a_neighbours_fail_overrules_the_search_only_when_it_is_certain() -> None:
    # known-good with f0 alone fails at p = 0.004: a FAIL, but under background noise a clean
    # variant fails at alpha about once in a hundred tests, so dropping f1 needs p <= alpha/10
    strategy = Adaptive(FACTORS, GOOD, BAD)
    unsure = strategy.replay([*SEARCH, _trial(_with("f0"), 5)])
    assert [variant_key(v) for v in unsure.needed] == [variant_key(_with("f0"))]
    assert unsure.outcome is None
    # a second trial makes it certain (11 of 160 against 0 of 160): f1 is dropped
    certain = strategy.replay([*SEARCH, _trial(_with("f0"), 5), _trial(_with("f0"), 6)])
    assert certain.culprits == ({"f0": "b"},)


def test_an_undecided_reproduction_asks_for_the_side_with_fewer_trials_first() -> None:
    # with one pool only the first proposal runs: known-bad proposed first every time would
    # spend its budget while known-good stayed at its 2 trials (a noisy known-good never caught up)
    strategy = Adaptive(FACTORS, GOOD, BAD)
    evidence = [*[_trial(BAD, 4) for _ in range(3)], _trial(GOOD, 2), _trial(GOOD, 2)]
    assert variant_key(strategy.replay(evidence).needed[0]) == variant_key(GOOD)
    more_good = [*evidence, _trial(GOOD, 2), _trial(GOOD, 2)]
    assert variant_key(strategy.replay(more_good).needed[0]) == variant_key(BAD)
