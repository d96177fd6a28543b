"""What a strategy's conclusion carries besides its status and culprits, as values: the
decision trail, one ``TrailEntry`` a step (`bisect log` prints ``line()``), and the
``Finding`` of its kind (a commit search's change point, a sweep's comparisons, a search's
ranking, a factorial design), each saying its own JSON. Pure: no I/O.

Every entry type is a frozen dataclass with a ``phase``, so the other failure's steps are named
by ``dataclasses.replace`` ("wedging: flip f3") where a strategy concludes both failures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class TrailEntry(Protocol):
    """One step of the decision trail."""

    @property
    def phase(self) -> str:
        """What the step tested ("reproduce", "confirm", "posterior"...)."""
        ...

    def to_json(self) -> dict[str, Any]:
        """The step in the verdict JSON's ``log`` (and `bisect log --json`)."""
        ...

    def line(self) -> str:
        """The step as `bisect log` prints it after its number: readable at any width."""
        ...


class Finding(Protocol):
    """What a kind of strategy found beyond culprits; the verdict JSON has it under ``kind``."""

    @property
    def kind(self) -> str:
        ...

    def to_json(self) -> dict[str, Any]:
        ...


def finding_json(finding: Finding | None, kind: str) -> dict[str, Any] | None:
    """The finding's JSON where it is of ``kind`` (what a reader of one kind of campaign reads:
    a hunt the commit search's, a sweep run its comparisons), else None."""
    return finding.to_json() if finding is not None and finding.kind == kind else None


def variant_words(levels: Mapping[str, str]) -> str:
    """A variant as a trail line names it: ``f0=a,f1=b``."""
    return ",".join(f"{f}={lvl}" for f, lvl in levels.items())


def culprit_words(levels: Mapping[str, str]) -> str:
    """A set of levels as a verdict names it: ``f0=b AND f3=b``."""
    return " AND ".join(f"{f}={lvl}" for f, lvl in levels.items())


def p_words(value: float | None) -> str:
    return "–" if value is None else f"{value:.2g}"  # None: no test was made at this step


def at_words(level: float | None) -> str:
    return "" if level is None else f" (at ≤{level:.2g})"  # the threshold it was compared to
