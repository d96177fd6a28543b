"""The `optimize` strategy's section of the campaign file: what to make fast, what must stay
clean, and how the search spends its trials (`bisect optimize`, orchestrator/search/).

A configuration is feasible only when its evidence proves it clean: the upper confidence
bound of its corruption rate is below ``max_corruption`` (0 corrupt of 20 sessions is not
proven clean: its 95% bound is 14%), its wedging's below ``max_wedging``, and its mean p99
latencies within the SLOs.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from experiments.strategy_config import Problems, StrategyConfig

if TYPE_CHECKING:
    from experiments.campaign import Campaign

# What an objective may be, and which way is better: a trial's figures (the names of sglang
# bench_serving), per second of the workload or the p99 of a latency in milliseconds.
MAXIMIZED = ("output_throughput", "request_throughput", "goodput")
MINIMIZED = ("ttft_p99_ms", "itl_p99_ms", "tpot_p99_ms", "e2e_p99_ms")
Metric = Literal["output_throughput", "request_throughput", "goodput",
                 "ttft_p99_ms", "itl_p99_ms", "tpot_p99_ms", "e2e_p99_ms"]
UNITS = {"output_throughput": "tok/s", "request_throughput": "req/s", "goodput": "sessions/s"}


def _number_to_name(value: Any) -> Any:
    """A level written as a number (`max_running: 64`) is the level named by it."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


LevelName = Annotated[str, BeforeValidator(_number_to_name)]


def direction(metric: str) -> Literal["maximize", "minimize"]:
    return "maximize" if metric in MAXIMIZED else "minimize"


class Slo(BaseModel):
    """Latency limits a configuration must keep (the mean over its trials of each trial's
    p99); None: no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_p99_ms: float | None = Field(default=None, gt=0, le=3.6e6, allow_inf_nan=False)
    itl_p99_ms: float | None = Field(default=None, gt=0, le=3.6e6, allow_inf_nan=False)
    tpot_p99_ms: float | None = Field(default=None, gt=0, le=3.6e6, allow_inf_nan=False)
    e2e_p99_ms: float | None = Field(default=None, gt=0, le=3.6e6, allow_inf_nan=False)

    def limits(self) -> dict[str, float]:
        return {name: value for name, value in self.model_dump().items() if value is not None}


class OptimizeConfig(StrategyConfig):
    """Search the factors (switches and numeric knobs) for the fastest feasible configuration:
    the production configuration and known-good first, then the sampler's picks, then the best
    candidates re-run until each has ``confirm_trials`` trials."""

    kind: Literal["optimize"] = "optimize"
    numeric_factors: ClassVar[bool] = True
    alpha: float = Field(default=0.05, gt=0, lt=0.5, allow_inf_nan=False)  # of every bound
    # one: the best; two: the Pareto front (Optuna's multi-objective search)
    objectives: list[Metric] = Field(default=["output_throughput"], min_length=1, max_length=2)
    max_corruption: float = Field(default=0.02, gt=0, lt=1, allow_inf_nan=False)
    max_wedging: float = Field(default=0.02, gt=0, lt=1, allow_inf_nan=False)
    slo: Slo = Slo()
    sampler: Literal["tpe", "gp", "random", "grid"] = "tpe"
    trials: int = Field(default=30, ge=1, le=10_000)  # the search's trials, seeds included
    startup_trials: int = Field(default=8, ge=1, le=10_000)  # random picks before TPE or GP
    confirm_top: int = Field(default=3, ge=1, le=100)  # candidates re-run before they are named
    confirm_trials: int = Field(default=3, ge=1, le=100)  # trials a named candidate has
    production: dict[str, LevelName] | None = None  # the configuration running now: measured first
    seed: int = Field(default=0, ge=0, le=2**32 - 1)  # of the sampler

    def problems(self, campaign: Campaign, levels: dict[str, list[str]]) -> Problems:
        from experiments.campaign_checks import describe_levels

        problems: Problems = []
        if len(set(self.objectives)) != len(self.objectives):
            problems.append((("strategy", "objectives"), "the same objective twice"))
        for factor_name, level in (self.production or {}).items():
            if factor_name not in levels:
                problems.append((("strategy", "production", factor_name),
                                 f"unknown factor '{factor_name}'"))
            elif not campaign.factor(factor_name).has_level(level):
                problems.append((("strategy", "production", factor_name),
                                 f"factor '{factor_name}' has no level '{level}' (levels: "
                                 f"{describe_levels(campaign.factor(factor_name))})"))
        for field, seed in (("strategy.production", self.production),
                            ("known_good", campaign.known_good)):
            missing = [name for name in levels if name not in (seed or {})]
            if seed is not None and missing:
                path = tuple(field.split("."))
                problems.append((path, f"a configuration the search starts from needs a "
                                       f"level for every factor (missing: {', '.join(missing)})"))
        if self.sampler == "grid":
            for f, factor in enumerate(campaign.factors):
                if factor.range is not None and not factor.range.grid():
                    problems.append((("factors", f, "range"),
                                     "a grid needs a `step` (or an integer range)"))
        if self.sampler == "gp" and importlib.util.find_spec("torch") is None:
            problems.append((("strategy", "sampler"), "gp needs PyTorch (`pip install torch`); "
                                                      "tpe does not"))
        if campaign.known_bad is not None:
            problems.append((("known_bad",), "the search measures every configuration itself: "
                                             "leave known_bad out"))
        return problems
