"""The strategy protocol: from the evidence so far, which variants to run next.

A strategy sees plain values only (no store, no Ray) so it can be tested and simulated in
milliseconds. It returns an empty list, with nothing pending, when it is done.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from orchestrator.evidence import Levels, TrialEvidence, variant_key
from orchestrator.stats.compare import StopWhenFailing


class Strategy(Protocol):
    def propose(
        self, done: Sequence[TrialEvidence], pending: Sequence[Levels]
    ) -> list[dict[str, str]]:
        """Variants to start now, best first; the caller runs as many as it has free pools."""
        ...

    def stop_rule(
        self, levels: Levels, done: Sequence[TrialEvidence]
    ) -> StopWhenFailing | None:
        """When a trial of ``levels`` may end before its planned end, or None."""
        ...


def not_yet_running(needed: Sequence[dict[str, str]], pending: Sequence[Levels]) -> list[
        dict[str, str]]:
    """The trials a replay needs, less those already running: each running trial answers one."""
    waiting = Counter(variant_key(levels) for levels in pending)
    proposals = []
    for levels in needed:
        key = variant_key(levels)
        if waiting[key]:
            waiting[key] -= 1
        else:
            proposals.append(levels)
    return proposals
