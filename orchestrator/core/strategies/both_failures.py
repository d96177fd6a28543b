"""Both failures, always: every adaptive and commit campaign watches corruption and wedging.

`BothFailures` wraps the search of one failure, as Ray Tune's `Repeater` wraps a searcher. The
campaign's target is searched first. Where known-bad does not reproduce it but clearly shows
the other failure, the other is searched instead (or the reason says exactly why not, with the
counts of timeouts, errors and wedge log lines): the target stays `not_reproduced` and the
other's culprits are the other's ("corruption not reproduced; wedging follows ...", never
corruption culprits); where the target was found and known-bad's stored trials show the other
failure too, the other is searched beside it. The other failure's search is the same search
made for it (its *twin*), replayed on the same trials judged against its own failing set, so
evidence is shared: the other failure adds only the trials its own tests still need.
Where known-bad's trials only look failing the other way (the adaptive search: each of its
reproduction trials failed so, more of their sessions than the clean rate, short of a FAIL at
alpha), the other is searched too, and
its reproduction runs known-bad and known-good on until it decides, as the target's does: the
wedge+leak scenario's seeds 47, 101, 131 and 170 (BENCHMARKS.md) stopped there with 14 timeouts
in known-bad's 160 sessions, and wedging, attributed on trials that never set f2 and f3 apart,
named neither.

The adaptive strategy and the commit search are `Replaying` strategies: they keep no state,
every call replays their decisions from the stored evidence through the wrapper, and their one
`propose` is the trials that replay still asks for.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

from experiments.outcomes import WEDGE_LOG_KINDS
from orchestrator.core.evidence import (
    CORRUPTING,
    WEDGING,
    Failing,
    Levels,
    TrialEvidence,
    target_of,
)
from orchestrator.core.strategies.base import Conclusion, Status, not_yet_running


class Searched(Protocol):
    """One failure's replay, as the wrapper joins two (adaptive's `Replay`, the commit
    search's `CommitReplay`): a frozen dataclass with a ``reason`` and an ``also``."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # joined by dataclasses.replace

    @property
    def needed(self) -> tuple[dict[str, str], ...]: ...  # variants that need a trial now

    @property
    def reason(self) -> str: ...

    @property
    def concluded(self) -> Status | None: ...  # None while trials are needed

    @property
    def asking(self) -> Self: ...  # the replay whose trials are needed now (the target's first)

    def named(self, failing: Failing) -> Self:
        """This replay as the other failure's (its trail lines named by it, where it keeps
        them)."""
        ...

    def followed_by(self, other: Self) -> Self:
        """This replay with ``other``'s trail after its own, where it keeps one."""
        ...


R = TypeVar("R", bound=Searched)


class Replaying(ABC, Generic[R]):
    """A strategy that replays its search of one failure from the stored evidence; both
    failures through `BothFailures`."""

    failing: Failing  # what the evidence it is given was judged against
    # the failing end and the good one, as a reason names them: ("known-bad", "known-good's")
    ENDS: ClassVar[tuple[str, str]]

    @abstractmethod
    def replay_target(self, evidence: Sequence[TrialEvidence]) -> R:
        """The search for ``self.failing`` alone, on evidence judged against it."""

    @abstractmethod
    def judging(self, failing: Failing) -> Replaying[R]:
        """The same search, for ``failing``: the other failure's twin."""

    @abstractmethod
    def bad_trials(self, evidence: Sequence[TrialEvidence]) -> list[TrialEvidence]:
        """The failing end's trials (known-bad, the bad commit)."""

    @abstractmethod
    def shows(self, seen: Sequence[TrialEvidence]) -> bool:
        """The failing end's stored trials show this failure: they reproduce it already, or
        (a search whose reproduction runs on while it leans) look failing that way, and the
        twin's own reproduction then decides."""

    def replay(self, evidence: Sequence[TrialEvidence]) -> R:
        """The search for both failures: the target's first."""
        return BothFailures(self, self.judging).replay(evidence)

    def propose(self, done: Sequence[TrialEvidence], pending: Sequence[Levels]) -> list[
            dict[str, str]]:
        return not_yet_running(self.replay(done).asking.needed, pending)


@dataclass(frozen=True)
class BothFailures(Generic[R]):
    """The target's search, then its twin's for the other failure where the failing end
    shows it too, or instead."""

    search: Replaying[R]
    twin: Callable[[Failing], Replaying[R]]  # the same search for another failure

    def replay(self, evidence: Sequence[TrialEvidence]) -> R:
        first = self.search.replay_target(evidence)
        other = self.twin(WEDGING if self.search.failing == CORRUPTING else CORRUPTING)
        seen = [t.judged_as(other.failing) for t in evidence]
        if first.concluded is Status.NOT_REPRODUCED:
            return self._instead(first, other, evidence, seen)
        if first.concluded is None or not other.shows(seen):
            return first
        return dataclasses.replace(first, also=other.replay_target(seen).named(other.failing))

    def _instead(self, first: R, other: Replaying[R], evidence: Sequence[TrialEvidence],
                 seen: Sequence[TrialEvidence]) -> R:
        """The target was not reproduced: search the other failure if the failing end clearly
        shows it (its own replay, on the same trials), or say why not."""
        bad, good = self.search.ENDS
        said = f"{first.reason}; {_shown(bad, self.search.bad_trials(evidence))}"
        if not any(t.failures for t in other.bad_trials(seen)):
            return dataclasses.replace(first, reason=said)
        searched = other.replay_target(seen).named(other.failing)
        if searched.concluded is Status.NOT_REPRODUCED:
            return dataclasses.replace(first.followed_by(searched), reason=(
                f"{said}, not worse than {good}: {searched.reason}"))
        # The target stays not reproduced; the other failure is concluded beside it, its culprits
        # its own (both_reason: "corruption not reproduced; wedging follows ...").
        return dataclasses.replace(first, reason=said, also=searched)


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


def _shown(name: str, bad: Sequence[TrialEvidence]) -> str:
    """What the failing end showed of both failures, for a reason."""
    timeouts = sum(t.counts.get("timeout", 0) for t in bad)
    errors = sum(t.counts.get("error", 0) for t in bad)
    logged = sum(t.events.get(kind, 0) for t in bad for kind in WEDGE_LOG_KINDS)
    corrupt = sum(t.judged_as(CORRUPTING).failures for t in bad)
    return (f"{name}: {corrupt} corrupt, {timeouts} timeouts, {errors} errors, {logged} "
            f"wedge log lines in {sum(t.sessions for t in bad)} sessions")
