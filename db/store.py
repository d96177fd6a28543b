"""The store: every write and read of campaigns, variants, trials and what trials observed.

ORM rows never leave this module; callers get the frozen values of ``db.records``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, fields
from types import TracebackType
from typing import Any, Self, TypeVar

from sqlalchemy import Engine, func, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from db.engine import make_engine
from db.errors import NotFound, StoreError
from db.integrity import StoreHealth, inspect_campaign, store_damage, unreadable
from db.migrate import upgrade_engine
from db.models import (
    Campaign,
    LogEvent,
    MetricSample,
    NodeLock,
    Trial,
    TrialGenerator,
    TrialSession,
    TrialStep,
    Variant,
    utcnow,
)
from db.records import (
    CAMPAIGN_STATUSES,
    FAILURE_CLASSES,
    STEP_OUTCOMES,
    CampaignRecord,
    GeneratorRecord,
    GeneratorRow,
    LogRecord,
    LogRow,
    MetricRecord,
    MetricRow,
    SessionRecord,
    SessionRow,
    StepRecord,
    StepRow,
    TrialRecord,
    TrialTiming,
    VariantRecord,
    variant_key,
)
from db.sibling import sibling_url

R = TypeVar("R")
ID_BATCH = 500  # trial ids in one query's IN (...)


def _reason(exc: SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig) if orig is not None else str(exc).split("\n", 1)[0]


def _campaign(row: Campaign) -> CampaignRecord:
    return _record(CampaignRecord, row, spec=json.loads(row.spec_json))


def _variant(row: Variant) -> VariantRecord:
    return _record(VariantRecord, row, levels=json.loads(row.levels_json))


def _trial(row: Trial, levels_json: str, counts: dict[str, int],
           events: dict[str, int], failed_step: str | None) -> TrialRecord:
    performance = None if row.performance_json is None else json.loads(row.performance_json)
    return _record(TrialRecord, row, levels=json.loads(levels_json), counts=counts,
                   events=events, performance=performance, failed_step=failed_step)


def _failed_steps(rows: Any) -> dict[int, str]:
    """The first failed step of each trial, from (trial id, step name) rows by position."""
    first: dict[int, str] = {}
    for trial_id, name in rows:
        first.setdefault(trial_id, name)
    return first


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite number made None: JSON has no such numbers (and a
    figure that is not one is none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


_FIELDS: dict[type[Any], tuple[str, ...]] = {}  # a record's field names, looked up once


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    return names


def _record(cls: type[R], row: Any, **computed: Any) -> R:
    """The frozen record of a row whose columns bear the record's field names: an ORM object,
    or a plain row's mapping (a Row's attributes are not all its columns: ``Row.t``)."""
    names = [name for name in _field_names(cls) if name not in computed]
    if isinstance(row, Mapping):
        return cls(**{name: row[name] for name in names}, **computed)
    return cls(**{name: getattr(row, name) for name in names}, **computed)


def _metric(row: Mapping[str, Any]) -> MetricRecord:
    return _record(MetricRecord, row, labels=json.loads(row["labels_json"]))


def _step(row: Mapping[str, Any]) -> StepRecord:
    return _record(StepRecord, row, details=json.loads(row["details_json"]))


def _missing_file(engine: Engine) -> str | None:
    """The SQLite file ``engine`` names, if it does not exist (a server database: None)."""
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return None if os.path.exists(path) else path


def _owner_only(engine: Engine) -> None:
    """A new SQLite file is created readable by its owner alone (SQLite gives its -wal and -shm
    files the database file's mode): the store holds every server reply of every trial."""
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:"):
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass  # an existing store keeps the mode its owner gave it
    except OSError as exc:
        raise StoreError(f"cannot create the store {path}: {exc.strerror or exc}") from exc


def _apply_timing(trial: Trial, timing: TrialTiming) -> None:
    trial.wall_s = timing.wall_s
    trial.restart_s = timing.restart_s
    trial.workload_s = timing.workload_s
    trial.restarts = timing.restarts
    trial.stopped_early = timing.stopped_early


def _add_steps(s: Session, trial_id: int, steps: Sequence[StepRow]) -> None:
    """The trial's steps, in the transaction that finishes or fails it: none is ever lost."""
    for step in steps:
        if step.outcome not in STEP_OUTCOMES:
            raise StoreError(f"trial {trial_id}: step {step.name!r} has unknown outcome "
                             f"{step.outcome!r} (known: {', '.join(sorted(STEP_OUTCOMES))})")
    if steps:
        s.execute(insert(TrialStep), [
            {"trial_id": trial_id, "position": position, "name": step.name,
             "service": step.service, "started_at": step.started_at,
             "duration_s": step.duration_s, "outcome": step.outcome,
             "details_json": json.dumps(step.details, sort_keys=True, default=str)}
            for position, step in enumerate(steps)
        ])


class Store:
    """A database of campaigns. ``Store.open(path_or_url)`` migrates it to the newest schema."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url_or_path: str, create: bool = True) -> Store:
        """Open (creating if needed) and upgrade the database; a plain path means SQLite.
        ``create=False`` (what reads it): a SQLite file that does not exist is NotFound, and
        neither it nor its directory is made."""
        try:
            engine = make_engine(url_or_path, create)
        except (SQLAlchemyError, ValueError, ImportError) as exc:  # ImportError: no driver
            raise StoreError(f"cannot open the store {url_or_path!r}: {exc}") from exc
        if not create and (missing := _missing_file(engine)) is not None:
            engine.dispose()
            raise NotFound(f"no store at {missing}")
        try:
            _owner_only(engine)
            upgrade_engine(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    @property
    def url(self) -> str:
        return self._engine.url.render_as_string(hide_password=True)

    def sibling(self, name: str) -> str:
        """The URL of the database ``name`` next to this store (db/sibling.py), made if
        missing; it holds the store's password, if any: keep it in memory."""
        return sibling_url(self._engine.url, name)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def _session(self, doing: str) -> Iterator[Session]:
        """One transaction: commit on success, roll back on any error, errors as StoreError."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise StoreError(f"cannot {doing}: {_reason(exc)}") from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    # --- campaigns ------------------------------------------------------------------------

    def create_campaign(
        self, id: str, name: str, spec: dict[str, Any], source: str
    ) -> CampaignRecord:
        with self._session(f"create campaign {id!r}") as s:
            if s.get(Campaign, id) is not None:
                raise StoreError(f"cannot create campaign {id!r}: it already exists")
            row = Campaign(
                id=id, name=name, created_at=utcnow(), status="running",
                spec_json=json.dumps(spec), source=source,  # the author's order
            )
            s.add(row)
            s.flush()
            return _campaign(row)

    def get_campaign(self, id: str) -> CampaignRecord:
        with self._session(f"read campaign {id!r}") as s:
            return _campaign(self._get_campaign(s, id))

    def list_campaigns(self) -> list[CampaignRecord]:
        """All campaigns, newest first."""
        with self._session("list campaigns") as s:
            rows = s.scalars(select(Campaign).order_by(Campaign.created_at.desc(), Campaign.id))
            return [_campaign(row) for row in rows]

    def set_campaign_spec(self, id: str, spec: dict[str, Any]) -> None:
        """Replace a campaign's spec (a budget raised for a resume: orchestrator/budgets.py)."""
        with self._session(f"update campaign {id!r}") as s:
            self._get_campaign(s, id).spec_json = json.dumps(spec)

    def set_campaign_status(self, id: str, status: str, finished: bool = False) -> None:
        """Set the status; ``finished`` stamps ``finished_at`` now, otherwise it is cleared."""
        if status not in CAMPAIGN_STATUSES:
            known = ", ".join(sorted(CAMPAIGN_STATUSES))
            raise StoreError(f"unknown campaign status {status!r} (known: {known})")
        with self._session(f"set the status of campaign {id!r}") as s:
            row = self._get_campaign(s, id)
            row.status = status
            row.finished_at = utcnow() if finished else None

    def lock_taken(self, campaign_id: str, node: str) -> None:
        with self._session(f"record the lock of node {node!r}") as s:
            s.add(NodeLock(campaign_id=campaign_id, node=node, acquired_at=utcnow()))

    def lock_released(self, campaign_id: str, node: str) -> None:
        with self._session(f"record the release of node {node!r}") as s:
            for row in s.scalars(select(NodeLock).where(
                    NodeLock.campaign_id == campaign_id, NodeLock.node == node,
                    NodeLock.released_at.is_(None))):
                row.released_at = utcnow()

    def health(self, campaign_id: str) -> StoreHealth:
        """What the store holds of the campaign that it should not (``bisect doctor``)."""
        try:
            with self._session("check the store file") as s:
                damage = store_damage(s)
        except StoreError as exc:  # so damaged that the check itself cannot read it
            damage = (str(exc).removeprefix("cannot check the store file: "),)
        try:
            with self._session(f"check campaign {campaign_id!r}") as s:
                found = inspect_campaign(s, campaign_id, damage)
        except StoreError as exc:
            if not damage:
                raise
            return unreadable(campaign_id, (*damage, str(exc)))
        if found is None:
            raise NotFound(f"no campaign {campaign_id!r}")
        return found

    def held_locks(self, campaign_id: str | None = None) -> list[tuple[str, str]]:
        """(campaign, node) of every lock taken and not released: live or left by a dead driver."""
        with self._session("read the node locks") as s:
            query = select(NodeLock.campaign_id, NodeLock.node).where(
                NodeLock.released_at.is_(None))
            if campaign_id is not None:
                query = query.where(NodeLock.campaign_id == campaign_id)
            return [(row[0], row[1]) for row in s.execute(query.order_by(NodeLock.id))]

    @staticmethod
    def _get_campaign(s: Session, id: str) -> Campaign:
        row = s.get(Campaign, id)
        if row is None:
            raise NotFound(f"no campaign {id!r}")
        return row

    # --- variants -------------------------------------------------------------------------

    def variant(self, campaign_id: str, levels: dict[str, str]) -> VariantRecord:
        """The campaign's variant with these levels, created on first use."""
        key = variant_key(levels)
        query = select(Variant).where(Variant.campaign_id == campaign_id, Variant.key == key)
        for _attempt in range(2):  # a concurrent writer may insert the same key between the two
            try:
                with self._session(f"record variant {key!r}") as s:
                    self._get_campaign(s, campaign_id)
                    row = s.scalars(query).one_or_none()
                    if row is None:
                        row = Variant(
                            campaign_id=campaign_id, key=key,
                            levels_json=json.dumps(levels, sort_keys=True),
                        )
                        s.add(row)
                        s.flush()
                    return _variant(row)
            except StoreError as exc:
                if not isinstance(exc.__cause__, IntegrityError):
                    raise
        raise StoreError(f"cannot record variant {key!r} of campaign {campaign_id!r}")

    def variants(self, campaign_id: str) -> list[VariantRecord]:
        with self._session(f"list the variants of campaign {campaign_id!r}") as s:
            query = select(Variant).where(Variant.campaign_id == campaign_id).order_by(Variant.id)
            return [_variant(row) for row in s.scalars(query)]

    # --- trials ---------------------------------------------------------------------------

    def start_trial(self, campaign_id: str, variant_id: int, seq: int, pool: str, seed: int) -> int:
        """Record a trial as running; returns its id."""
        with self._session(f"start trial {seq} of campaign {campaign_id!r}") as s:
            self._get_campaign(s, campaign_id)
            variant = s.get(Variant, variant_id)
            if variant is None or variant.campaign_id != campaign_id:
                raise NotFound(f"no variant {variant_id} in campaign {campaign_id!r}")
            row = Trial(
                campaign_id=campaign_id, variant_id=variant_id, seq=seq, pool=pool,
                status="running", started_at=utcnow(), restarts=0, seed=seed,
            )
            s.add(row)
            s.flush()
            return row.id

    @staticmethod
    def _running_trial(s: Session, trial_id: int) -> Trial:
        row = s.get(Trial, trial_id)
        if row is None:
            raise NotFound(f"no trial {trial_id}")
        if row.status != "running":
            raise StoreError(f"trial {trial_id} is {row.status}, not running")
        return row

    def finish_trial(
        self,
        trial_id: int,
        timing: TrialTiming,
        sessions: Sequence[SessionRow],
        metrics: Sequence[MetricRow],
        logs: Sequence[LogRow],
        generators: Sequence[GeneratorRow] = (),
        steps: Sequence[StepRow] = (),
        performance: Mapping[str, Any] | None = None,
    ) -> None:
        """Store everything the trial observed and mark it done, all in one transaction.
        ``generators``: the load generators that ran its sessions, in order (none: the pool's
        actor ran them); ``steps``: its chain of steps, in order; ``performance``: what its
        workload measured (``StressResult.performance``), JSON-able.

        Metric samples whose value is NaN are left out (a gap, as a missed scrape)."""
        with self._session(f"finish trial {trial_id}") as s:
            row = self._running_trial(s, trial_id)
            if sessions:
                s.execute(insert(TrialSession), [
                    {**asdict(one), "trial_id": trial_id} for one in sessions
                ])
            # A NaN sample (an empty summary, a 0/0 ratio) is a gap in the series: SQLite cannot
            # keep NaN (it becomes NULL), so no backend keeps it.
            samples = [
                {"trial_id": trial_id, "service": m.service, "t": m.t, "name": m.name,
                 "labels_json": json.dumps(m.labels, sort_keys=True), "value": m.value}
                for m in metrics if not math.isnan(m.value)
            ]
            if samples:
                s.execute(insert(MetricSample), samples)
            if logs:
                s.execute(insert(LogEvent), [
                    {**asdict(one), "trial_id": trial_id} for one in logs
                ])
            if generators:
                s.execute(insert(TrialGenerator), [
                    {**asdict(one), "trial_id": trial_id, "position": position}
                    for position, one in enumerate(generators)
                ])
            _add_steps(s, trial_id, steps)
            _apply_timing(row, timing)
            if performance is not None:
                row.performance_json = json.dumps(_finite(dict(performance)), sort_keys=True,
                                                  allow_nan=False)
            row.status = "done"
            row.finished_at = utcnow()

    def fail_trial(self, trial_id: int, error: str, timing: TrialTiming | None = None, *,
                   failure: str = "variant", steps: Sequence[StepRow] = ()) -> None:
        """Mark the trial failed with its class (``FAILURE_CLASSES``) and the steps it ran."""
        if failure not in FAILURE_CLASSES:
            raise StoreError(f"trial {trial_id}: unknown failure class {failure!r} "
                             f"(known: {', '.join(sorted(FAILURE_CLASSES))})")
        with self._session(f"fail trial {trial_id}") as s:
            row = self._running_trial(s, trial_id)
            if timing is not None:
                _apply_timing(row, timing)
            _add_steps(s, trial_id, steps)
            row.status = "failed"
            row.failure = failure
            row.error = error
            row.finished_at = utcnow()

    def discard_unfinished(self, campaign_id: str) -> list[int]:
        """Mark the campaign's still-running trials discarded (before a resume); their ids."""
        with self._session(f"discard unfinished trials of campaign {campaign_id!r}") as s:
            rows = list(s.scalars(
                select(Trial)
                .where(Trial.campaign_id == campaign_id, Trial.status == "running")
                .order_by(Trial.seq, Trial.id)
            ))
            for row in rows:
                row.status = "discarded"
            return [row.id for row in rows]

    def trials(self, campaign_id: str, status: str | None = "done") -> list[TrialRecord]:
        """The campaign's trials with ``status`` (all if ``None``), by seq then id."""
        with self._session(f"list the trials of campaign {campaign_id!r}") as s:
            query = (
                select(Trial, Variant.levels_json)
                .join(Variant, Trial.variant_id == Variant.id)
                .where(Trial.campaign_id == campaign_id)
            )
            tally = (
                select(TrialSession.trial_id, TrialSession.outcome, func.count())
                .join(Trial, TrialSession.trial_id == Trial.id)
                .where(Trial.campaign_id == campaign_id)
                .group_by(TrialSession.trial_id, TrialSession.outcome)
            )
            logged = (
                select(LogEvent.trial_id, LogEvent.kind, func.count())
                .join(Trial, LogEvent.trial_id == Trial.id)
                .where(Trial.campaign_id == campaign_id)
                .group_by(LogEvent.trial_id, LogEvent.kind)
            )
            if status is not None:
                query = query.where(Trial.status == status)
                tally = tally.where(Trial.status == status)
                logged = logged.where(Trial.status == status)
            counts: dict[int, dict[str, int]] = {}
            for trial_id, outcome, n in s.execute(tally):
                counts.setdefault(trial_id, {})[outcome] = n
            events: dict[int, dict[str, int]] = {}
            for trial_id, kind, n in s.execute(logged):
                events.setdefault(trial_id, {})[kind] = n
            failed = _failed_steps(s.execute(
                select(TrialStep.trial_id, TrialStep.name)
                .join(Trial, TrialStep.trial_id == Trial.id)
                .where(Trial.campaign_id == campaign_id, Trial.status == "failed",
                       TrialStep.outcome == "failed")
                .order_by(TrialStep.trial_id, TrialStep.position)))
            rows = s.execute(query.order_by(Trial.seq, Trial.id))
            return [_trial(row, levels, counts.get(row.id, {}), events.get(row.id, {}),
                           failed.get(row.id)) for row, levels in rows]

    def get_trial(self, trial_id: int) -> TrialRecord:
        with self._session(f"read trial {trial_id}") as s:
            found = s.execute(
                select(Trial, Variant.levels_json)
                .join(Variant, Trial.variant_id == Variant.id)
                .where(Trial.id == trial_id)
            ).one_or_none()
            if found is None:
                raise NotFound(f"no trial {trial_id}")
            tally = s.execute(
                select(TrialSession.outcome, func.count())
                .where(TrialSession.trial_id == trial_id)
                .group_by(TrialSession.outcome)
            )
            logged = s.execute(
                select(LogEvent.kind, func.count())
                .where(LogEvent.trial_id == trial_id)
                .group_by(LogEvent.kind)
            )
            failed = _failed_steps(s.execute(
                select(TrialStep.trial_id, TrialStep.name)
                .where(TrialStep.trial_id == trial_id, TrialStep.outcome == "failed")
                .order_by(TrialStep.position)))
            return _trial(found[0], found[1], {outcome: n for outcome, n in tally},
                          {kind: n for kind, n in logged}, failed.get(trial_id))

    # --- what a trial observed ------------------------------------------------------------

    def sessions(self, trial_id: int) -> list[SessionRecord]:
        return self._of_trial(trial_id, "sessions", TrialSession,
                              (TrialSession.idx, TrialSession.id),
                              lambda r: _record(SessionRecord, r))

    def metrics(self, trial_id: int, names: Collection[str] | None = None) -> list[MetricRecord]:
        """The trial's metric samples by time; only those ``names`` if given."""
        return self.trials_metrics([trial_id], names).get(trial_id, [])

    def trials_metrics(self, trial_ids: Collection[int], names: Collection[str] | None = None
                       ) -> dict[int, list[MetricRecord]]:
        """The metric samples of these trials (``names`` only, if given), read together, by
        trial id, each by time; a trial with none is absent."""
        where = [] if names is None else [MetricSample.name.in_(names)]
        return self._of_trials("metrics", MetricSample, trial_ids, where,
                               (MetricSample.trial_id, MetricSample.t, MetricSample.id), _metric)

    def log_events(self, trial_id: int) -> list[LogRecord]:
        return self._of_trial(trial_id, "log events", LogEvent, (LogEvent.id,),
                              lambda r: _record(LogRecord, r))

    def trials_log_events(self, trial_ids: Collection[int], kinds: Collection[str] | None = None
                          ) -> dict[int, list[LogRecord]]:
        """The log events of these trials (of ``kinds`` only, if given), read together, by
        trial id, each in order; a trial with none is absent."""
        where = [] if kinds is None else [LogEvent.kind.in_(kinds)]
        return self._of_trials("log events", LogEvent, trial_ids, where,
                               (LogEvent.trial_id, LogEvent.id), lambda r: _record(LogRecord, r))

    def generators(self, trial_id: int) -> list[GeneratorRecord]:
        """The load generators that ran the trial's sessions, in order; none if its pool's actor
        ran them itself."""
        return self._of_trial(trial_id, "load generators", TrialGenerator,
                              (TrialGenerator.position,), lambda r: _record(GeneratorRecord, r))

    def steps(self, trial_id: int) -> list[StepRecord]:
        """The trial's chain of steps as it ran, in order (none for a trial stored before 0006,
        or one still running)."""
        return self._of_trial(trial_id, "steps", TrialStep, (TrialStep.position,), _step)

    def campaign_steps(self, campaign_id: str) -> dict[int, list[StepRecord]]:
        """Every stored step of the campaign's trials, by trial id, each trial's in order."""
        return self._of_campaign(campaign_id, "steps", TrialStep,
                                 (TrialStep.trial_id, TrialStep.position), _step)

    def campaign_generators(self, campaign_id: str) -> dict[int, list[GeneratorRecord]]:
        """The load generators of every trial of the campaign, by trial id, each trial's in
        order; a trial whose pool's actor ran its sessions is absent."""
        return self._of_campaign(campaign_id, "load generators", TrialGenerator,
                                 (TrialGenerator.trial_id, TrialGenerator.position),
                                 lambda r: _record(GeneratorRecord, r))

    # Plain rows (a Core select of the table's columns), not ORM objects: a trial holds tens
    # of thousands of samples, and building an ORM instance for each, only to copy it into a
    # record, is most of the time of reading them.

    def _of_trial(self, trial_id: int, what: str, model: Any, order: Sequence[Any],
                  record: Callable[[Any], R]) -> list[R]:
        with self._session(f"read the {what} of trial {trial_id}") as s:
            query = (select(*model.__table__.columns).where(model.trial_id == trial_id)
                     .order_by(*order))
            return [record(row) for row in s.execute(query).mappings()]

    def _of_trials(self, what: str, model: Any, trial_ids: Collection[int],
                   where: Sequence[Any], order: Sequence[Any],
                   record: Callable[[Any], R]) -> dict[int, list[R]]:
        ids = sorted(set(trial_ids))
        found: dict[int, list[R]] = {}
        with self._session(f"read the {what} of trials") as s:
            # a few hundred ids a query: SQLite bounds the parameters of one statement
            for start in range(0, len(ids), ID_BATCH):
                query = (select(*model.__table__.columns)
                         .where(model.trial_id.in_(ids[start:start + ID_BATCH]), *where)
                         .order_by(*order))
                for row in s.execute(query).mappings():
                    found.setdefault(row["trial_id"], []).append(record(row))
        return found

    def _of_campaign(self, campaign_id: str, what: str, model: Any, order: Sequence[Any],
                     record: Callable[[Any], R]) -> dict[int, list[R]]:
        with self._session(f"read the {what} of campaign {campaign_id!r}") as s:
            query = (select(*model.__table__.columns)
                     .join(Trial, model.trial_id == Trial.id)
                     .where(Trial.campaign_id == campaign_id).order_by(*order))
            found: dict[int, list[R]] = {}
            for row in s.execute(query).mappings():
                found.setdefault(row["trial_id"], []).append(record(row))
            return found
