"""The fault model: which sessions the twin corrupts, wedges or fails, and under which conditions.

A YAML file (see ``faults.example.yaml``; ``python -m experiments.twin --schema`` prints its JSON
Schema). Each rule has a condition on the flags and env of the roles of the pool (this server,
its ``prefill``, its ``decode``), on the live number of chat requests in flight and on the
request's context length. When the condition holds on a request, a draw ``u`` in [0, 1) is taken
from a stable hash of (seed, twin seed, rule name, session key); the rule hits when
``u < probability`` (scaled down at low concurrency with ``scale_with_inflight``). The draw does
not depend on the turn, so a session that is hit stays hit whenever the condition holds again: a
session is corrupted with probability ``p`` once its condition has held.

Who decides: the server that writes the reply, i.e. a combined server or a decode server (using
its own fault model, or its prefill's when it has none). A combined server plays both roles, so
``prefill:`` and ``decode:`` conditions are read on itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from experiments.markup import MarkupFamily
from experiments.twin.conditions import Condition, InflightScale, RoleView, flag_key
from experiments.yaml_lines import YamlInputError, dotted, load_yaml, read_yaml_text


class Effect(StrEnum):
    LEAK = "leak"  # tool-call markup in content, no structured tool_calls
    NO_TOOL = "no_tool"  # plain text, no call
    LOST_PLOT = "lost_plot"  # well-formed call with a wrong canary
    BAD_ARGS = "bad_args"  # arguments a truncated JSON string
    ERROR = "error"  # HTTP 500 (on a decode server: a failed KV transfer)
    WEDGE = "wedge"  # the request hangs until the client gives up


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Names the rule in draws and logs.")
    when: Condition = Field(default_factory=Condition)
    min_inflight: int = Field(
        default=1, ge=1, le=10_000_000,
        description="Applies only with at least this many chat requests in "
        "flight on the deciding server, the current one included."
    )
    min_context_tokens: int = Field(
        default=0, ge=0, le=10_000_000_000,
        description="Applies only to requests whose messages and tools, as "
        "JSON, are at least this many tokens (4 characters a token)."
    )
    probability: float = Field(ge=0.0, le=1.0, description="Probability that a session is hit.")
    scale_with_inflight: InflightScale | None = Field(
        default=None, description="Scale the probability down below a reference concurrency."
    )
    effect: Effect
    markup: MarkupFamily | None = Field(
        default=None, description="Markup family of a leak; default from --tool-call-parser."
    )

    def chance(self, inflight: int) -> float:
        scale = self.scale_with_inflight
        return self.probability * (scale.factor(inflight) if scale else 1.0)


class Noise(BaseModel):
    """A base rate that applies to every request, whatever the condition."""

    model_config = ConfigDict(extra="forbid")

    probability: float = Field(default=0.0, ge=0.0, le=1.0)
    effect: Effect = Effect.LEAK
    markup: MarkupFamily | None = None


class FaultModel(BaseModel):
    model_config = ConfigDict(extra="forbid", title="bisect twin fault model")

    seed: int = Field(default=0, ge=-(2**63), lt=2**63,
                      description="Combined with --twin-seed in every draw.")
    rules: list[Rule] = Field(default_factory=list, description="First rule that hits wins.")
    noise: Noise | None = None

    @model_validator(mode="after")
    def _unique_names(self) -> FaultModel:
        names = [rule.name for rule in self.rules]
        dupes = sorted({name for name in names if names.count(name) > 1})
        if dupes:
            raise ValueError(f"rule names must be unique, repeated: {', '.join(dupes)}")
        return self

    @property
    def empty(self) -> bool:
        return not self.rules and not (self.noise and self.noise.probability > 0)


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
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    inflight: int,
    session_key: str,
    roles: Mapping[str, RoleView] | None = None,
    context_tokens: int = 0,
) -> Decision | None:
    """The first rule that hits this request, else the noise, else None."""
    for rule in model.rules:
        if inflight < rule.min_inflight or context_tokens < rule.min_context_tokens:
            continue
        if not rule.when.holds(flags, env, roles):
            continue
        if draw(model.seed, twin_seed, rule.name, session_key) < rule.chance(inflight):
            return Decision(rule.name, rule.effect, rule.markup)
    noise = model.noise
    if noise and draw(model.seed, twin_seed, NOISE_RULE, session_key) < noise.probability:
        return Decision(NOISE_RULE, noise.effect, noise.markup)
    return None


def env_names(model: FaultModel) -> set[str]:
    """Env vars the model's conditions name, on any role (every twin reads and reports them)."""
    return {name for rule in model.rules for _, part in rule.when.parts() for name in part.env}


def unknown_flags(model: FaultModel, known: set[str]) -> list[str]:
    """Field paths of condition flags the twin does not accept (they could never match)."""
    return [
        f"rules[{index}].when.{prefix}flags.{name}"
        for index, rule in enumerate(model.rules)
        for prefix, part in rule.when.parts()
        for name in part.flags
        if flag_key(name) not in known
    ]


def schema() -> dict[str, Any]:
    document = FaultModel.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **document}


class FaultModelError(Exception):
    """A fault model file that cannot be used; the message is one line for the user."""


def load(path: str | Path) -> FaultModel:
    """The fault model of a YAML file, read as bounded as a campaign file (experiments/
    yaml_lines); FaultModelError with one line naming the file, the line and the field."""
    try:
        loaded = load_yaml(read_yaml_text(path), str(path))
    except YamlInputError as exc:
        raise FaultModelError(f"fault model {exc}") from None
    try:
        return FaultModel.model_validate(loaded.data if loaded.data is not None else {})
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        line = loaded.line_of(loc) if loc else None
        where = f", line {line}" if line else ""
        raise FaultModelError(
            f"fault model {path}{where}, field {dotted(loc) or '(top)'}: {error['msg']}"
        ) from None
