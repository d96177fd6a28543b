"""Noise between trials: what makes one start of a twin unlike the one before (issue 27).

Sessions of a trial are not independent draws given the variant on a real fleet: a restart lands
in a better or a worse state, a node runs hotter than its neighbour, the machine's load drifts
between a baseline run and a later one. The fault model's ``noise:`` section says how much
(``Variability``, the fields the base rate's ``Noise`` adds; all optional, none given: every
start is alike, the i.i.d. twin it always was):

- ``restart: {rate_spread: S, speed_spread: S2}``: at every start the twin draws one multiplier
  of every rate of the fault model (each rule's probability and the base rate) and one of its
  speed, each log-normal with mean 1 and sd of the log S (``exp(N(-S**2/2, S))``; S = ln 2 ~
  0.69: a start halves or doubles the rate at +-1 sd);
- ``node: {NAME: {rate: m, speed: m}}``: fixed offsets of the node the twin runs on, named by
  ``$BISECT_TWIN_NODE`` (set it in the twin service's ``env:`` of the campaign), else by the
  machine's host name (so twins on distinct SSH hosts need no setting);
- ``drift: {since: TIME, speed_per_hour: x, rate_per_hour: y}``: speed (rate) times
  ``1 + x * hours since TIME``, bounded to [0.1, 10]: a baseline run and one a day later meet
  different speeds. Read from the wall clock at every request;
- ``seed``: the random source of the start's draw. Absent: ``os.urandom`` at every start, so two
  starts draw apart. Given: (seed, ``--twin-seed``), reproducible, so every start with the same
  ``--twin-seed`` draws the same (for tests and replays, not for a campaign's noise).

A rate is the fault model's times the rate multiplier, clamped at 1; the time model's durations
are divided by the speed (speed 2: twice as fast). What a start drew is in its log (``Twin
noise: ...``) and in ``/get_server_info`` (``twin.noise``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

NODE_ENV = "BISECT_TWIN_NODE"
DRIFT_BOUNDS = (0.1, 10.0)  # a drift factor stays within these
MAX_SPREAD = 3.0  # sd of the log: exp(3) ~ 20x at one sd, more is no fleet
MAX_NODES = 1000


def _no_bool(value: Any) -> Any:
    # A YAML `true` is no number (pydantic would read it as 1.0).
    if isinstance(value, bool):
        raise ValueError(f"a number is needed, not {value!r}")
    return value


# The bounds first: so the JSON Schema states them (minimum, maximum).
Spread = Annotated[float, Field(ge=0.0, le=MAX_SPREAD, allow_inf_nan=False),
                   BeforeValidator(_no_bool)]
Offset = Annotated[float, Field(gt=0.0, le=1000.0, allow_inf_nan=False),
                   BeforeValidator(_no_bool)]
Slope = Annotated[float, Field(ge=-10.0, le=10.0, allow_inf_nan=False),
                  BeforeValidator(_no_bool)]


class RestartNoise(BaseModel):
    """One draw per start of the twin: log-normal multipliers of mean 1."""

    model_config = ConfigDict(extra="forbid")

    rate_spread: Spread = Field(default=0.0, description="sd of the log of the multiplier of "
                                "every rate (0.69: a start halves or doubles it at one sd).")
    speed_spread: Spread = Field(default=0.0, description="sd of the log of the multiplier of "
                                 "the time model's speed.")


class NodeOffset(BaseModel):
    """Fixed multipliers of one node."""

    model_config = ConfigDict(extra="forbid")

    rate: Offset = Field(default=1.0, description="Multiplier of every rate on this node.")
    speed: Offset = Field(default=1.0, description="Multiplier of the speed on this node "
                          "(durations are divided by it).")


class Drift(BaseModel):
    """Speed and rates moving linearly with wall time since a reference epoch."""

    model_config = ConfigDict(extra="forbid")

    since: datetime = Field(description="The reference epoch (ISO 8601; no zone: UTC), where "
                            "the drift factors are 1.")
    speed_per_hour: Slope = Field(default=0.0, description="Speed change per hour since "
                                  "`since` (0.01: 1% faster each hour).")
    rate_per_hour: Slope = Field(default=0.0, description="Rate multiplier change per hour "
                                 "since `since`.")

    @field_validator("since")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

    def factor(self, slope: float, now: float) -> float:
        """``1 + slope * hours`` since the epoch at wall time ``now``, within DRIFT_BOUNDS."""
        if slope == 0.0:
            return 1.0
        hours = (now - self.since.timestamp()) / 3600.0
        low, high = DRIFT_BOUNDS
        return min(high, max(low, 1.0 + slope * hours))


class Variability(BaseModel):
    """The between-trial part of ``noise:`` (see this module's docstring)."""

    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63,
                             description="Random source of each start's draw, with "
                             "--twin-seed (reproducible); absent: os.urandom at every start.")
    restart: RestartNoise | None = Field(default=None, description="Multipliers drawn at every "
                                         "start of the twin.")
    node: dict[Annotated[str, Field(min_length=1, max_length=253)], NodeOffset] = Field(
        default_factory=dict, max_length=MAX_NODES,
        description="Offsets per node: $BISECT_TWIN_NODE, else the host name.")
    drift: Drift | None = Field(default=None, description="Speed and rates drifting with wall "
                                "time.")

    @property
    def varies(self) -> bool:
        """Whether a start can differ from another (else the twin is i.i.d. as it was)."""
        return self.restart is not None or bool(self.node) or self.drift is not None


def lognormal(rng: random.Random, sigma: float) -> float:
    """A multiplier of mean 1 whose log has sd ``sigma`` (exactly 1.0 at sigma 0, drawing
    nothing then)."""
    if sigma <= 0.0:
        return 1.0
    return math.exp(rng.normalvariate(-sigma * sigma / 2, sigma))


def node_name(env: Mapping[str, str]) -> str:
    """The node a twin runs on: ``$BISECT_TWIN_NODE``, else the machine's host name."""
    return env.get(NODE_ENV) or socket.gethostname()


def seeded_source(seed: int, twin_seed: int) -> int:
    payload = json.dumps(["twin noise", seed, twin_seed]).encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:8], "big")


@dataclass(frozen=True)
class Variation:
    """What one start of a twin drew: its multipliers, its node's and the drift."""

    seed: int  # the random source of the draw
    source: str  # "urandom" or "noise.seed"
    restart_rate: float = 1.0
    restart_speed: float = 1.0
    node: str | None = None
    node_rate: float = 1.0
    node_speed: float = 1.0
    drift: Drift | None = None

    def rate(self, now: float) -> float:
        """The multiplier of every rate at wall time ``now``."""
        drift = self.drift.factor(self.drift.rate_per_hour, now) if self.drift else 1.0
        return self.restart_rate * self.node_rate * drift

    def speed(self, now: float) -> float:
        """The speed at wall time ``now``: the time model's durations are divided by it."""
        drift = self.drift.factor(self.drift.speed_per_hour, now) if self.drift else 1.0
        return self.restart_speed * self.node_speed * drift

    def as_json(self, now: float) -> dict[str, Any]:
        return {"seed": self.seed, "source": self.source,
                "restart": {"rate": self.restart_rate, "speed": self.restart_speed},
                "node": self.node, "node_offset": {"rate": self.node_rate,
                                                   "speed": self.node_speed},
                "drift": self.drift.model_dump(mode="json") if self.drift else None,
                "rate": self.rate(now), "speed": self.speed(now)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Variation:
        restart, offset, drift = doc["restart"], doc["node_offset"], doc.get("drift")
        return cls(int(doc["seed"]), str(doc["source"]), float(restart["rate"]),
                   float(restart["speed"]), None if doc.get("node") is None else str(doc["node"]),
                   float(offset["rate"]), float(offset["speed"]),
                   Drift.model_validate(drift) if drift else None)

    def log_line(self, now: float) -> str:
        """The start-up line saying what this start drew."""
        parts = [f"Twin noise: start draw rate x{self.restart_rate:.4g} speed "
                 f"x{self.restart_speed:.4g} (source {self.source}, seed {self.seed:#018x})",
                 f"node {self.node}: rate x{self.node_rate:.4g} speed x{self.node_speed:.4g}"]
        if self.drift:
            parts.append(f"drift since {self.drift.since.isoformat()}: speed "
                         f"{self.drift.speed_per_hour:+g}/h, rate {self.drift.rate_per_hour:+g}/h")
        parts.append(f"now rate x{self.rate(now):.4g} speed x{self.speed(now):.4g}")
        return "; ".join(parts)


def start(spec: Variability | None, *, twin_seed: int, node: str,
          urandom: Callable[[int], bytes] = os.urandom) -> Variation | None:
    """One start's draw (None where ``spec`` varies nothing: the i.i.d. twin)."""
    if spec is None or not spec.varies:
        return None
    if spec.seed is None:
        seed, source = int.from_bytes(urandom(8), "big"), "urandom"
    else:
        seed, source = seeded_source(spec.seed, twin_seed), "noise.seed"
    rng = random.Random(seed)
    restart = spec.restart or RestartNoise()
    rate = lognormal(rng, restart.rate_spread)
    speed = lognormal(rng, restart.speed_spread)
    offset = spec.node.get(node, NodeOffset())
    return Variation(seed, source, rate, speed, node, offset.rate, offset.speed, spec.drift)


def rate_now(variation: Variation | None, now: float) -> float:
    return 1.0 if variation is None else variation.rate(now)


def speed_now(variation: Variation | None, now: float) -> float:
    return 1.0 if variation is None else variation.speed(now)
