"""The strategy protocol: from the evidence so far, which variants to run next, and what the
evidence concludes; with the one vocabulary of conclusions, ``Status``.

A strategy sees plain values only (no store, no Ray) so it can be tested and simulated in
milliseconds. It returns an empty list, with nothing pending, when it is done. A kind of
strategy is registered once (orchestrator/core/strategies/registry.py): its config class and the
factory that builds it from a campaign.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.core.evidence import Failing, Levels, TrialEvidence, variant_key
from orchestrator.core.stats.compare import StopRule
from orchestrator.core.trail import Finding, TrailEntry, finding_json

if TYPE_CHECKING:
    from orchestrator.core.attribution import Culprit


class Status(StrEnum):
    """What a campaign concluded (the verdict JSON's ``status``)."""

    CULPRIT = "culprit"
    NO_CULPRIT = "no_culprit"
    INCONCLUSIVE = "inconclusive"
    NOT_REPRODUCED = "not_reproduced"
    OPTIMUM = "optimum"  # a search named the best configuration proven safe


UNFINISHED = "unfinished: `bisect resume` continues it"


# How the error of a trial the user's probe skipped begins (exit 125, `git bisect skip`).
PROBE_SKIPPED = "the probe exited 125"
# Why a variant's trial failed, by the step that failed (orchestrator.executor.steps).
FAILED_STEP = {
    "apply": "its change could not be applied", "restart": "its server did not start",
    "health": "its server did not become healthy", "prove": "it could not be proven loaded",
    "hooks": "a hook after its restart failed",
}


@dataclass(frozen=True)
class Unresolvable:
    """A variant that cannot be judged, skipped like `git bisect skip`: its change could not be
    applied, its server did not start or become healthy, it could not be proven loaded, or the
    user's probe skipped it (exit 125); with the last error and the step that failed."""

    levels: Mapping[str, str]
    attempts: int
    error: str
    step: str | None = None  # the step of its last trial that failed

    @property
    def by_probe(self) -> bool:
        """The user's probe skipped it (exit 125): it was deployed, and not judged."""
        return self.error.startswith(PROBE_SKIPPED)

    def why(self) -> str:
        """Why it cannot be judged, in words a reason line uses."""
        if self.by_probe:
            return "the probe skipped it (exit 125)"
        first = self.error.splitlines()[0] if self.error.strip() else "unknown error"
        return f"{FAILED_STEP.get(self.step or '', 'its trials failed')}: {first}"


@dataclass(frozen=True)
class Conclusion:
    """What a strategy concludes from the evidence; the verdict adds what every strategy
    shares (the variants' cells, the cost, wedging, the unresolvable variants)."""

    status: Status
    reason: str
    culprits: tuple[Culprit, ...] = ()
    log: tuple[TrailEntry, ...] = ()  # the decision trail, where the strategy keeps one
    # what its kind found beyond culprits: a factorial design, a commit search's change point,
    # a sweep's comparisons, a search's ranked configurations
    finding: Finding | None = None
    # what the culprits explain, where not the campaign's target (an `also`'s: the other
    # failure; a strategy's own conclusion is its target's, whatever known-bad showed)
    failing: Failing | None = None
    # the other failure known-bad showed, concluded beside the target (its own `failing`); also
    # where known-bad did not reproduce the target: the target is `not_reproduced` then, and
    # the other failure's culprits are this one's, never the target's
    also: Conclusion | None = None
    # the target's own reason, where ``reason`` also says what ``also`` concluded
    target_reason: str | None = None

    def finding_json(self, kind: str) -> dict[str, Any] | None:
        """The finding's JSON where the strategy is of ``kind`` (``"optimize"``...), else None."""
        return finding_json(self.finding, kind)


class Strategy(Protocol):
    def propose(
        self, done: Sequence[TrialEvidence], pending: Sequence[Levels]
    ) -> list[dict[str, str]]:
        """Variants to start now, best first; the caller runs as many as it has free pools."""
        ...

    def stop_rule(
        self, levels: Levels, done: Sequence[TrialEvidence]
    ) -> StopRule | None:
        """When a trial of ``levels`` may end before its planned end, or None."""
        ...

    def conclude(self, done: Sequence[TrialEvidence],
                 unresolvable: Sequence[Unresolvable]) -> Conclusion:
        """What the evidence says so far (``Status.INCONCLUSIVE`` while trials are needed)."""
        ...

    def meeting(self, unresolvable: Sequence[Unresolvable]) -> Strategy:
        """The strategy told which variants cannot be deployed (itself, when it meets them in
        its conclusion only)."""
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
