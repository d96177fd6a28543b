"""Both failures, always: every adaptive and commit campaign watches corruption and wedging.

The campaign's target is bisected first. Where known-bad does not reproduce it but clearly
shows the other failure, the other is bisected instead (or the reason says exactly why not,
with the counts of timeouts, errors and wedge log lines): the target stays `not_reproduced`
and the other's culprits are the other's ("corruption not reproduced; wedging follows ...",
never corruption culprits); where the target was bisected and
known-bad's stored trials show the other failure too, the other is bisected beside it. Each is
its own replay, on the same trials judged against its own failing set, so evidence is shared:
the other failure adds only the trials its own tests still need. The commit search does the
same with its posterior (`commit_replay_both`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from experiments.outcomes import WEDGE_LOG_KINDS
from orchestrator.core.evidence import CORRUPTING, WEDGING, TrialEvidence, target_of, variant_key
from orchestrator.core.stats.compare import Answer, reproduced
from orchestrator.core.strategies.base import Conclusion, Status
from orchestrator.core.strategies.sequential import Step, cells_of

if TYPE_CHECKING:
    from orchestrator.core.strategies.adaptive import Adaptive, Replay
    from orchestrator.core.strategies.commits import CommitReplay, Commits


def replay_both(strategy: Adaptive, evidence: Sequence[TrialEvidence]) -> Replay:
    """The target's replay, with the other failure's where known-bad shows it."""
    first = strategy.replay_target(evidence)
    other = copy.copy(strategy)  # the same strategy (a subclass too), judging the other failure
    other.failing = WEDGING if strategy.failing == CORRUPTING else CORRUPTING
    seen = [t.judged_as(other.failing) for t in evidence]
    if first.outcome is Status.NOT_REPRODUCED:
        return _instead(strategy, other, evidence, seen, first)
    if first.outcome is None or not _shows(other, seen):
        return first
    second = _named(other.replay_target(seen), other)
    return dataclasses.replace(first, also=second)


def _shows(strategy: Adaptive, seen: Sequence[TrialEvidence]) -> bool:
    """Known-bad's stored trials reproduce this failure already (no trial is added to ask)."""
    cells = cells_of(seen)
    bad, good = cells.get(variant_key(strategy.bad)), cells.get(variant_key(strategy.good))
    return bad is not None and good is not None and \
        reproduced(bad.pair, good.pair, strategy.alpha)[0] is Answer.FAIL


def _named(replay: Replay, strategy: Adaptive) -> Replay:
    """Its trail lines named by the failure they test (`wedging: flip f3`)."""
    name = target_of(strategy.failing)
    trail = tuple(dataclasses.replace(step, phase=f"{name}: {step.phase}")
                  for step in replay.trail)
    return dataclasses.replace(replay, trail=trail, failing=strategy.failing)


def _instead(target: Adaptive, other: Adaptive, evidence: Sequence[TrialEvidence],
             seen: Sequence[TrialEvidence], replay: Replay) -> Replay:
    """The target was not reproduced: bisect the other failure if known-bad clearly shows it
    (its own replay, on the same trials), or say why not."""
    counts = _counts(target, evidence)
    if not _any_of(other, seen):
        return dataclasses.replace(replay, reason=f"{replay.reason}; {counts}")
    bisected = _named(other.replay_target(seen), other)
    if bisected.outcome is Status.NOT_REPRODUCED:
        trail: tuple[Step, ...] = (*replay.trail, *bisected.trail)
        return dataclasses.replace(replay, trail=trail, reason=(
            f"{replay.reason}; {counts}, not worse than known-good's: {bisected.reason}"))
    # The target stays not reproduced; the other failure is concluded beside it, its culprits
    # its own (conclude_replay: "corruption not reproduced; wedging follows ...").
    return dataclasses.replace(replay, reason=f"{replay.reason}; {counts}", also=bisected)


def both_reason(status: Status, reason: str, also: Conclusion) -> str:
    """The reason of a target concluded with the other failure beside it (``reason``: the
    target's own). A target known-bad did not reproduce says so first, then what the other
    failure follows: "corruption not reproduced; wedging follows f2=b (known-bad: 0 corrupt,
    31 timeouts, ...)"; a commit search's: "... wedging follows the first bad commit: ..."."""
    other = target_of(also.failing or CORRUPTING)
    if status is not Status.NOT_REPRODUCED:
        return f"{reason}; {other}: {also.reason}"
    if also.reason.startswith(other):
        said = also.reason
    elif also.status is Status.CULPRIT and also.reason.startswith("first bad commit"):
        said = f"{other} follows the {also.reason}"
    else:
        said = f"{other}: {also.reason}"
    target = target_of(CORRUPTING if also.failing == WEDGING else WEDGING)
    return f"{target} not reproduced; {said} ({reason})"


def _any_of(strategy: Adaptive, seen: Sequence[TrialEvidence]) -> bool:
    bad = [t for t in seen if variant_key(t.levels) == variant_key(strategy.bad)]
    return any(t.failures for t in bad)


def _counts(strategy: Adaptive, evidence: Sequence[TrialEvidence]) -> str:
    """What known-bad showed of both failures, for a reason."""
    return _shown("known-bad", [t for t in evidence
                                if variant_key(t.levels) == variant_key(strategy.bad)])


def _shown(name: str, bad: Sequence[TrialEvidence]) -> str:
    timeouts = sum(t.counts.get("timeout", 0) for t in bad)
    errors = sum(t.counts.get("error", 0) for t in bad)
    logged = sum(t.events.get(kind, 0) for t in bad for kind in WEDGE_LOG_KINDS)
    corrupt = sum(t.judged_as(CORRUPTING).failures for t in bad)
    return (f"{name}: {corrupt} corrupt, {timeouts} timeouts, {errors} errors, {logged} "
            f"wedge log lines in {sum(t.sessions for t in bad)} sessions")


def commit_replay_both(strategy: Commits, evidence: Sequence[TrialEvidence]) -> CommitReplay:
    """The commit search for the target, and for the other failure as the adaptive strategy
    does: instead, where the bad commit does not reproduce the target but shows the other
    (the target stays not reproduced, the other's search beside it; or the reason says what
    it showed), beside, where its stored trials reproduce both."""
    first = strategy.search(evidence)
    other = WEDGING if strategy.failing == CORRUPTING else CORRUPTING
    seen = [t.judged_as(other) for t in evidence]
    last = len(strategy.commits) - 1
    if first.status is Status.NOT_REPRODUCED:
        if not any(t.failures for t in strategy.trials_at(seen, last)):
            return dataclasses.replace(first, reason=f"{first.reason}; {_ends(strategy, evidence)}")
        second = strategy.search(seen)
        if second.status is Status.NOT_REPRODUCED:
            return dataclasses.replace(first, reason=(
                f"{first.reason}; {_ends(strategy, evidence)}, not worse than the good "
                f"commit's: {second.reason}"))
        # the target stays not reproduced, the other's search beside it (both_reason)
        return dataclasses.replace(first, reason=f"{first.reason}; {_ends(strategy, evidence)}",
                                   also=dataclasses.replace(second, failing=other))
    if not first.finished:
        return first
    bad, good = (strategy.trials_at(seen, end) for end in (last, 0))
    if reproduced(_pair(bad), _pair(good), strategy.alpha)[0] is not Answer.FAIL:
        return first
    return dataclasses.replace(first, also=dataclasses.replace(strategy.search(seen),
                                                               failing=other))


def _pair(trials: Sequence[TrialEvidence]) -> tuple[int, int]:
    return sum(t.failures for t in trials), sum(t.judged for t in trials)


def _ends(strategy: Commits, evidence: Sequence[TrialEvidence]) -> str:
    """What the bad commit showed of both failures, for a reason."""
    return _shown("the bad commit", strategy.trials_at(evidence, len(strategy.commits) - 1))
