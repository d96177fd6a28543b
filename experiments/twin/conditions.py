"""Fault-rule conditions: what must hold on the roles of a pool for a rule to apply.

``env``/``flags`` at the top of a condition name the server taking the decision; ``prefill:`` and
``decode:`` name the roles of its pool (a combined server is both). Flags are compared the way
the YAML reads (bools, numbers, strings), env values as strings. Instead of a value, a flag or an
env var may be given a comparison, ``{gt, ge, lt, le, in}`` (all given must hold), so a rule can
say "more than 96 running requests" (``max-running-requests: {gt: 96}``): the bounds compare
numbers (an env value is read as one; a value that is no number, a switch, or an unset flag
never satisfies a bound), ``in`` lists values compared as an exact entry is. ``files`` name files
of the deciding server's tree, as they were when it started (a real server reads its code at
start).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from experiments.twin.args import flag_key

FlagValue = StrictBool | int | float | str | None
ROLES = ("prefill", "decode")
BOUNDS = ("gt", "ge", "lt", "le")
MAX_IN = 1000  # values an `in` may list


@dataclass(frozen=True)
class RoleView:
    """What a server knows of one role of its pool: flags (no dashes) and the env it read."""

    flags: Mapping[str, Any]
    env: Mapping[str, str]


class _Bounds(BaseModel):
    """Numeric bounds on a value; every bound given must hold."""

    gt: float | None = Field(default=None, description="Holds above this number.")
    ge: float | None = Field(default=None, description="Holds at or above this number.")
    lt: float | None = Field(default=None, description="Holds below this number.")
    le: float | None = Field(default=None, description="Holds at or below this number.")

    @field_validator(*BOUNDS, mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        # A YAML `true` is no bound (pydantic would read it as 1.0), nor is inf or nan.
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise ValueError(f"a bound must be a finite number, not {value!r}")
        return value

    def _bounds_hold(self, actual: Any) -> bool:
        wanted = [(op, getattr(self, op)) for op in BOUNDS if getattr(self, op) is not None]
        if not wanted:
            return True
        number = as_number(actual)
        if number is None:
            return False
        checks = {"gt": number.__gt__, "ge": number.__ge__, "lt": number.__lt__,
                  "le": number.__le__}
        return all(checks[op](bound) for op, bound in wanted)

    def _nonempty(self, given_in: bool) -> None:
        if not given_in and all(getattr(self, op) is None for op in BOUNDS):
            raise ValueError("a comparison needs at least one of gt, ge, lt, le, in")


class FlagCompare(_Bounds):
    """A comparison on a flag's value: ``{gt: 96}``, ``{ge: 0.8, le: 0.9}``, ``{in: [64, 128]}``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    in_: list[FlagValue] | None = Field(
        default=None, alias="in", max_length=MAX_IN,
        description="Holds when the value equals one of these (compared as an exact value).")

    @model_validator(mode="after")
    def _something(self) -> FlagCompare:
        self._nonempty(self.in_ is not None)
        return self

    def holds(self, actual: Any) -> bool:
        if self.in_ is not None and not any(_flag_matches(want, actual) for want in self.in_):
            return False
        return self._bounds_hold(actual)


class EnvCompare(_Bounds):
    """A comparison on an env var's value: bounds read it as a number, ``in`` as strings."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, coerce_numbers_to_str=True)

    in_: list[str | None] | None = Field(
        default=None, alias="in", max_length=MAX_IN,
        description="Holds when the value is one of these strings (null: unset).")

    @model_validator(mode="after")
    def _something(self) -> EnvCompare:
        self._nonempty(self.in_ is not None)
        return self

    def holds(self, actual: str | None) -> bool:
        if self.in_ is not None and actual not in self.in_:
            return False
        return self._bounds_hold(actual)


def _comparison(model: type[FlagCompare] | type[EnvCompare]) -> WrapValidator:
    """Read a mapping as a comparison, with an error that names it (pydantic's union would
    report every member's complaint, about the wrong one first); anything else as a value."""
    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(value, dict):
            return handler(value)
        try:
            return model.model_validate(value)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            message = str(error["msg"]).removeprefix("Value error, ")
            raise PydanticCustomError("comparison", "comparison {where}{message}",
                                      {"where": f"{where}: " if where else "",
                                       "message": message}) from None

    return WrapValidator(validate)


FlagWant = Annotated[FlagValue | FlagCompare, _comparison(FlagCompare)]
EnvWant = Annotated[str | EnvCompare | None, _comparison(EnvCompare)]


class RoleCondition(BaseModel):
    """All entries must match. Flags are named without the leading dashes."""

    # `BF16_INDEX_K: 1` in YAML is an int: accept it as the string the env would hold.
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    env: dict[str, EnvWant] = Field(
        default_factory=dict,
        description="Env var -> required value (string compare); null means must be unset; or "
        "a comparison {gt, ge, lt, le: number (the value read as a number), in: [strings]}.",
    )
    flags: dict[str, FlagWant] = Field(
        default_factory=dict,
        description="Flag name without dashes -> value: a bool for on/off flags, otherwise "
        "compared as a number or a string; null means the flag is unset; or a comparison "
        "{gt, ge, lt, le: number, in: [values]} (an unset flag satisfies no bound).",
    )

    def holds_on(self, view: RoleView | None) -> bool:
        if view is None:  # a role we know nothing about satisfies only an empty condition
            return not self.env and not self.flags
        for name, want in self.env.items():
            actual = view.env.get(name)
            if not (want.holds(actual) if isinstance(want, EnvCompare) else actual == want):
                return False
        for flag, wanted in self.flags.items():
            value = view.flags.get(flag_key(flag))
            if not (wanted.holds(value) if isinstance(wanted, FlagCompare)
                    else _flag_matches(wanted, value)):
                return False
        return True


@dataclass(frozen=True)
class FileFacts:
    """One file of a server's tree as it was at the server's start: its sha256 (None: absent)
    and which of the substrings the fault model looks for it contains."""

    sha256: str | None
    found: frozenset[str] = field(default_factory=frozenset)

    def as_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "found": sorted(self.found)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> FileFacts:
        sha = doc.get("sha256")
        return cls(None if sha is None else str(sha), frozenset(str(s) for s in doc["found"]))


class FileCondition(BaseModel):
    """What a file of the tree must hold; every field given must match."""

    model_config = ConfigDict(extra="forbid")

    sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$",
                               description="The file's SHA-256, hex.")
    contains: str | None = Field(default=None, min_length=1, max_length=65_536,
                                 description="A substring of the file (UTF-8, case-sensitive).")

    @field_validator("sha256")
    @classmethod
    def _lower(cls, value: str | None) -> str | None:
        return value.lower() if value else value

    @model_validator(mode="after")
    def _something(self) -> FileCondition:
        if self.sha256 is None and self.contains is None:
            raise ValueError("give sha256 or contains (or null: the file must be absent)")
        return self

    def holds_on(self, facts: FileFacts | None) -> bool:
        if facts is None or facts.sha256 is None:
            return False
        if self.sha256 is not None and facts.sha256 != self.sha256:
            return False
        return self.contains is None or self.contains in facts.found


_BAD_PATH = re.compile(r"[\x00-\x1f\x7f\\]")


def tree_path_error(path: str) -> str | None:
    """Why ``path`` cannot name a file of a tree (relative, inside it), or None."""
    parts = PurePosixPath(path).parts
    if not path or _BAD_PATH.search(path):
        return "is not a plain relative path"
    if path.startswith("/") or ".." in parts or not parts or parts == (".",):
        return "must be relative to the tree and stay inside it (no leading /, no ..)"
    return None


class Condition(RoleCondition):
    """``env``/``flags``/``files`` name the deciding server; ``prefill``/``decode`` name pool
    roles."""

    prefill: RoleCondition | None = Field(
        default=None, description="Conditions on the pool's prefill server (a combined server "
        "is its own prefill); learnt by the decode over the bootstrap port.",
    )
    decode: RoleCondition | None = Field(
        default=None, description="Conditions on the pool's decode server (a combined server "
        "is its own decode).",
    )
    files: dict[str, FileCondition | None] = Field(
        default_factory=dict,
        description="Path relative to the deciding server's tree (--twin-tree, default the "
        "fault model's directory) -> {sha256, contains}; null means the file must be absent. "
        "Read once, at the server's start.",
    )

    @field_validator("files")
    @classmethod
    def _relative_paths(cls, files: dict[str, FileCondition | None]
                        ) -> dict[str, FileCondition | None]:
        for path in files:
            error = tree_path_error(path)
            if error:
                raise ValueError(f"path {path!r} {error}")
        return files

    def holds(self, flags: Mapping[str, Any], env: Mapping[str, str],
              roles: Mapping[str, RoleView] | None = None,
              files: Mapping[str, FileFacts] | None = None) -> bool:
        if not self.holds_on(RoleView(flags, env)):
            return False
        for path, wanted_file in self.files.items():
            facts = (files or {}).get(path)  # unknown facts (never read) match nothing
            if wanted_file is None:
                if facts is None or facts.sha256 is not None:
                    return False
            elif not wanted_file.holds_on(facts):
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


def as_number(value: Any) -> float | None:
    """A flag's or env var's value as a finite number, or None (switches are no numbers)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _flag_matches(want: FlagValue, actual: Any) -> bool:
    if want is None or actual is None:
        return want is None and actual is None
    if isinstance(want, bool) or isinstance(actual, bool):
        return str(want).lower() == str(actual).lower()
    try:
        return float(want) == float(actual)
    except (TypeError, ValueError):
        return str(want) == str(actual)
