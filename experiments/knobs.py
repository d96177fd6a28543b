"""A numeric factor: a range of values of one flag or environment variable, searched by
`bisect optimize` (``--max-running-requests 16..256``, ``--mem-fraction-static 0.7..0.92``).

Every value in the range is a level, named by its number as the flag receives it ("64",
"0.85"), so a variant stays what it is everywhere else, a mapping of factor names to level
names, and the store, the deploy layer and the reports need no second kind of variant.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
FLAG = r"^--[a-z0-9][a-z0-9-]*$"
# A float level keeps this many significant digits: its name is a flag's argument, and 0.1 + 0.2
# must not deploy as 0.30000000000000004.
DIGITS = 6
GRID_MAX = 1000  # values a grid of one knob may have (`sampler: grid` enumerates them)


class Knob(BaseModel):
    """The range of a numeric factor and what its value sets: ``flag`` (given as
    ``FLAG VALUE``) or ``env`` (``NAME=VALUE``), exactly one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: float = Field(allow_inf_nan=False)
    max: float = Field(allow_inf_nan=False)
    scale: Literal["linear", "log"] = "linear"
    integer: bool = False
    # the values are min, min + step, ...: what a grid enumerates, and what a search may pick
    step: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    flag: str | None = Field(default=None, pattern=FLAG)
    env: str | None = Field(default=None, pattern=ENV_NAME)

    @model_validator(mode="after")
    def _consistent(self) -> Knob:
        if (self.flag is None) == (self.env is None):
            raise PydanticCustomError("knob_target", "a range sets exactly one of `flag` or "
                                                     "`env`")
        if self.min > self.max:
            raise PydanticCustomError("knob_range", "min ({lo}) is above max ({hi})",
                                      {"lo": _name(self.min, self.integer),
                                       "hi": _name(self.max, self.integer)})
        if self.min == self.max:
            raise PydanticCustomError("knob_range", "min equals max: one value is no factor "
                                                    "(set it in the service's command)")
        if self.integer and (not self.min.is_integer() or not self.max.is_integer()
                             or (self.step is not None and not self.step.is_integer())):
            raise PydanticCustomError("knob_integer", "an integer range needs integer min, "
                                                      "max and step")
        if self.scale == "log" and self.min <= 0:
            raise PydanticCustomError("knob_log", "a log scale needs min above 0")
        if self.scale == "log" and self.step is not None:
            raise PydanticCustomError("knob_log", "a step applies to a linear scale only")
        if self.step is not None and (self.max - self.min) / self.step > GRID_MAX:
            raise PydanticCustomError("knob_step", "more than {most} values: use a larger step",
                                      {"most": GRID_MAX})
        return self

    def name(self, value: float) -> str:
        """The level name of ``value``: what the flag or variable receives."""
        return _name(value, self.integer)

    def value(self, name: str) -> float | None:
        """The value a level name stands for, or None where it is not one of this range (or
        not written as the range writes it: "64", not "64.0", one name per value)."""
        try:
            value = float(name)
        except ValueError:
            return None
        if not math.isfinite(value) or not self.min <= value <= self.max:
            return None
        if self.integer and not value.is_integer():
            return None
        if self.step is not None:
            steps = (value - self.min) / self.step
            if abs(steps - round(steps)) > 1e-6:  # names keep 6 digits
                return None
        return value if self.name(value) == name else None

    def settings(self, name: str) -> tuple[list[str], dict[str, str]]:
        """The flags and environment the level ``name`` sets."""
        if self.value(name) is None:
            raise ValueError(f"{name!r} is not a value of this range ({self.describe()})")
        if self.flag is not None:
            return [self.flag, name], {}
        assert self.env is not None  # validated: exactly one
        return [], {self.env: name}

    def grid(self) -> list[str]:
        """Every value of a stepped (or integer) range, low to high; [] where it has none."""
        step = self.step if self.step is not None else (1.0 if self.integer else None)
        if step is None or (self.max - self.min) / step > GRID_MAX:
            return []
        count = math.floor((self.max - self.min) / step + 1e-9) + 1
        return [self.name(self.min + i * step) for i in range(count)]

    def ends(self) -> list[str]:
        """The range's two ends, as level names (what a preflight shows the node)."""
        return [self.name(self.min), self.name(self.max)]

    def describe(self) -> str:
        step = f" step {self.name(self.step)}" if self.step is not None else ""
        return f"{self.name(self.min)}..{self.name(self.max)}{step}" + (
            " log" if self.scale == "log" else "")


def _name(value: float, integer: bool) -> str:
    if integer:
        return str(round(value))
    text = format(value, f".{DIGITS}g")
    return text if "e" not in text else repr(float(text))
