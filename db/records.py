"""Plain values in and out of the store. Frozen: nothing here talks to the database."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

CAMPAIGN_STATUSES = frozenset({"running", "done", "failed", "interrupted", "refused"})
TRIAL_STATUSES = frozenset({"running", "done", "failed", "discarded"})


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace(",", "%2C").replace("=", "%3D")


def variant_key(levels: dict[str, str]) -> str:
    """Canonical key of a variant: ``a=x,b=y`` sorted by factor (``%``, ``,``, ``=`` escaped)."""
    return ",".join(f"{_escape(k)}={_escape(levels[k])}" for k in sorted(levels))


# --- returned by the store -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CampaignRecord:
    id: str
    name: str
    created_at: datetime
    status: str
    spec: dict[str, Any]
    source: str
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class VariantRecord:
    id: int
    campaign_id: str
    key: str
    levels: dict[str, str]


@dataclass(frozen=True, slots=True)
class TrialRecord:
    id: int
    campaign_id: str
    variant_id: int
    levels: dict[str, str]
    seq: int
    pool: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    wall_s: float | None
    restart_s: float | None
    workload_s: float | None
    restarts: int
    error: str | None
    seed: int
    counts: dict[str, int] = field(default_factory=dict)
    """Sessions of this trial tallied by outcome; outcomes that never occurred are absent."""
    stopped_early: bool = False
    events: dict[str, int] = field(default_factory=dict)
    """The services' log events of this trial tallied by kind (experiments.collect)."""

    @property
    def sessions(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True, slots=True)
class SessionRecord:
    id: int
    trial_id: int
    idx: int
    key: str
    outcome: str
    turns: int
    first_bad_turn: int | None
    evidence: str | None
    latency_s: float


@dataclass(frozen=True, slots=True)
class MetricRecord:
    id: int
    trial_id: int
    service: str
    t: float
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class LogRecord:
    id: int
    trial_id: int
    service: str
    line_no: int
    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class GeneratorRecord:
    id: int
    trial_id: int
    position: int  # the generator's place in the trial: it ran sessions position, position+n, …
    node_id: str
    address: str
    sessions: int
    finished: int
    stopped: bool


# --- given to the store ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionRow:
    idx: int
    key: str
    outcome: str
    turns: int
    first_bad_turn: int | None
    evidence: str | None
    latency_s: float


@dataclass(frozen=True, slots=True)
class MetricRow:
    service: str
    t: float
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class LogRow:
    service: str
    line_no: int
    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class GeneratorRow:
    """Where one load generator ran and what it did; its position is its place in the list."""

    node_id: str  # the Ray node
    address: str  # that node's IP address
    sessions: int  # given
    finished: int  # reported
    stopped: bool  # told to stop with sessions still to run


@dataclass(frozen=True, slots=True)
class TrialTiming:
    wall_s: float | None = None
    restart_s: float | None = None
    workload_s: float | None = None
    restarts: int = 0
    stopped_early: bool = False  # a sequential test ended the workload before its planned end
