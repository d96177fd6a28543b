"""The sweep file: a regression sweep's nodes, pools and factors (as a campaign file has them), a
few named variants (the production configuration and its risky neighbours), the workload, and
what counts as a regression.

Validated with the campaign file's own rules: the campaign a run becomes (``sweep_campaign``) is
checked by the campaign's checks, and every error names the sweep file's line and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from experiments.campaign import (
    Argv,
    Campaign,
    Cost,
    Factor,
    Generators,
    LevelName,
    Name,
    Node,
    Pool,
    Workload,
)
from experiments.campaign_checks import check_references, shared_tree
from experiments.campaign_load import error_line, format_problem, load_file
from experiments.strategy_config import NamedVariant, SweepConfig, Thresholds
from experiments.workload.probe import ProbeSpec
from experiments.workload.spec import WorkloadSpec
from experiments.yaml_lines import LoadedYaml, Path_

DAY_S = 86_400.0
BUILD = "build"  # the factor a run adds to put the baseline's commit back (confirm_build)


class SweepError(ValueError):
    """A sweep file that cannot be used; the message names file, line and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    """The git tree the pools' services run from: its commit is a node fact of every run; a
    suspect is confirmed against the baseline's commit checked out there (and ``build`` run),
    and the hunt bisects between the two."""

    tree: str = Field(pattern=r"^/")
    build: Argv = []
    build_timeout_s: float = Field(default=1800.0, gt=0, le=DAY_S, allow_inf_nan=False)
    services: list[str] | None = None  # the services running from the tree (default: all)


class Trials(_Strict):
    # per variant before it is compared: with two, a per-trial figure has one degree of freedom
    # for its spread, and no throughput change short of tenfold is significant
    min: int = Field(default=3, ge=2, le=1000)
    # per variant: UNKNOWN after that is reported. 12, not 6: under the noise of a real fleet,
    # 6 trials left 15-59% of clean runs undecided (BENCHMARKS.md, "Sweeps", issue 27)
    max: int = Field(default=12, ge=2, le=10_000)
    confirm: int = Field(default=3, ge=2, le=1000)  # fresh trials of a suspect


class Hunt(_Strict):
    """Opt-in: a confirmed corruption or wedge regression with a new commit since the baseline
    starts `bisect commits` between the two on the same pool."""

    max_trials: int = Field(default=40, ge=1, le=100_000)


def _hunt(value: Any) -> Any:
    if value is True:
        return {}
    return None if value is False else value


class Sweep(_Strict):
    name: Name
    nodes: list[Node] = Field(min_length=1)
    pools: list[Pool] = Field(min_length=1)
    factors: list[Factor] = []
    # name -> {factor: level}; in the file's order; the production configuration first unless
    # `production` names another
    variants: dict[Name, dict[str, LevelName]] = Field(min_length=1)
    production: Name | None = None
    workload: Workload = WorkloadSpec()
    cost: Cost = Cost()
    generators: Generators | None = None
    source: Source | None = None
    thresholds: Thresholds = Thresholds()
    trials: Trials = Trials()
    alpha: float = Field(default=0.01, gt=0, lt=0.5, allow_inf_nan=False)
    hunt: Annotated[Hunt | None, Field(default=None)] = None

    @field_validator("hunt", mode="before")
    @classmethod
    def _hunt_flag(cls, value: Any) -> Any:
        return _hunt(value)

    @property
    def production_name(self) -> str:
        return self.production or next(iter(self.variants))

    def named_variants(self) -> list[NamedVariant]:
        """Production first, then the others in the file's order."""
        first = self.production_name
        ordered = [first, *(name for name in self.variants if name != first)]
        return [NamedVariant(name=name, levels=dict(self.variants[name])) for name in ordered]


def sweep_campaign(sweep: Sweep, strategy: SweepConfig | None = None,
                   factors: list[Factor] | None = None) -> Campaign:
    """The campaign one run of ``sweep`` is: its nodes, pools, factors (``factors``: with the
    run's own, such as ``build``), workload, and the sweep strategy (``strategy``: with the
    baseline's trials; default: none yet)."""
    config = strategy or SweepConfig(
        variants=sweep.named_variants(), production=sweep.production_name,
        thresholds=sweep.thresholds, min_trials=sweep.trials.min,
        max_trials=sweep.trials.max, confirm_trials=sweep.trials.confirm, alpha=sweep.alpha,
        source_tree=sweep.source.tree if sweep.source else None,
        source_services=sweep.source.services if sweep.source else None)
    return Campaign(
        name=f"sweep {sweep.name}", nodes=sweep.nodes, pools=sweep.pools,
        factors=sweep.factors if factors is None else factors, workload=sweep.workload,
        strategy=config, cost=sweep.cost, generators=sweep.generators,
        known_good=dict(sweep.variants[sweep.production_name]))


def _sweep_path(path: Path_, sweep: Sweep) -> Path_:
    """A campaign check's path as the sweep file spells it: the strategy's variants are the
    sweep's `variants` mapping, by name."""
    if path[:2] == ("strategy", "variants") and len(path) > 2 and isinstance(path[2], int):
        name = sweep.named_variants()[path[2]].name
        rest = path[4:] if path[3:4] == ("levels",) else path[3:]
        return ("variants", name, *rest)
    if path[:1] == ("strategy",):
        return path[1:]
    if path[:1] == ("known_good",):
        return ("variants", sweep.production_name, *path[1:])
    return path


def _problems(sweep: Sweep) -> list[tuple[Path_, str]]:
    problems: list[tuple[Path_, str]] = []
    if sweep.production is not None and sweep.production not in sweep.variants:
        problems.append((("production",), f"no variant '{sweep.production}'"))
        return problems
    if any(f.name == BUILD for f in sweep.factors) and sweep.source is not None:
        problems.append((("factors",), f"`{BUILD}` is the factor a run adds to put the "
                                       "baseline's commit back: name yours otherwise"))
    seen: dict[tuple[tuple[str, str], ...], str] = {}
    for name, levels in sweep.variants.items():  # a trial must say which variant it was
        key = tuple(sorted(levels.items()))
        if key in seen:
            problems.append((("variants", name), f"the same levels as variant '{seen[key]}'"))
        seen.setdefault(key, name)
    services = {s.name for pool in sweep.pools for s in pool.services}
    if sweep.source is not None:
        problems += [(("source", "services", index), f"unknown service '{name}'")
                     for index, name in enumerate(sweep.source.services or [])
                     if name not in services]
        from deploy.safe_words import word_error

        # a moved build puts the baseline's commit back in the tree for a control's trial,
        # while another pool may run a trial from that tree
        shared = shared_tree(sweep_campaign(sweep), sweep.source.tree, sweep.source.services,
                             "the baseline's commit (a control of a build that moved)")
        if error := word_error(sweep.source.tree) or shared:
            problems.append((("source", "tree"), error))
        problems += [(("source", "build", index), error)
                     for index, word in enumerate(sweep.source.build)
                     if (error := word_error(word))]
    if sweep.hunt is not None and sweep.source is None:
        problems.append((("hunt",), "a hunt bisects the source tree's commits: it needs "
                                    "`source:` (tree, build)"))
    if sweep.trials.max < sweep.trials.min:
        problems.append((("trials", "max"), f"below trials.min ({sweep.trials.min})"))
    if isinstance(sweep.workload, ProbeSpec) and (
            sweep.thresholds.wedging is not None or sweep.thresholds.throughput is not None
            or sweep.thresholds.p99_latency is not None):
        problems.append((("thresholds",), "a probe judges by its exit status: it measures no "
                                          "wedging, throughput or latency (set them to null)"))
    problems += [(_sweep_path(path, sweep), message)
                 for path, message in check_references(sweep_campaign(sweep))]
    return problems


def parse_sweep(loaded: LoadedYaml) -> Sweep:
    if not isinstance(loaded.data, dict):
        found = "an empty document" if loaded.data is None else type(loaded.data).__name__
        raise SweepError(f"{loaded.where(())}: a sweep file must be a YAML mapping "
                         f"(found {found})")
    try:
        sweep = Sweep.model_validate(loaded.data)
    except ValidationError as exc:
        raise SweepError("\n".join(format_problem(loaded, *error_line(err))
                                   for err in exc.errors())) from None
    if problems := _problems(sweep):
        raise SweepError("\n".join(format_problem(loaded, path, message)
                                   for path, message in problems))
    return sweep


def load_sweep(path: str | Path) -> Sweep:
    return load_file(path, parse_sweep, SweepError)


def sweep_schema() -> dict[str, Any]:
    return Sweep.model_json_schema()
