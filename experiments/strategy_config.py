"""Each strategy's section of the campaign file: one pydantic class per `kind`.

The classes are registered in ``CONFIGS`` (kind -> class); the campaign's ``strategy`` field is
the union of the registered classes, discriminated on ``kind`` (a plug-in adds its class with
``experiments.campaign.register_strategy_config``). Each class checks what its kind needs of the
rest of the campaign (``problems``), so the loader names every problem's line.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from experiments.yaml_lines import Path_

if TYPE_CHECKING:
    from experiments.campaign import Campaign

Problems = list[tuple[Path_, str]]
# The fractional designs bisect knows are tabulated for up to this many two-level factors
# (orchestrator/core/strategies/design.py; a test keeps the two equal).
FRACTIONAL_MAX_FACTORS = 11
# A full factorial runs every variant: beyond this a campaign never ends (1,000 two-level factors
# would be 2^1000), and a fraction or the adaptive strategy is the way.
FULL_MAX_VARIANTS = 4096


class StrategyConfig(BaseModel):
    """What every kind shares. A subclass sets ``kind`` to a Literal whose default is its name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    # What counts as failing: corrupted sessions, or wedging (errors and timeouts: a server that
    # hangs or refuses under load, as 75 of 80 sessions did in the investigation).
    target: Literal["corruption", "wedging"] = "corruption"
    alpha: float = Field(default=0.01, gt=0, lt=0.5, allow_inf_nan=False)
    needs_factors: ClassVar[bool] = True  # false: the strategy makes its own factor
    numeric_factors: ClassVar[bool] = False  # true: factors may be numeric ranges (knobs)

    def problems(self, campaign: Campaign, levels: dict[str, list[str]]) -> Problems:
        """What this kind needs of the rest of the campaign; ``levels``: each factor's."""
        return []


class FactorialConfig(StrategyConfig):
    """Every variant of a design, ``repeats`` times."""

    kind: Literal["factorial"] = "factorial"
    # below this upper bound a variant is clean
    clean_rate: float = Field(default=0.02, ge=0, lt=1, allow_inf_nan=False)
    repeats: int = Field(default=2, ge=1, le=1000)  # trials per variant
    # every variant, or a regular two-level fraction of at least this resolution (factors of
    # more levels crossed in full with it); at V, main effects and two-factor interactions are
    # aliased only with interactions of three or more factors.
    design: Literal["full", "fractional"] = "full"
    resolution: int = Field(default=5, ge=4, le=11)

    def problems(self, campaign: Campaign, levels: dict[str, list[str]]) -> Problems:
        """A fraction needs a table entry; a full design a number of variants that ends."""
        if self.design == "full":
            if self.resolution != type(self).model_fields["resolution"].default:
                return [(("strategy", "resolution"), "applies to `design: fractional` only")]
            variants = math.prod(len(names) for names in levels.values())
            if variants > FULL_MAX_VARIANTS:
                return [(("factors",), f"a full factorial of these {len(levels)} factors has "
                                       f"{variants:,} variants (at most {FULL_MAX_VARIANTS:,}): "
                                       f"use `design: fractional`, or the adaptive strategy "
                                       f"(known_good and known_bad)")]
            return []
        two_level = [name for name, names in levels.items() if len(names) == 2]
        if len(two_level) > FRACTIONAL_MAX_FACTORS:
            return [(("strategy", "design"), f"{len(two_level)} two-level factors: fractional "
                                             f"designs are tabulated for up to "
                                             f"{FRACTIONAL_MAX_FACTORS}")]
        return []


class AdaptiveConfig(StrategyConfig):
    """Reproduce known-bad against known-good, then test flips of it sequentially."""

    kind: Literal["adaptive"] = "adaptive"
    clean_rate: float = Field(default=0.02, ge=0, lt=1, allow_inf_nan=False)
    min_trials: int = Field(default=1, ge=1, le=1000)  # trials before a judgement
    reproduce_trials: int = Field(default=2, ge=1, le=1000)  # of known-good and -bad
    # then unresolved; twice it while the variant's test leans one way (sequential.leans)
    max_trials_per_variant: int = Field(default=6, ge=1, le=10_000)
    max_trials: int = Field(default=120, ge=1, le=100_000)  # the campaign's budget

    def problems(self, campaign: Campaign, levels: dict[str, list[str]]) -> Problems:
        problems: Problems = []
        for field in ("known_good", "known_bad"):
            missing = [name for name in levels if name not in (getattr(campaign, field) or {})]
            if missing:
                problems.append(((field,), f"the adaptive strategy needs a level for every "
                                           f"factor (missing: {', '.join(missing)})"))
        if campaign.known_good is not None and campaign.known_good == campaign.known_bad:
            problems.append((("known_bad",), "known_bad is the same variant as known_good"))
        return problems


class CommitsConfig(StrategyConfig):
    """A change-point search over the commit range of the `commits:` section."""

    kind: Literal["commits"] = "commits"
    reproduce_trials: int = Field(default=2, ge=1, le=1000)  # of the good and the bad commit
    max_trials: int = Field(default=120, ge=1, le=100_000)  # the campaign's budget
    needs_factors: ClassVar[bool] = False  # the range becomes the factor `commit`

    def problems(self, campaign: Campaign, levels: dict[str, list[str]]) -> Problems:
        commits = campaign.commits
        if commits is None:
            return [(("strategy", "kind"), "the commits strategy needs a `commits:` section "
                                           "(tree, good, bad)")]
        problems: Problems = []
        if "commit" in levels:
            problems.append((("factors",), "`commit` is the factor the commit range becomes: "
                                           "name yours otherwise"))
        missing = [name for name in levels if name not in commits.levels]
        if missing:
            problems.append((("commits", "levels"), f"hold every other factor at one level "
                                                    f"(missing: {', '.join(missing)})"))
        for name, level in commits.levels.items():
            if name not in levels or level not in levels[name]:
                problems.append((("commits", "levels", name), f"no factor level {name}={level}"))
        services = {s.name for pool in campaign.pools for s in pool.services}
        for index, name in enumerate(commits.services or []):
            if name not in services:
                problems.append((("commits", "services", index), f"unknown service '{name}'"))
        return problems


def kind_of(config: type[StrategyConfig]) -> str:
    kind = config.model_fields["kind"].default
    if not isinstance(kind, str):
        raise TypeError(f"{config.__name__}.kind needs its kind as default (a Literal)")
    return kind


CONFIGS: dict[str, type[StrategyConfig]] = {
    kind_of(c): c for c in (AdaptiveConfig, FactorialConfig, CommitsConfig)}
# SweepConfig, defined below with its parts, joins CONFIGS there.


def inferred_kind(data: dict[str, Any]) -> str:
    """Left out, the kind follows the file: commits with a `commits:` section, adaptive with
    both known_good and known_bad, factorial otherwise."""
    if data.get("commits") is not None:
        return "commits"
    return "adaptive" if data.get("known_good") and data.get("known_bad") else "factorial"


def with_kind(data: dict[str, Any]) -> dict[str, Any]:
    """The campaign's raw data with its strategy's kind spelled out, and the fields of other
    kinds left at their defaults dropped (a campaign stored before the kinds had their own
    classes carries every field)."""
    strategy = data.get("strategy", {})
    if not isinstance(strategy, dict):
        return data  # the union names what is wrong with it
    kind = strategy.get("kind") or inferred_kind(data)
    own = CONFIGS.get(kind)
    if own is None:
        return {**data, "strategy": {**strategy, "kind": kind}}
    kept = {name: value for name, value in strategy.items()
            if name in own.model_fields or not _default_elsewhere(name, value)}
    return {**data, "strategy": {**kept, "kind": kind}}


def _default_elsewhere(name: str, value: Any) -> bool:
    fields = [c.model_fields[name] for c in CONFIGS.values() if name in c.model_fields]
    return bool(fields) and all(f.default == value for f in fields)


_SAID = {"design": "a design"}  # how a field is named in "only the ... strategy has ..."


def foreign_field(kind: str, name: str) -> str | None:
    """Why ``name`` is refused in a strategy of ``kind``, when another kind has that field."""
    owners = [k for k, c in CONFIGS.items() if name in c.model_fields]
    if not owners or kind not in CONFIGS:
        return None
    return (f"only the {' and '.join(owners)} strategy has {_SAID.get(name, f'`{name}`')} "
            f"(this campaign's strategy is {kind})")


class Thresholds(BaseModel):
    """The smallest change a sweep alerts on, per metric (None: the metric is not watched).
    A difference must be significant AND at least this large (Perfherder's rule), so a tiny
    but certain drift on a quiet machine raises no alert."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    corruption: float | None = Field(default=0.05, gt=0, le=1, allow_inf_nan=False)  # points
    wedging: float | None = Field(default=0.05, gt=0, le=1, allow_inf_nan=False)  # points
    throughput: float | None = Field(default=0.15, gt=0, lt=1, allow_inf_nan=False)  # drop
    p99_latency: float | None = Field(default=0.25, gt=0, le=100, allow_inf_nan=False)  # rise


class NamedVariant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    levels: dict[str, str]


class BaselineTrial(BaseModel):
    """One trial of the baseline run, as a sweep compares with it: its session counts and the
    two figures of its performance (copied from the baseline's stored trials when the run is
    created, so the run's conclusion is recomputed from its own stored spec)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variant: str
    counts: dict[str, int]
    output_throughput: float | None = None  # output tokens per second
    p99_e2e_ms: float | None = None


class SweepConfig(StrategyConfig):
    """A run of a regression sweep (`bisect sweep`): each named variant against the baseline
    run's trials of it, confirmed on fresh trials before a difference is a regression."""

    kind: Literal["sweep"] = "sweep"
    needs_factors: ClassVar[bool] = False  # a sweep may watch the production build alone
    variants: list[NamedVariant] = Field(min_length=1)
    production: str
    thresholds: Thresholds = Thresholds()
    min_trials: int = Field(default=3, ge=2, le=1000)  # per variant, before a comparison
    max_trials: int = Field(default=6, ge=2, le=10_000)  # per variant: then UNKNOWN stays
    confirm_trials: int = Field(default=2, ge=2, le=1000)  # fresh trials of a suspect
    baseline: list[BaselineTrial] = []  # empty: the first run, nothing to compare with
    baseline_run: int | None = None
    # True: the campaign has a factor `build` (current | baseline: the baseline's commit checked
    # out), and a suspect is confirmed against fresh trials of the baseline's build
    confirm_build: bool = False
    # What changed since the baseline that the run cannot put back beside its trials (a node
    # fact, a setting of the sweep file, a variant's levels), as the run's words say it: a
    # performance change is then compared with the baseline run's trials, with no control.
    # Empty, with the build not moved: nothing changed, and such a change is the machine's drift
    unrestorable: list[str] = []
    # The sweep's `source:` tree, so that every trial's node facts carry its commit
    source_tree: str | None = None
    source_services: list[str] | None = None

    def problems(self, campaign: Campaign, levels: dict[str, list[str]]) -> Problems:
        problems: Problems = []
        names = [v.name for v in self.variants]
        if self.production not in names:
            problems.append((("strategy", "production"), f"no variant '{self.production}'"))
        if self.max_trials < self.min_trials:
            problems.append((("strategy", "max_trials"), "below min_trials"))
        for index, variant in enumerate(self.variants):
            if variant.name in names[:index]:
                problems.append((("strategy", "variants", index, "name"),
                                 f"duplicate variant name '{variant.name}'"))
            wanted = set(levels) - ({"build"} if self.confirm_build else set())
            if missing := sorted(wanted - set(variant.levels)):
                problems.append((("strategy", "variants", index, "levels"),
                                 f"no level for {', '.join(missing)}"))
            for factor, level in variant.levels.items():
                if level not in levels.get(factor, []):
                    problems.append((("strategy", "variants", index, "levels", factor),
                                     f"no factor level {factor}={level}"))
        if self.confirm_build and sorted(levels.get("build", [])) != ["baseline", "current"]:
            problems.append((("factors",), "confirm_build needs the factor `build` with the "
                                           "levels current and baseline"))
        return problems


CONFIGS[kind_of(SweepConfig)] = SweepConfig
