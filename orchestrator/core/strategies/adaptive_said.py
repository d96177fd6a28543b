"""What an adaptive search says (adaptive.py decides): its replay as a conclusion, each culprit
measured on every explored cell and on its own, and why a search stopped at a variant it cannot
do without. Pure: values in, a `Conclusion` out."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from orchestrator.core.attribution import Culprit, measure
from orchestrator.core.evidence import CORRUPTING, Levels, TrialEvidence, variant_key
from orchestrator.core.own_effect import own_effect
from orchestrator.core.strategies.base import UNFINISHED, Conclusion, Status, Unresolvable
from orchestrator.core.strategies.both_failures import both_reason
from orchestrator.core.verdict import judged_cells

if TYPE_CHECKING:
    from orchestrator.core.strategies.adaptive import Replay


def conclude_replay(
    replay: Replay,
    evidence: Sequence[TrialEvidence],
    factors: Mapping[str, Sequence[str]],
    unresolvable: Sequence[Unresolvable] = (),
    good: Levels | None = None,
    bad: Levels | None = None,
) -> Conclusion:
    """The adaptive strategy's conclusion, with each culprit measured on every explored cell
    and, where ``good`` is given, on its own (the culprit alone against its neighbours)."""
    log = (*replay.trail, *(replay.also.trail if replay.also else ()))
    blocked = {variant_key(u.levels): u for u in unresolvable}
    asking = replay.asking
    stuck = [blocked[variant_key(v)] for v in asking.needed if variant_key(v) in blocked]
    if stuck:  # known-good or known-bad: no test goes on without them
        status, reason = Status.INCONCLUSIVE, cannot_go_on(stuck[0], good, bad)
    elif replay.outcome is None or asking.outcome is None:
        status, reason = Status.INCONCLUSIVE, UNFINISHED
    else:
        status, reason = replay.outcome, replay.reason
    also, own = None, None
    if replay.also is not None and replay.also.outcome is not None:
        also = conclude_replay(replay.also, evidence, factors, (), good)
        own, reason = reason, both_reason(status, reason, also)
    culprits = _measured(replay, evidence, factors, good) if status is Status.CULPRIT else ()
    return Conclusion(status, reason, culprits, log, failing=replay.failing, also=also,
                      target_reason=own)


def cannot_go_on(skipped: Unresolvable, good: Levels | None = None,
                 bad: Levels | None = None) -> str:
    """Why the search stopped at a variant it cannot do without: "cannot go on: known-bad
    hicache=on is unresolvable: the probe skipped it (exit 125)"."""
    levels = ",".join(f"{f}={lvl}" for f, lvl in skipped.levels.items())
    key = variant_key(skipped.levels)
    role = next((f"{name} " for name, known in (("known-good", good), ("known-bad", bad))
                 if known is not None and variant_key(known) == key), "")
    return f"cannot go on: {role}{levels} is unresolvable: {skipped.why()}"


def _measured(replay: Replay, evidence: Sequence[TrialEvidence],
              factors: Mapping[str, Sequence[str]], good: Levels | None) -> tuple[Culprit, ...]:
    # Effects over every cell are measured on full trials only: a trial stopped early ends
    # with its failing sessions (they finish first), so its rate says "failing", not "how much".
    failing = replay.failing or CORRUPTING
    judged = [t.judged_as(failing) for t in evidence] if replay.failing else list(evidence)
    _, full = judged_cells([t for t in judged if not t.stopped_early], factors)
    return tuple(
        dataclasses.replace(measure(c, full),
                            own=own_effect(c, good, evidence, failing) if good else None)
        for c in replay.culprits)
