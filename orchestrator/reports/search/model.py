"""The report model of a search (`bisect optimize`): its answer as plain frozen values, built
from the verdict's ``optimize`` section (``search.build``) and rendered by every format.

``Report.optimize`` holds one ``Search``; ``search_from_json`` reads it back from a report
saved with ``--format json``. Pure data: no store, no templates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Interval = tuple[float, float]


@dataclass(frozen=True)
class Objective:
    """One objective of one configuration: the mean over its trials and its (1 - alpha) t
    interval (None with one trial: one measurement has no spread)."""

    metric: str
    direction: str  # "maximize" | "minimize"
    unit: str
    mean: float | None
    ci: Interval | None
    values: list[float]


@dataclass(frozen=True)
class Bound:
    """A failure's sessions of one configuration against its limit: safe needs the one-sided
    exact upper bound below the limit (``margin`` = limit - upper > 0)."""

    failed: int
    judged: int
    rate: float | None
    upper: float
    lower: float
    limit: float
    margin: float


@dataclass(frozen=True)
class SloMargin:
    metric: str
    value: float | None  # the mean over its trials of each trial's p99, ms
    limit: float
    margin: float | None  # limit - value; None: not measured


@dataclass(frozen=True)
class Configuration:
    """One configuration the search measured, with everything its trials say."""

    levels: dict[str, str]  # in the campaign's order of factors
    key: str
    trials: int
    objectives: list[Objective]
    corruption: Bound
    wedging: Bound
    slo: list[SloMargin]
    stopped_early: int
    safe: bool
    why: list[str]  # why it is not proven safe; [] when it is
    confirmed: bool = False  # safe on the trials confirmation asks for
    pareto: bool = False  # on the confirmed Pareto front (two objectives or more)
    role: str = ""  # "production" | "known-good" | "": what the search measured first
    best: bool = False  # the search's answer


@dataclass(frozen=True)
class Undeployable:
    """A configuration skipped: each attempt failed before it could be measured."""

    levels: dict[str, str]
    attempts: int
    error: str  # raw: every renderer escapes it
    why: str = ""  # which step failed, and the error's first line (Unresolvable.why)


@dataclass(frozen=True)
class Limits:
    corruption: float
    wedging: float
    slo: dict[str, float]
    alpha: float  # the bounds are one-sided at confidence 1 - alpha


@dataclass(frozen=True)
class SearchTrials:
    total: int
    search: int
    confirmation: int
    stopped_early: int
    final: int = 0  # the final phase's pairs of production and the answer (optimize_final.py)


@dataclass(frozen=True)
class Difference:
    """One objective of the answer against production's: the difference of the means (the
    answer's less production's) and the one-sided p-value that the answer is better (None:
    fewer than 2 trials on a side, or 2 pairs). ``pairs`` None: a Welch test on all trials, with
    its two-sided (1 - alpha) interval; else a paired t-test on the final phase's pairs, with the
    ratio of the answer's geometric mean to production's and its (1 - 2 alpha) interval."""

    metric: str
    direction: str
    unit: str
    difference: float | None
    ci: Interval | None
    p_value: float | None
    trials: list[int]  # the answer's, production's
    shown_better: bool
    shown_worse: bool
    pairs: int | None = None
    ratio: float | None = None
    ratio_ci: Interval | None = None


@dataclass(frozen=True)
class VersusProduction:
    """The answer against production measured in the same run (optimize_versus.py's
    ``VersusProduction``): ``shown_better`` False means "no better than production"."""

    production: dict[str, str] | None  # what it was compared with (production or known-good)
    measured: bool
    trials: int | None  # production's
    is_production: bool  # production itself is the answer
    shown_better: bool
    why: str  # why it is not shown better; "" when it is
    objectives: list[Difference]

    @property
    def first(self) -> Difference | None:
        return self.objectives[0] if self.objectives else None


def versus_from_json(data: dict[str, Any] | None) -> VersusProduction | None:
    if data is None:
        return None
    return VersusProduction(
        production=None if data["production"] is None else dict(data["production"]),
        measured=data["measured"], trials=data["trials"], is_production=data["is_production"],
        shown_better=data["shown_better"], why=data["why"],
        objectives=[Difference(metric=d["metric"], direction=d["direction"], unit=d["unit"],
                               difference=d["difference"], ci=_interval(d["ci"]),
                               p_value=d["p_value"], trials=list(d["trials"]),
                               shown_better=d["shown_better"], shown_worse=d["shown_worse"],
                               pairs=d.get("pairs"), ratio=d.get("ratio"),
                               ratio_ci=_interval(d.get("ratio_ci")))
                    for d in data["objectives"]])


@dataclass(frozen=True)
class Search:
    """A search's answer: the safe configurations best first, the Pareto front, the unsafe
    ones that looked fast (fastest first) with why, those measured too little to tell, and
    those skipped (their trials failed before they were measured)."""

    objectives: list[str]
    limits: Limits
    sampler: str
    best: dict[str, str] | None
    production: dict[str, str] | None
    ranked: list[Configuration]
    pareto: list[Configuration]
    rejected: list[Configuration]
    unproven: list[Configuration]
    undeployable: list[Undeployable]
    trials: SearchTrials
    factors: list[str] = field(default_factory=list)  # the campaign's, in its order
    versus_production: VersusProduction | None = None  # the answer against production

    @property
    def winner(self) -> Configuration | None:
        return next((c for c in self.ranked if c.best), None)

    def named(self, levels: dict[str, str] | None) -> Configuration | None:
        """The measured configuration with exactly these levels, wherever it was ranked."""
        if not levels:
            return None
        return next((c for c in [*self.ranked, *self.rejected, *self.unproven]
                     if c.levels == levels), None)


def _interval(value: Any) -> Interval | None:
    return None if value is None else (value[0], value[1])


def configuration_from_json(data: dict[str, Any]) -> Configuration:
    return Configuration(
        levels=dict(data["levels"]), key=data["key"], trials=data["trials"],
        objectives=[Objective(metric=o["metric"], direction=o["direction"], unit=o["unit"],
                              mean=o["mean"], ci=_interval(o["ci"]), values=list(o["values"]))
                    for o in data["objectives"]],
        corruption=Bound(**data["corruption"]), wedging=Bound(**data["wedging"]),
        slo=[SloMargin(**s) for s in data["slo"]], stopped_early=data["stopped_early"],
        safe=data["safe"], why=list(data["why"]), confirmed=data.get("confirmed", False),
        pareto=data.get("pareto", False), role=data.get("role", ""),
        best=data.get("best", False))


def search_from_json(data: dict[str, Any] | None) -> Search | None:
    """A ``Search`` back from ``Report.to_json``'s ``optimize`` (None: not a search)."""
    if data is None:
        return None
    rows = {name: [configuration_from_json(c) for c in data[name]]
            for name in ("ranked", "pareto", "rejected", "unproven")}
    limits = data["limits"]
    return Search(
        objectives=list(data["objectives"]),
        limits=Limits(corruption=limits["corruption"], wedging=limits["wedging"],
                      slo=dict(limits["slo"]), alpha=limits["alpha"]),
        sampler=data["sampler"], best=data["best"], production=data["production"],
        undeployable=[Undeployable(levels=dict(u["levels"]), attempts=u["attempts"],
                                   error=u["error"], why=u.get("why", ""))
                      for u in data["undeployable"]],
        trials=SearchTrials(**data["trials"]), factors=list(data.get("factors") or []),
        versus_production=versus_from_json(data.get("versus_production")), **rows)
