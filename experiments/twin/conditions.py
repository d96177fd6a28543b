"""Fault-rule conditions: what must hold on the roles of a pool for a rule to apply.

``env``/``flags`` at the top of a condition name the server taking the decision; ``prefill:`` and
``decode:`` name the roles of its pool (a combined server is both). Flags are compared the way
the YAML reads (bools, numbers, strings), env values as strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

FlagValue = StrictBool | int | float | str | None
ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class RoleView:
    """What a server knows of one role of its pool: flags (no dashes) and the env it read."""

    flags: Mapping[str, Any]
    env: Mapping[str, str]


class RoleCondition(BaseModel):
    """All entries must match. Flags are named without the leading dashes."""

    # `BF16_INDEX_K: 1` in YAML is an int: accept it as the string the env would hold.
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    env: dict[str, str | None] = Field(
        default_factory=dict,
        description="Env var -> required value (string compare); null means must be unset.",
    )
    flags: dict[str, FlagValue] = Field(
        default_factory=dict,
        description="Flag name without dashes -> value: a bool for on/off flags, otherwise "
        "compared as a number or a string; null means the flag is unset.",
    )

    def holds_on(self, view: RoleView | None) -> bool:
        if view is None:  # a role we know nothing about satisfies only an empty condition
            return not self.env and not self.flags
        if any(view.env.get(name) != want for name, want in self.env.items()):
            return False
        return all(
            _flag_matches(want, view.flags.get(flag_key(name)))
            for name, want in self.flags.items()
        )


class Condition(RoleCondition):
    """``env``/``flags`` name the deciding server; ``prefill``/``decode`` name pool roles."""

    prefill: RoleCondition | None = Field(
        default=None, description="Conditions on the pool's prefill server (a combined server "
        "is its own prefill); learnt by the decode over the bootstrap port.",
    )
    decode: RoleCondition | None = Field(
        default=None, description="Conditions on the pool's decode server (a combined server "
        "is its own decode).",
    )

    def holds(self, flags: Mapping[str, Any], env: Mapping[str, str],
              roles: Mapping[str, RoleView] | None = None) -> bool:
        if not self.holds_on(RoleView(flags, env)):
            return False
        for role in ROLES:
            wanted: RoleCondition | None = getattr(self, role)
            if wanted is not None and not wanted.holds_on((roles or {}).get(role)):
                return False
        return True

    def parts(self) -> list[tuple[str, RoleCondition]]:
        """(field path, condition) of this server and of each named role."""
        found: list[tuple[str, RoleCondition]] = [("", self)]
        found += [(f"{role}.", getattr(self, role)) for role in ROLES if getattr(self, role)]
        return found


class InflightScale(BaseModel):
    """p_eff = probability x min(1, inflight / reference) ** power."""

    model_config = ConfigDict(extra="forbid")

    reference: int = Field(ge=1, description="In-flight requests at which the full "
                           "probability applies.")
    power: float = Field(default=1.0, gt=0, description="Shape: 1 linear, 2 quadratic, ...")

    def factor(self, inflight: int) -> float:
        return float(min(1.0, max(0, inflight) / self.reference) ** self.power)


def flag_key(name: str) -> str:
    return name.lstrip("-").replace("_", "-")


def _flag_matches(want: FlagValue, actual: Any) -> bool:
    if want is None or actual is None:
        return want is None and actual is None
    if isinstance(want, bool) or isinstance(actual, bool):
        return str(want).lower() == str(actual).lower()
    try:
        return float(want) == float(actual)
    except (TypeError, ValueError):
        return str(want) == str(actual)
