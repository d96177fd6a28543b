"""Confirmation, as Go's bisect does it: a culprit set is named only once known-good with exactly
that set fails and each neighbour with one of its levels put back to known-good's passes.

The tests are the replay's own three-way sequential tests on the stored evidence; trials are
added only where that evidence does not decide. A neighbour that still fails was not needed:
its level is dropped and the smaller set is confirmed in turn (the search took a lucky PASS for
a needed level; a PASS must rule out a failure half as frequent as known-bad's, so a one-trial
PASS is rare where the luck is likely, stats/compare.py).
A set that does not fail on known-good's background needs more of known-bad's levels: delta
debugging over the rest finds a minimal completion, and the larger set is confirmed.

A neighbour's PASS is judged against known-bad, as the search's are, unless several culprits
are in play (the culprit came out of delta debugging, or another was found before it) and the
culprit alone may fail at less than half known-bad's rate: known-bad then fails at their rates
together, and a neighbour must pass against the culprit alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from orchestrator.core.stats.compare import WEAKER_SHARE, Answer
from orchestrator.core.strategies.sequential import Tests

if TYPE_CHECKING:
    from orchestrator.core.strategies.adaptive import Adaptive

DROP_SHARE = 0.1  # of alpha: the p of failing a neighbour needs to drop its level


def confirm(strategy: Adaptive, run: Tests, culprit: Mapping[str, str],
            bad: Mapping[str, str], *, several: bool = False) -> dict[str, str]:
    """The culprit as confirmation leaves it (the same, smaller or completed), its tests in
    the trail; ``bad``: the failing variant it was found in; ``several``: other culprits are
    in play (a neighbour must then pass against the culprit alone, not known-bad)."""
    good = strategy.good
    found = dict(culprit)
    for _ in range(2 * len(strategy.factors)):  # each round drops or adds a level
        candidate = {**good, **found}
        if run.test(candidate, "confirm: culprit alone") is not Answer.FAIL:
            rest = [f for f in strategy.factors if f not in found and bad[f] != good[f]]
            if not rest:
                return found  # nothing left to complete it with: named as found, unconfirmed
            completion = strategy._ddmin(run, rest, partial(_completed, candidate, bad))
            found |= {f: bad[f] for f in completion}
            continue
        needless = _needless(strategy, run, found, candidate if several and _weaker(
            run, candidate, strategy.bad) else None)
        if needless is None:
            return {f: found[f] for f in strategy.factors if f in found}
        del found[needless]
    return found


def _weaker(run: Tests, candidate: Mapping[str, str], bad: Mapping[str, str]) -> bool:
    """Whether the culprit alone may fail at less than half known-bad's rate: a PASS against
    known-bad rules out only that half (stats/compare.py), so its neighbours must then pass
    against the culprit itself (a rate, from full trials). Its trials so far, unfinished
    sessions counted clean, bound its rate from below."""
    failed, sessions = run.counts(candidate).curtailed
    bad_failed, bad_sessions = run.counts(bad).pair
    return not sessions or not bad_sessions or \
        failed / sessions < WEAKER_SHARE * bad_failed / bad_sessions


def _completed(candidate: Mapping[str, str], bad: Mapping[str, str],
               subset: Sequence[str]) -> dict[str, str]:
    return {**candidate, **{f: bad[f] for f in subset}}


def _needless(strategy: Adaptive, run: Tests, found: Mapping[str, str],
              against: dict[str, str] | None) -> str | None:
    """The first level whose neighbour still fails (it was not needed), or None. A level
    known-good shares (an interaction with the background, as HiCache on in both) has no
    level of known-good's to go back to: its neighbour flips it to another."""
    for factor in found:
        neighbour = strategy._flip({**strategy.good, **found}, factor)
        answer = run.test(neighbour, f"confirm: without {factor}", against=against)
        if answer is Answer.FAIL and _certain(strategy, run, neighbour):
            return factor
    return None


def _certain(strategy: Adaptive, run: Tests, neighbour: dict[str, str]) -> bool:
    """Whether a neighbour's FAIL is strong enough to overrule the search, which found its
    level needed. Under background noise a clean variant fails at alpha by luck about once in
    a hundred tests, and a known-good measured low by luck makes it likelier: dropping a level
    on such a FAIL would name a smaller, wrong set. The drop is rare when the search was right,
    so it may ask for more: p of failing at a tenth of alpha, trials added up to the budget."""
    p_fail = run.trail[-1].p_fail
    if p_fail is not None and p_fail <= DROP_SHARE * strategy.alpha:
        return True
    if run.counts(neighbour).trials < strategy.max_trials_per_variant:
        run.need(neighbour)
    return False
