"""SQLAlchemy models of the store. Private to ``db``: callers see ``db.records`` values."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in and out, whatever the backend stores."""

    impl = DateTime
    cache_ok = True

    def __init__(self) -> None:
        super().__init__(timezone=True)

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the store keeps UTC")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class ServerText(TypeDecorator[str]):
    """Text as servers return it. PostgreSQL refuses NUL in text (SQLite keeps it): NUL becomes
    U+FFFD on every backend, so a trial stores the same text whatever the store is."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else value.replace("\x00", "\ufffd")


# 64-bit: a seed is workload.seed * 1_000_003 + its draw (PostgreSQL's INTEGER is 32-bit; SQLite's
# is always 64-bit, and stays INTEGER there so that the SQLite schema is unchanged).
BigInt = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime,
        float: Double,
    }


class Campaign(Base):
    __tablename__ = "campaign"

    id: Mapped[str] = mapped_column(primary_key=True)
    name: Mapped[str]
    created_at: Mapped[datetime]
    status: Mapped[str]
    spec_json: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    finished_at: Mapped[datetime | None]


class Variant(Base):
    __tablename__ = "variant"
    __table_args__ = (UniqueConstraint("campaign_id", "key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    campaign_id: Mapped[str] = mapped_column(ForeignKey("campaign.id"))
    key: Mapped[str] = mapped_column(Text)
    levels_json: Mapped[str] = mapped_column(Text)


class Trial(Base):
    __tablename__ = "trial"
    __table_args__ = (Index(None, "campaign_id", "seq"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    campaign_id: Mapped[str] = mapped_column(ForeignKey("campaign.id"))
    variant_id: Mapped[int] = mapped_column(ForeignKey("variant.id"), index=True)
    seq: Mapped[int]
    pool: Mapped[str]
    status: Mapped[str]
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    wall_s: Mapped[float | None]
    restart_s: Mapped[float | None]
    workload_s: Mapped[float | None]
    restarts: Mapped[int] = mapped_column(default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(ServerText)
    seed: Mapped[int] = mapped_column(BigInt)
    stopped_early: Mapped[bool] = mapped_column(default=False, server_default=false())
    failure: Mapped[str | None]  # a failed trial's class: "infrastructure" or "variant"
    # what its workload measured (StressResult.performance); NULL: failed, or stored before 0007
    performance_json: Mapped[str | None] = mapped_column(Text)


class TrialSession(Base):
    """One simulated agent conversation (table ``session``)."""

    __tablename__ = "session"
    __table_args__ = (UniqueConstraint("trial_id", "idx"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trial.id"), index=True)
    idx: Mapped[int]
    key: Mapped[str]
    outcome: Mapped[str]
    turns: Mapped[int]
    first_bad_turn: Mapped[int | None]
    evidence: Mapped[str | None] = mapped_column(ServerText)
    latency_s: Mapped[float]


class MetricSample(Base):
    __tablename__ = "metric_sample"

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trial.id"), index=True)
    service: Mapped[str]
    t: Mapped[float]
    name: Mapped[str]
    labels_json: Mapped[str] = mapped_column(Text)
    value: Mapped[float]


class LogEvent(Base):
    __tablename__ = "log_event"

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trial.id"), index=True)
    service: Mapped[str]
    line_no: Mapped[int]
    kind: Mapped[str]
    text: Mapped[str] = mapped_column(ServerText)


class TrialGenerator(Base):
    """One load generator of a trial: the machine it ran on and its share of the sessions."""

    __tablename__ = "trial_generator"
    __table_args__ = (UniqueConstraint("trial_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trial.id"), index=True)
    position: Mapped[int]
    node_id: Mapped[str]
    address: Mapped[str]
    sessions: Mapped[int]
    finished: Mapped[int]
    stopped: Mapped[bool]


class TrialStep(Base):
    """One step of a trial's chain (apply, restart, health, prove, hooks, stress, collect): when
    it ran, how long, its outcome and what it observed (JSON; the proof of load's checks)."""

    __tablename__ = "trial_step"
    __table_args__ = (UniqueConstraint("trial_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trial.id"), index=True)
    position: Mapped[int]
    name: Mapped[str]
    service: Mapped[str | None]
    started_at: Mapped[datetime]
    duration_s: Mapped[float]
    outcome: Mapped[str]
    details_json: Mapped[str] = mapped_column(ServerText)


class NodeLock(Base):
    """A node a campaign held (its lock file is on the node); ``released_at`` None: still held,
    or its driver died holding it."""

    __tablename__ = "node_lock"

    id: Mapped[int] = mapped_column(primary_key=True)
    campaign_id: Mapped[str] = mapped_column(ForeignKey("campaign.id"), index=True)
    node: Mapped[str]
    acquired_at: Mapped[datetime]
    released_at: Mapped[datetime | None]


class Sweep(Base):
    """A scheduled regression sweep, by the name its sweep file gives it."""

    __tablename__ = "sweep"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(unique=True)
    created_at: Mapped[datetime]


class SweepRun(Base):
    """One run of a sweep: its ordinary campaign (none if skipped or missed), its outcome and
    whether it was accepted as the sweep's baseline."""

    __tablename__ = "sweep_run"
    __table_args__ = (UniqueConstraint("sweep_id", "seq"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweep.id"))
    seq: Mapped[int]  # 1, 2, … within its sweep
    campaign_id: Mapped[str | None] = mapped_column(ForeignKey("campaign.id"), index=True)
    status: Mapped[str]
    trigger: Mapped[str]  # "manual" or "schedule"
    schedule: Mapped[str | None]
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    accepted: Mapped[bool] = mapped_column(default=False, server_default=false())
    accepted_at: Mapped[datetime | None]
    baseline_run_id: Mapped[int | None] = mapped_column(ForeignKey("sweep_run.id"))
    result_json: Mapped[str | None] = mapped_column(Text)
    facts_json: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(ServerText)
    slot: Mapped[datetime | None]  # a missed run: the time it was scheduled for


class SweepHunt(Base):
    """A campaign a sweep run started to find what made a regressed variant differ from its
    baseline (``good``: the baseline's side, ``bad``: the regressed one)."""

    __tablename__ = "sweep_hunt"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("sweep_run.id"), index=True)
    campaign_id: Mapped[str] = mapped_column(ForeignKey("campaign.id"))
    good: Mapped[str] = mapped_column(Text)
    bad: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]


class SweepLock(Base):
    """The run that holds its sweep, one row per held sweep: inserting it is taking the lock
    (the primary key refuses a second), deleting it is releasing it. Who holds it (host, boot,
    pid and the pid's start time) tells a dead holder on this host from a live one."""

    __tablename__ = "sweep_lock"

    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweep.id"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("sweep_run.id"))
    host: Mapped[str]
    boot_id: Mapped[str | None]  # the host's boot (/proc/sys/kernel/random/boot_id)
    pid: Mapped[int]
    pid_start: Mapped[int | None] = mapped_column(BigInt)  # clock ticks since boot
    since: Mapped[datetime]
