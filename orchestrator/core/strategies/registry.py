"""The one place a strategy kind is registered: its config class (the campaign file's
``strategy:`` section, parsed as the union of the registered classes, discriminated on
``kind``) and the factory that builds the strategy from a campaign.

A plug-in calls ``register`` with its own classes, touching no module of the project; the
driver, ``bisect verdict`` and ``bisect log`` ask the strategy, never its type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from experiments.campaign import (
    Campaign,
    register_strategy_config,
    unregister_strategy_config,
)
from experiments.optimize_config import OptimizeConfig
from experiments.strategy_config import (
    AdaptiveConfig,
    CommitsConfig,
    FactorialConfig,
    StrategyConfig,
    SweepConfig,
    kind_of,
)
from orchestrator.core.evidence import failing_for
from orchestrator.core.strategies.adaptive import Adaptive
from orchestrator.core.strategies.base import Strategy
from orchestrator.core.strategies.commits import Commits
from orchestrator.core.strategies.factorial import Factorial, fraction
from orchestrator.core.strategies.optimize import Optimize
from orchestrator.core.strategies.sweep import SweepStrategy

C = TypeVar("C", bound=StrategyConfig)
_FACTORIES: dict[str, Callable[[Campaign, Any], Strategy]] = {}


def register(config: type[C], factory: Callable[[Campaign, C], Strategy]) -> None:
    """Make ``config.kind`` a kind of strategy campaign files may name."""
    register_strategy_config(config)
    _FACTORIES[kind_of(config)] = factory


def unregister(kind: str) -> None:
    """Take a plug-in kind out again (a test's); the built-in kinds cannot be."""
    unregister_strategy_config(kind)
    _FACTORIES.pop(kind, None)


def strategy_for(campaign: Campaign) -> Strategy:
    """The campaign's strategy, built by its kind's factory."""
    kind = campaign.strategy.kind
    if kind not in _FACTORIES:
        raise ValueError(f"strategy kind '{kind}' has no registered factory")
    return _FACTORIES[kind](campaign, campaign.strategy)


def _factorial(campaign: Campaign, plan: FactorialConfig) -> Factorial:
    factors = campaign.level_names()
    design = fraction(factors, plan.resolution, campaign.known_bad) \
        if plan.design == "fractional" else None
    return Factorial(factors, plan.repeats, design, alpha=plan.alpha,
                     clean_rate=plan.clean_rate, known_bad=campaign.known_bad,
                     failing=failing_for(plan.target))


def _adaptive(campaign: Campaign, plan: AdaptiveConfig) -> Adaptive:
    assert campaign.known_good is not None and campaign.known_bad is not None  # validated
    return Adaptive(
        campaign.level_names(), campaign.known_good, campaign.known_bad,
        alpha=plan.alpha, clean_rate=plan.clean_rate, min_trials=plan.min_trials,
        failing=failing_for(plan.target), reproduce_trials=plan.reproduce_trials,
        max_trials_per_variant=plan.max_trials_per_variant, max_trials=plan.max_trials,
    )


def _commits(campaign: Campaign, plan: CommitsConfig) -> Commits:
    # The range resolved into commits when the campaign was created (executor/commit_range.py),
    # oldest (known good) first.
    assert campaign.commits is not None and campaign.commits.resolved  # validated, expanded
    return Commits(list(campaign.commits.resolved), sessions=campaign.workload.sessions,
                   alpha=plan.alpha, max_trials=plan.max_trials,
                   reproduce_trials=plan.reproduce_trials, background=campaign.commits.levels,
                   described={sha: (d.subject, d.author)
                              for sha, d in campaign.commits.described.items()},
                   failing=failing_for(plan.target))


def _optimize(campaign: Campaign, plan: OptimizeConfig) -> Optimize:
    grid = None
    if plan.sampler == "grid":  # validated: every knob has a grid
        grid = math.prod(len(f.levels) if f.range is None else len(f.range.grid())
                         for f in campaign.factors)
    return Optimize(plan, [f.name for f in campaign.factors], len(campaign.pools),
                    campaign.known_good, grid=grid)


register(FactorialConfig, _factorial)
register(AdaptiveConfig, _adaptive)
register(CommitsConfig, _commits)
register(SweepConfig, lambda campaign, plan: SweepStrategy(plan))
register(OptimizeConfig, _optimize)
