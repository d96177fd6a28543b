"""Plain values in and out of the store. Frozen: nothing here talks to the database."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

CAMPAIGN_STATUSES = frozenset({"running", "done", "failed", "interrupted", "refused"})
TRIAL_STATUSES = frozenset({"running", "done", "failed", "discarded"})
# Why a trial failed. infrastructure: the way to the node or a load generator (retried, never
# judged); variant: the variant could not be deployed, proven or kept healthy (evidence); setup:
# the node's own setup (a unit not installed or that cannot start): the run stops, bad input.
FAILURE_CLASSES = frozenset({"infrastructure", "variant", "setup"})
STEP_OUTCOMES = frozenset({"ok", "failed", "skipped"})


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
    failure: str | None = None
    """A failed trial's class (FAILURE_CLASSES); None for any other status."""
    failed_step: str | None = None
    """The first of its steps that failed (apply, restart, health, prove, hooks, probe...): why a
    failed trial failed; None for any other, or one stored before its steps were."""
    performance: dict[str, Any] | None = None
    """What its workload measured (``StressResult.performance``: throughput, goodput, latency
    percentiles); None for a trial not done, or stored before they were (0007)."""

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


@dataclass(frozen=True, slots=True)
class StepRecord:
    id: int
    trial_id: int
    position: int  # its place in the trial's chain
    name: str  # apply, restart, health, prove, hooks, stress, collect
    service: str | None  # the service a restart, health or prove step is about
    started_at: datetime
    duration_s: float
    outcome: str  # STEP_OUTCOMES
    details: dict[str, Any]  # what it observed: the proof's checks, an error, counts


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
class StepRow:
    """One step of a trial as it ran; its position is its place in the list."""

    name: str
    service: str | None
    started_at: datetime
    duration_s: float
    outcome: str
    details: dict[str, Any] = field(default_factory=dict)  # JSON-able


@dataclass(frozen=True, slots=True)
class TrialTiming:
    wall_s: float | None = None
    restart_s: float | None = None
    workload_s: float | None = None
    restarts: int = 0
    stopped_early: bool = False  # a sequential test ended the workload before its planned end
