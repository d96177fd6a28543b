"""The fault model: which sessions the twin corrupts, wedges or fails, and under which conditions.

A YAML file (see ``faults.example.yaml``; ``python -m experiments.twin --schema`` prints its JSON
Schema). Each rule has a condition on the twin's env and flags and on the live number of chat
requests in flight. When the condition holds on a request, a draw ``u`` in [0, 1) is taken from a
stable hash of (seed, twin seed, rule name, session key); the rule hits when ``u < probability``.
The draw does not depend on the turn, so a session that is hit stays hit whenever the condition
holds again: a session is corrupted with probability ``p`` once its condition has held.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, model_validator

from experiments.markup import MarkupFamily


class Effect(StrEnum):
    LEAK = "leak"  # tool-call markup in content, no structured tool_calls
    NO_TOOL = "no_tool"  # plain text, no call
    LOST_PLOT = "lost_plot"  # well-formed call with a wrong canary
    BAD_ARGS = "bad_args"  # arguments a truncated JSON string
    ERROR = "error"  # HTTP 500
    WEDGE = "wedge"  # the request hangs until the client gives up


FlagValue = StrictBool | int | float | str | None


class Condition(BaseModel):
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

    def holds(self, flags: dict[str, Any], env: dict[str, str]) -> bool:
        if any(env.get(name) != want for name, want in self.env.items()):
            return False
        return all(
            _flag_matches(want, flags.get(_flag_key(name))) for name, want in self.flags.items()
        )


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Names the rule in draws and logs.")
    when: Condition = Field(default_factory=Condition)
    min_inflight: int = Field(
        default=1, ge=1, description="Applies only with at least this many chat requests in "
        "flight, the current one included."
    )
    probability: float = Field(ge=0.0, le=1.0, description="Probability that a session is hit.")
    effect: Effect
    markup: MarkupFamily | None = Field(
        default=None, description="Markup family of a leak; default from --tool-call-parser."
    )


class Noise(BaseModel):
    """A base rate that applies to every request, whatever the condition."""

    model_config = ConfigDict(extra="forbid")

    probability: float = Field(default=0.0, ge=0.0, le=1.0)
    effect: Effect = Effect.LEAK
    markup: MarkupFamily | None = None


class FaultModel(BaseModel):
    model_config = ConfigDict(extra="forbid", title="bisect twin fault model")

    seed: int = Field(default=0, description="Combined with --twin-seed in every draw.")
    rules: list[Rule] = Field(default_factory=list, description="First rule that hits wins.")
    noise: Noise | None = None

    @model_validator(mode="after")
    def _unique_names(self) -> FaultModel:
        names = [rule.name for rule in self.rules]
        dupes = sorted({name for name in names if names.count(name) > 1})
        if dupes:
            raise ValueError(f"rule names must be unique, repeated: {', '.join(dupes)}")
        return self


@dataclass(frozen=True)
class Decision:
    rule: str
    effect: Effect
    markup: MarkupFamily | None


NOISE_RULE = "__noise__"


def draw(seed: int, twin_seed: int, rule: str, session_key: str) -> float:
    """A stable u in [0, 1): the same in every process and Python version (unlike hash())."""
    payload = json.dumps([seed, twin_seed, rule, session_key]).encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:8], "big") / 2**64


def decide(
    model: FaultModel,
    *,
    twin_seed: int,
    flags: dict[str, Any],
    env: dict[str, str],
    inflight: int,
    session_key: str,
) -> Decision | None:
    for rule in model.rules:
        if inflight < rule.min_inflight or not rule.when.holds(flags, env):
            continue
        if draw(model.seed, twin_seed, rule.name, session_key) < rule.probability:
            return Decision(rule.name, rule.effect, rule.markup)
    noise = model.noise
    if noise and draw(model.seed, twin_seed, NOISE_RULE, session_key) < noise.probability:
        return Decision(NOISE_RULE, noise.effect, noise.markup)
    return None


def env_names(model: FaultModel) -> set[str]:
    """Env vars the model reads (reported by /get_server_info)."""
    return {name for rule in model.rules for name in rule.when.env}


def unknown_flags(model: FaultModel, known: set[str]) -> list[str]:
    """Field paths of condition flags the twin does not accept (they could never match)."""
    return [
        f"rules[{index}].when.flags.{name}"
        for index, rule in enumerate(model.rules)
        for name in rule.when.flags
        if _flag_key(name) not in known
    ]


def schema() -> dict[str, Any]:
    document = FaultModel.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **document}


class FaultModelError(Exception):
    """A fault model file that cannot be used; the message is one line for the user."""


def load(path: str | Path) -> FaultModel:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise FaultModelError(f"fault model {path}: cannot read: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise FaultModelError(f"fault model {path}{where}: {problem}") from exc
    try:
        return FaultModel.model_validate(data if data is not None else {})
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        line = _line_of(text, loc)
        where = f", line {line}" if line else ""
        raise FaultModelError(
            f"fault model {path}{where}, field {_dotted(loc) or '(top)'}: {error['msg']}"
        ) from exc


def _flag_key(name: str) -> str:
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


def _dotted(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def _line_of(text: str, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at ``loc``, or of the deepest parent found."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if part < len(node.value) else None
        else:
            node = None
    if node is not None:
        line = node.start_mark.line + 1
    return line
