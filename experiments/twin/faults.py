"""The fault model: which sessions the twin corrupts, wedges or fails, and under which conditions.

A YAML file (see ``faults.example.yaml``; ``python -m experiments.twin --schema`` prints its JSON
Schema). Each rule has a condition on the flags and env of the roles of the pool (this server, its
``prefill``, its ``decode``) -- exact values or numeric comparisons such as ``max-running-requests:
{gt: 96}`` (conditions.py) --, on files of the deciding server's tree, on the live number of chat
requests in flight and on the request's context length. When the condition holds on a request, a
draw ``u`` in [0, 1) is taken from a stable hash of (seed, twin seed, rule name, session key); the
rule hits when ``u < probability`` (scaled down at low concurrency with ``scale_with_inflight``). By
default (``per: session``) the draw does not depend on the turn, so a session that is hit stays hit
whenever the condition holds again: a session is corrupted with probability ``p`` once its condition
has held. With ``per: request`` the round number (1 for a session's first request) joins the hash:
each request is drawn afresh, so a session can wedge in its third round.

Who decides: the server that writes the reply, i.e. a combined server or a decode server (using
its own fault model, or its prefill's when it has none). A combined server plays both roles, so
``prefill:`` and ``decode:`` conditions are read on itself.

``noise:`` is a base rate on every request and, optionally, the noise between trials
(variation.py): a multiplier of every rate drawn at each start, per-node offsets and a drift with
wall time; ``decide`` takes the resulting multiplier as ``rate_scale`` (1: the file's rates).
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
from experiments.twin.args import flag_key
from experiments.twin.conditions import (
    Condition,
    FileCondition,
    FileFacts,
    InflightScale,
    RoleView,
)
from experiments.twin.variation import Variability


class Effect(StrEnum):
    LEAK = "leak"  # tool-call markup in content, no structured tool_calls
    NO_TOOL = "no_tool"  # plain text, no call
    LOST_PLOT = "lost_plot"  # well-formed call with a wrong canary
    BAD_ARGS = "bad_args"  # arguments a truncated JSON string
    ERROR = "error"  # HTTP 500 (on a decode server: a failed KV transfer)
    WEDGE = "wedge"  # the request hangs until the client gives up


class Per(StrEnum):
    SESSION = "session"  # one draw per session: a hit session stays hit
    REQUEST = "request"  # one draw per request (session, round): any round can be hit


PER_FIELD = Field(default=Per.SESSION, description="Draw once per session (a hit session stays "
                  "hit) or once per request (each round drawn afresh).")


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
    probability: float = Field(ge=0.0, le=1.0, description="Probability that a session (or, "
                               "with per: request, a request) is hit.")
    per: Per = PER_FIELD
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


class Noise(Variability):
    """A base rate that applies to every request, whatever the condition; and the noise
    between trials (``seed``, ``restart``, ``node``, ``drift``: variation.py)."""

    model_config = ConfigDict(extra="forbid")

    probability: float = Field(default=0.0, ge=0.0, le=1.0)
    per: Per = PER_FIELD
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


def draw(seed: int, twin_seed: int, rule: str, session_key: str,
         request: int | None = None) -> float:
    """A stable u in [0, 1): the same in every process and Python version (unlike hash()).
    ``request`` (the round) only for per-request rules: per-session draws stay as they were."""
    key: list[Any] = [seed, twin_seed, rule, session_key]
    payload = json.dumps(key if request is None else [*key, request]).encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:8], "big") / 2**64


def _draw(model: FaultModel, twin_seed: int, rule: str, per: Per, session_key: str,
          request: int) -> float:
    return draw(model.seed, twin_seed, rule, session_key,
                request if per is Per.REQUEST else None)


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
    request: int = 1,
    files: Mapping[str, FileFacts] | None = None,
    rate_scale: float = 1.0,
) -> Decision | None:
    """The first rule that hits this request (round ``request`` of its session), else the
    noise, else None. ``files``: the deciding server's tree as read at its start;
    ``rate_scale``: the multiplier of every probability this start drew (variation.py), each
    clamped at 1."""
    for rule in model.rules:
        if inflight < rule.min_inflight or context_tokens < rule.min_context_tokens:
            continue
        if not rule.when.holds(flags, env, roles, files):
            continue
        u = _draw(model, twin_seed, rule.name, rule.per, session_key, request)
        if u < _scaled(rule.chance(inflight), rate_scale):
            return Decision(rule.name, rule.effect, rule.markup)
    noise = model.noise
    if noise and _draw(model, twin_seed, NOISE_RULE, noise.per, session_key,
                       request) < _scaled(noise.probability, rate_scale):
        return Decision(NOISE_RULE, noise.effect, noise.markup)
    return None


def _scaled(probability: float, rate_scale: float) -> float:
    return probability if rate_scale == 1.0 else min(1.0, probability * max(0.0, rate_scale))


def per_request(model: FaultModel) -> bool:
    """Whether some draw depends on the round (else a session's fate is drawn once)."""
    noise = model.noise is not None and model.noise.probability > 0 and \
        model.noise.per is Per.REQUEST
    return noise or any(rule.per is Per.REQUEST for rule in model.rules)


def file_conditions(model: FaultModel) -> list[tuple[str, str, FileCondition | None]]:
    """(field path, tree path, condition) of every file the model's rules name."""
    return [(f"rules[{index}].when.files.{path}", path, wanted)
            for index, rule in enumerate(model.rules)
            for path, wanted in rule.when.files.items()]


def env_names(model: FaultModel) -> set[str]:
    """Env vars the model's conditions name, on any role (every twin reads and reports them)."""
    return {name for rule in model.rules for _, part in rule.when.parts() for name in part.env}


def unknown_flags(model: FaultModel, known: set[str]) -> list[str]:
    """Field paths of condition flags the twin does not accept (they could never match);
    ``known``: the twin's flags and the fork flags it was told of."""
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
    # PyYAML only for a file: a twin started without one never reads YAML.
    from experiments.yaml_lines import YamlInputError, dotted, load_yaml, read_yaml_text

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
