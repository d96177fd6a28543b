"""A variant has one rate wherever it is shown: a culprit's own effect ("alone on known-good")
counts the trials the variant rows count (those run to their end; where every one stopped
early, all of them with the sessions never run as clean), and a culprit says which variants
its counts pool and which outcome classes those very sessions hold."""

from __future__ import annotations

import pytest

from orchestrator.core.attribution import measure
from orchestrator.core.evidence import CORRUPTING, TrialEvidence, cells, variant_key
from orchestrator.core.own_effect import own_effect, rated

pytestmark = pytest.mark.pure

GOOD = {"a": "0", "b": "0"}
ALONE = {"a": "1", "b": "0"}


def _trial(levels: dict[str, str], leaks: int, sessions: int = 80,
           stopped: bool = False) -> TrialEvidence:
    counts = {"leak": leaks, "ok": sessions - leaks}
    return TrialEvidence(dict(levels), counts, stopped_early=stopped, planned=80)


def test_the_own_effect_counts_the_full_trials_where_there_are_some() -> None:
    # A full trial (12 of 80) and one stopped at its 9 failing sessions: 9 of 9 is no rate,
    # and 21 of 160 (counting the stopped one's 71 unrun sessions clean) is not the rate the
    # variant's row shows either: 12 of 80 is.
    evidence = [_trial(GOOD, 1), _trial(ALONE, 12), _trial(ALONE, 9, sessions=9, stopped=True)]
    own = own_effect({"a": "1"}, GOOD, evidence, CORRUPTING)
    assert own is not None
    assert (own.failed_with, own.sessions_with, own.unfinished_with) == (12, 80, 0)
    assert rated([t for t in evidence if t.levels == ALONE]) == [evidence[1]]


def test_where_every_trial_stopped_the_own_effect_is_the_row_s_lower_bound() -> None:
    evidence = [_trial(GOOD, 1), _trial(ALONE, 9, sessions=9, stopped=True)]
    own = own_effect({"a": "1"}, GOOD, evidence, CORRUPTING)
    assert own is not None
    assert (own.failed_with, own.sessions_with, own.unfinished_with) == (9, 80, 71)


def test_a_culprit_names_what_its_counts_pool() -> None:
    evidence = [_trial(GOOD, 0), _trial(ALONE, 12), _trial({"a": "1", "b": "1"}, 20),
                _trial({"a": "0", "b": "1"}, 1)]
    culprit = measure({"a": "1"}, cells(evidence))
    assert sorted(culprit.variants_in) == sorted(
        variant_key(lv) for lv in (ALONE, {"a": "1", "b": "1"}))
    assert len(culprit.variants_out) == 2
    assert (culprit.corrupted_in, culprit.judged_in) == (32, 160)
    assert culprit.outcomes_in == {"leak": 32, "ok": 128}  # the very sessions it pools


def test_a_trial_mostly_errors_is_left_out_of_the_own_effect_as_of_the_row() -> None:
    # Its 60 errors of 80 sessions leave 20 with a verdict of their own: a trial that is
    # mostly errors says nothing about the variant (``judged_trials``), in the variant's row
    # and so in the culprit's own effect.
    wrecked = TrialEvidence(dict(ALONE), {"error": 60, "leak": 10, "ok": 10}, planned=80)
    evidence = [_trial(GOOD, 1), _trial(ALONE, 12), wrecked]
    own = own_effect({"a": "1"}, GOOD, evidence, CORRUPTING)
    assert own is not None
    assert (own.failed_with, own.sessions_with) == (12, 80)
    assert "error" not in own.outcomes  # nor its sessions' outcomes
    alone_only = own_effect({"a": "1"}, GOOD, [_trial(GOOD, 1), wrecked], CORRUPTING)
    assert alone_only is None  # no trial of it alone says anything
