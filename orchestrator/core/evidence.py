"""Evidence as the pure core sees it: finished trials reduced to plain values.

Built from the store by the runner; strategies and the verdict never see ORM rows or Ray.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from experiments.outcomes import CORRUPTION, INFRA

Levels = Mapping[str, str]


def variant_key(levels: Levels) -> str:
    """Canonical name of a variant: ``a=x,b=y`` in factor-name order."""
    return ",".join(f"{name}={levels[name]}" for name in sorted(levels))


@dataclass(frozen=True)
class TrialEvidence:
    levels: Levels
    counts: Mapping[str, int]
    restarts: int = 0
    wall_s: float = 0.0
    workload_s: float = 0.0
    stopped_early: bool = False
    events: Mapping[str, int] = field(default_factory=dict)  # service log events by kind
    planned: int = 0  # sessions the workload planned (0: not known)

    @property
    def sessions(self) -> int:
        return sum(self.counts.values())

    @property
    def corrupted(self) -> int:
        return sum(self.counts.get(outcome.value, 0) for outcome in CORRUPTION)

    @property
    def infra(self) -> int:
        return sum(self.counts.get(outcome.value, 0) for outcome in INFRA)

    @property
    def judged(self) -> int:
        """Sessions that reached a verdict of their own: errors and timeouts excluded."""
        return self.sessions - self.infra

    @property
    def unfinished(self) -> int:
        """Planned sessions a stop ended before they finished; they are not stored."""
        return max(0, self.planned - self.sessions) if self.stopped_early else 0

    @property
    def rate(self) -> float:
        return self.corrupted / self.judged if self.judged else 0.0

    def as_wedging(self) -> TrialEvidence:
        """The same trial seen for wedging: errors and timeouts are the failures, every session
        is judged. The corruption machinery (cells, tests, attribution) then applies as is."""
        return dataclasses.replace(
            self, counts={"leak": self.infra, "ok": self.sessions - self.infra})


@dataclass(frozen=True)
class Cell:
    """All trials of one variant, pooled."""

    levels: Levels
    trials: tuple[TrialEvidence, ...] = field(default_factory=tuple)

    @property
    def sessions(self) -> int:
        return sum(t.sessions for t in self.trials)

    @property
    def corrupted(self) -> int:
        return sum(t.corrupted for t in self.trials)

    @property
    def judged(self) -> int:
        return sum(t.judged for t in self.trials)

    @property
    def infra(self) -> int:
        return sum(t.infra for t in self.trials)

    @property
    def rate(self) -> float:
        return self.corrupted / self.judged if self.judged else 0.0

    def events(self, kinds: Iterable[str]) -> dict[str, int]:
        """The trials' log events of these kinds, summed; kinds never seen are left out."""
        totals = {kind: sum(t.events.get(kind, 0) for t in self.trials) for kind in kinds}
        return {kind: n for kind, n in totals.items() if n}

    def matches(self, condition: Levels) -> bool:
        return all(self.levels.get(name) == level for name, level in condition.items())


def cells(evidence: Iterable[TrialEvidence]) -> list[Cell]:
    grouped: dict[str, list[TrialEvidence]] = {}
    for trial in evidence:
        grouped.setdefault(variant_key(trial.levels), []).append(trial)
    return [Cell(dict(trials[0].levels), tuple(trials)) for trials in grouped.values()]


def pooled(group: Sequence[Cell]) -> tuple[int, int]:
    """(corrupted, judged) over a group of cells."""
    return sum(c.corrupted for c in group), sum(c.judged for c in group)
