"""How a stress run's sessions arrive: its own module, without pydantic, so that the command
line can offer the choice (`bisect stress --arrival`) without loading the workload's schema."""

from __future__ import annotations

from enum import StrEnum


class Arrival(StrEnum):
    BURST = "burst"  # every session starts at once (the seed investigation's harness)
    POISSON = "poisson"  # sessions start at exponential gaps of mean 1/request_rate
