"""Confirmation, as Go's bisect does it: a culprit set is named only once known-good with exactly
that set fails and each neighbour with one of its levels put back to known-good's passes.

The tests are the replay's own three-way sequential tests on the stored evidence; trials are
added only where that evidence does not decide. A neighbour that still fails, at a tenth of
alpha, was not needed: its level is dropped and the smaller set is confirmed in turn (the search
took a lucky PASS for a needed level; a PASS must rule out a failure half as frequent as
known-bad's, so a one-trial PASS is rare where the luck is likely, stats/compare.py). Short of
that level, a neighbour that fails runs on while it leans, to 12 and 24 trials, judged there
only (`looks.at_look`); one that never gets there keeps its level only where it fails
clearly less than the set, and otherwise the set is not named ("cannot confirm …"): under
background noise a clean neighbour fails at alpha against a known-good measured low (the 2-way
scenario's seeds 72 and 87, BENCHMARKS.md), and a drop on that names a smaller, wrong set.
A set that does not fail on known-good's background needs more of known-bad's levels: delta
debugging over the rest finds a minimal completion, and the larger set is confirmed. "Does not
fail" is a claim that the set alone is quiet: its PASS must rule out the campaign's clean rate
above known-good's, and a set that leans failing runs on to 24 trials before it is completed
(sequential.Tests.test's ``quiet``): a culprit of two whose restarts landed low, completed with
an innocent level, ended the two-culprit scenario's seeds 158 and 182 inconclusive.

A neighbour's PASS is judged against known-bad, as the search's are, unless several culprits
are in play (the culprit came out of delta debugging, or another was found before it) and the
culprit alone may fail at less than half known-bad's rate: known-bad then fails at their rates
together, and a neighbour must pass against the culprit alone. With several culprits in play,
or a set completed by levels whose flips alone did not cure known-bad (another culprit holds
them too), a neighbour's PASS, which keeps
its level in the named set, is a claim of quiet: a neighbour that holds another culprit fails
at that one's rate, anything above the clean rate, and two clean trials against half of
known-bad's rate kept an innocent level (the two-culprit scenario's seed 182 named {f0, f1,
f3}). With one culprit, all a neighbour can hold is that culprit, failing as known-bad does, and
ruling out half of its rate is enough.

Such a PASS of one culprit's neighbour may come from the scan, with no trial (issue 27): known-good
with one level of the set put back holds some of the bad levels of the scan's flip of that factor
(known-bad with that level put back) and none other. Under monotone failures (a level of
known-bad's added never cures a failure) that flip's PASS against known-bad, at the level the
neighbour's test needs, is the neighbour's (`_implied`; "pass (implied)" in the
trail, naming the flip), where its p stood at a tenth of that level: it then stands for the
neighbour's second, independent look at a PASS the scan may have got by luck (at the level
itself, a flip of the 2-way scenario that still held the culprit passed on 4 trials, p =
0.0015, and its lucky PASS was named). A flip that only looked passing, or a neighbour whose
PASS is a claim of quiet, still runs. Given up: a failure that a bad level masks.

Under background noise (known-good fails, or a variant judged to pass did) a clean variant can
fail against a known-good measured low by luck, and a set named on such a FAIL would not explain
known-bad: the culprit alone must then fail as much as known-bad does (half as much with several
culprits), measured on as many full trials, or it is completed. A neighbour that fails but
clearly less than the culprit alone does not drop its level: the level is part of the failure.

A neighbour still undecided with its budget spent (run on to 12 trials where its test leaned one
way) keeps its level only when it leans passing more than failing, or fails clearly less than
both the culprit alone and known-bad (at the level its PASS needed: under noise between restarts
a clean neighbour is seldom shown clean against half known-bad's rate in a budget, but the
question it answers is whether it fails as the set does); otherwise the set is not named and the
campaign ends inconclusive ("cannot confirm …"): a culprit too weak to show alone was completed
by an innocent level whose neighbour is that same culprit, failing as known-bad does, and named
as a superset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from orchestrator.core.evidence import variant_key
from orchestrator.core.stats.compare import WEAKER_SHARE, Answer
from orchestrator.core.stats.exact import binomial_at_most
from orchestrator.core.strategies.base import Status
from orchestrator.core.strategies.looks import EXTENDED, LONG_CAP, at_look, runs_to
from orchestrator.core.strategies.sequential import (
    NEVER_STOP,
    Concluded,
    Step,
    Tests,
    leans_passing,
)
from orchestrator.core.trail import culprit_words, variant_words

if TYPE_CHECKING:
    from orchestrator.core.strategies.adaptive import Adaptive

DROP_SHARE = 0.1  # of alpha: the p of failing a neighbour needs to drop its level
# A neighbour passes by a PASS of the scan with no trial of its own only where that PASS stood
# at a tenth of the neighbour's level (`_implied`): it then answers for two tests, and one at
# the level itself lets a lucky scan through unchecked. At the level, 1 of 296 implied
# neighbours of the 2-way scenario and the one of "two culprits" (200 seeds each) held a
# culprit; at a tenth, none did, and 160 of the 296 were still implied (BENCHMARKS.md).
IMPLIED_SHARE = 0.1


def confirm(strategy: Adaptive, run: Tests, culprit: Mapping[str, str],
            bad: Mapping[str, str], *, several: bool = False, completed: bool = False,
            ) -> dict[str, str]:
    """The culprit as confirmation leaves it (the same, smaller or completed), its tests in
    the trail; ``bad``: the failing variant it was found in; ``several``: other culprits are
    in play (a neighbour must then pass against the culprit alone, not known-bad);
    ``completed``: the search completed it with levels another culprit holds too (its
    neighbours' PASSes are claims of quiet, as with several)."""
    good = strategy.good
    found = dict(culprit)
    for _ in range(2 * len(strategy.factors)):  # each round drops or adds a level
        candidate = {**good, **found}
        alone = run.test(candidate, "confirm: culprit alone", quiet=True)
        if run.skipped(candidate):  # no culprit is named unconfirmed (and nothing completes it)
            names = culprit_words(found)
            raise Concluded(Status.INCONCLUSIVE, f"cannot confirm {names}: known-good with it "
                            f"alone is unresolvable: {run.trail[-1].reason}")
        if not (alone is Answer.FAIL or _fails_at_budget(strategy, run, alone)) or (
                run.noisy() and _short_of(strategy, run, candidate, strategy.bad,
                                          WEAKER_SHARE if several else 1.0, "known-bad",
                                          measure=True)):
            rest = [f for f in strategy.factors if f not in found and bad[f] != good[f]]
            if not rest:
                return found  # nothing left to complete it with: named as found, unconfirmed
            completion = strategy._ddmin(run, rest, partial(_completed, candidate, bad))
            found |= {f: bad[f] for f in completion}
            continue
        needless = _needless(strategy, run, found, candidate if several and _weaker(
            run, candidate, strategy.bad) else None, several=several,
            quiet=several or completed)
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


def _short_of(strategy: Adaptive, run: Tests, variant: dict[str, str],
              reference: Mapping[str, str], share: float, what: str, *,
              measure: bool = False, level: float | None = None) -> bool:
    """Whether ``variant`` fails clearly less often than ``share`` of ``reference``'s rate, at
    ``level`` (the drop's unless told), on full trials. Conditioned on both counts' failures,
    the variant's share of them is binomial under the null (rare failures: Poisson rates), so
    the reference's own uncertainty is counted. ``measure``: until it is clear, the variant runs
    full trials up to as many as the reference has, and past its budget on while the test leans
    (judged at the looks of `looks.at_look` only, at the level shared over them)."""
    cell, ref = run.counts(variant), run.counts(reference)
    (k, n), (k_ref, n_ref) = cell.pair, ref.pair
    if not n_ref:  # a rate needs a full trial: one stopped at its failures overstates it
        run.need(dict(reference), stop_at={variant_key(reference): NEVER_STOP})
    p = binomial_at_most(k, k + k_ref, share * n / (share * n + n_ref)) if n and n_ref else 1.0
    most, full = strategy.max_trials_per_variant, cell.full_trials
    base = DROP_SHARE * strategy.alpha if level is None else level
    # a test that runs on answers at its looks only; one that does not, at its level
    at = at_look(base, full, most) if measure else base
    short = at is not None and p <= at
    run.trail.append(Step(f"confirm: fails as {what}?", variant, "short" if short else
                          "no less", k, n, full, None, p, pass_at=at))
    runs_on = most <= full < runs_to(most, full, (p, at)) and cell.trials < EXTENDED * most
    if not short and measure and (full < min(ref.full_trials, most) or runs_on):
        run.need(variant, stop_at={variant_key(variant): NEVER_STOP})
    return short


def _needless(strategy: Adaptive, run: Tests, found: Mapping[str, str],
              against: dict[str, str] | None, *, several: bool, quiet: bool) -> str | None:
    """The first level whose neighbour still fails as the culprit alone does (the level was
    not needed), or None. A level known-good shares (an interaction with the background, as
    HiCache on in both) has no level of known-good's to go back to: its neighbour flips it to
    another. ``quiet``: a neighbour's PASS is a claim of quiet (several culprits in play, or
    the set was completed by levels another culprit holds)."""
    candidate = {**strategy.good, **found}
    drop = DROP_SHARE * strategy.alpha
    for factor in found:
        neighbour = strategy._flip(candidate, factor)
        if not quiet and against is None and _implied(strategy, run, neighbour,
                                                      f"confirm: without {factor}"):
            continue  # a flip of the scan that holds it passed, at a tenth of its level
        # A PASS keeps the level. With one culprit, what a neighbour can still hold is that
        # culprit, failing as known-bad does, and ruling out half its rate is enough; with
        # several in play it may hold another one, failing at anything above the clean rate
        # (against known-bad or the culprit alone), and its PASS is a claim of quiet
        answer = run.test(neighbour, f"confirm: without {factor}", against=against,
                          stop_at=drop, quiet=quiet)
        if answer is Answer.PASS or run.skipped(neighbour):  # needed (or no answer against)
            continue
        step = run.trail[-1]
        if not (answer is Answer.FAIL or _fails_at_budget(strategy, run, answer)):
            if leans_passing(step) or step.p_fail is None or step.p_pass is None:
                continue  # undecided at its budget, leaning passing (or no test was made)
            if _shown_short(strategy, run, neighbour, candidate, step.pass_at,
                            several=several):
                continue  # it fails clearly less than the set explains: the level is needed
            # undecided, and not leaning passing: the level is not shown needed, and a set
            # named with it would be a guess (most often a culprit too weak to show alone,
            # completed by an innocent level whose neighbour is that same culprit)
            names = culprit_words(found)
            raise Concluded(Status.INCONCLUSIVE, f"cannot confirm {names}: without "
                            f"{factor}={found[factor]} it neither fails nor passes after "
                            f"{step.trials} trials ({step.failures} of {step.judged} sessions, "
                            f"p of failing {step.p_fail:.2g}, of passing {step.p_pass:.2g})")
        if _certain(strategy, run, neighbour):
            if not _short_of(strategy, run, neighbour, candidate, 1.0, "the culprit alone"):
                return factor
            continue  # it fails, but clearly less than the set: the level is part of it
        if _shown_short(strategy, run, neighbour, candidate, None, several=several):
            continue
        # it fails, not surely enough to drop the level (a clean neighbour against a
        # known-good measured low does as much), nor clearly less than the set
        names = culprit_words(found)
        at = at_look(drop, step.trials, strategy.max_trials_per_variant, LONG_CAP) or drop
        raise Concluded(Status.INCONCLUSIVE, f"cannot confirm {names}: without "
                        f"{factor}={found[factor]} it fails ({step.failures} of "
                        f"{step.judged} sessions in {step.trials} trials, p = "
                        f"{step.p_fail:.2g}), short of the {at:g} that drops a level, and "
                        "not clearly less than the set")
    return None


def _implied(strategy: Adaptive, run: Tests, levels: dict[str, str], phase: str) -> bool:
    """Whether a PASS of ``levels`` follows from a PASS of the scan, with no trial of its own
    (then in the trail as "pass (implied)", naming the flip): under monotone failures (a level
    of known-bad's added never cures a failure), a variant that holds only some of the bad
    levels of a flip that passes, and otherwise the flip's levels, passes too. Only a PASS held
    to the standard ``levels``' own test would need: against known-bad, at half its rate (not a
    claim of quiet), at its level or stricter (not a provisional "looks passing"), its p at a
    tenth of that level (`IMPLIED_SHARE`): it stands for the neighbour's own, independent look
    at a PASS the scan may have got by luck. It gives up a failure that a level of known-bad's
    masks."""
    s = strategy
    if variant_key(levels) in (variant_key(s.good), variant_key(s.bad)):
        return False  # its answer is known: `Tests.test` says so
    need = s.pass_alpha(run.counts(s.good))
    for flip in run.scan_passes:
        strong = flip.pass_at is not None and flip.pass_at <= need and \
            flip.p_pass is not None and flip.p_pass <= IMPLIED_SHARE * need
        within = all(levels[f] == flip.levels[f]
                     or (levels[f] == s.good[f] and flip.levels[f] == s.bad[f])
                     for f in s.factors)
        if strong and within:
            cell = run.counts(levels)
            run.trail.append(Step(
                phase, levels, "pass (implied)", cell.failures, cell.judged, cell.trials, None,
                flip.p_pass, cell.unfinished, pass_at=IMPLIED_SHARE * need,
                reason=f"implied by the scan's PASS of {flip.phase} "
                       f"({variant_words(flip.levels)})"))
            return True
    return False


def _shown_short(strategy: Adaptive, run: Tests, neighbour: dict[str, str],
                 candidate: dict[str, str], level: float | None, *, several: bool) -> bool:
    """Whether a neighbour undecided at its budget fails clearly less than the failure the set
    explains, at ``level`` (the one its PASS needed). Under noise between restarts a clean
    neighbour is seldom shown clean against half known-bad's rate within a budget, but the
    question a neighbour answers is whether it fails as the set does. It must fail clearly
    less than the culprit alone and than known-bad (their share of it with several culprits):
    a superset's neighbour is the culprit itself, which known-bad holds, and trials of the set
    that ran on a pool or at a time that landed high would make it look short of the set
    alone. Where a test leans, the neighbour runs on past its budget as any test that leans
    does (`_short_of`'s ``measure``)."""
    at = DROP_SHARE * strategy.alpha if level is None else level
    return all(_short_of(strategy, run, neighbour, reference, share, what, level=at,
                         measure=True)
               for reference, share, what in (
                   (candidate, 1.0, "the culprit alone"),
                   (strategy.bad, WEAKER_SHARE if several else 1.0, "known-bad")))


def _fails_at_budget(strategy: Adaptive, run: Tests, answer: Answer) -> bool:
    """An UNKNOWN that fails at alpha with its trial budget spent (confirmation's tests answer
    UNKNOWN only then): under noise a FAIL needs alpha shared over the factors, which a culprit
    near it may miss for ever by chance. The culprit alone and a neighbour are judged alike
    here, or a set would be completed with a level its neighbour then drops, round after
    round."""
    p_fail = run.trail[-1].p_fail
    return answer is Answer.UNKNOWN and p_fail is not None and p_fail <= strategy.alpha


def _certain(strategy: Adaptive, run: Tests, neighbour: dict[str, str]) -> bool:
    """Whether a neighbour's FAIL is strong enough to overrule the search, which found its
    level needed: p of failing at a tenth of alpha (`DROP_SHARE`). Under background noise a
    clean variant fails at alpha by luck about once in a hundred tests, and a known-good
    measured low by luck makes it likelier: dropping a level on such a FAIL names a smaller,
    wrong set (a clean neighbour at 14 of 720 against known-good's 2 of 720, p = 0.0025).
    Short of it, trials are added up to the budget, and past it while the p leans, up to
    `looks.LONG_CAP` times the budget, judged at its looks only (12 and 24 trials, at half
    the level each)."""
    p_fail = run.trail[-1].p_fail
    if p_fail is None:
        return False
    most = strategy.max_trials_per_variant
    trials, good = run.counts(neighbour).trials, run.counts(strategy.good).trials
    at = at_look(DROP_SHARE * strategy.alpha, trials, most, LONG_CAP)
    if at is not None and p_fail <= at:
        return True
    if good < min(trials, most):
        run.need(dict(strategy.good))  # known-good's smaller sample holds the p back
    if trials < runs_to(most, trials, (p_fail, at), cap=LONG_CAP):
        drop = DROP_SHARE * strategy.alpha
        run.need(neighbour, stop_at={variant_key(neighbour): drop,
                                     **run.past_budget(neighbour, trials, drop, LONG_CAP)})
    return False
