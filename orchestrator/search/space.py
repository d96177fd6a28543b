"""A campaign's factors as Optuna's search space: a switch is a categorical parameter of its
level names, a numeric knob an int or float parameter of its range; and back, a trial's
parameters as the variant's level names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from experiments.campaign import Factor


def distributions(factors: Sequence[Factor]) -> dict[str, BaseDistribution]:
    space: dict[str, BaseDistribution] = {}
    for factor in factors:
        knob = factor.range
        if knob is None:
            space[factor.name] = CategoricalDistribution(list(factor.levels))
        elif knob.integer:
            step = int(knob.step) if knob.step is not None else 1
            space[factor.name] = IntDistribution(int(knob.min), int(knob.max),
                                                 log=knob.scale == "log", step=step)
        else:
            space[factor.name] = FloatDistribution(knob.min, knob.max, log=knob.scale == "log",
                                                   step=knob.step)
    return space


def grid(factors: Sequence[Factor]) -> dict[str, list[Any]]:
    """Every value of every factor, as GridSampler enumerates them."""
    return {f.name: list(f.levels) if f.range is None else
            [param(f, name) for name in f.range.grid()] for f in factors}


def param(factor: Factor, level: str) -> Any:
    """A level name as the parameter's value."""
    if factor.range is None:
        return level
    value = factor.range.value(level)
    if value is None:
        raise ValueError(f"{factor.name}: {level!r} is not in its range")
    return int(value) if factor.range.integer else value


def params(factors: Sequence[Factor], levels: Mapping[str, str]) -> dict[str, Any]:
    return {f.name: param(f, levels[f.name]) for f in factors}


def levels_of(factors: Sequence[Factor], values: Mapping[str, Any]) -> dict[str, str]:
    """A trial's parameters as level names (a float rounded as its level is named)."""
    return {f.name: str(values[f.name]) if f.range is None else f.range.name(values[f.name])
            for f in factors}
