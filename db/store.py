"""The store: every write and read of campaigns, variants, trials and what trials observed.

Here: opening it, campaigns, node locks, variants and the writes of trials; the reads of trials
and of what they observed are ``db.trial_reads``, the transaction ``db.transactions``. ORM rows
never leave the ``db`` package; callers get the frozen values of ``db.records`` (``db.rows``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from types import TracebackType
from typing import Any, Self

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from db.engine import make_engine
from db.errors import NotFound, StoreError
from db.integrity import StoreHealth, inspect_campaign, store_damage, unreadable
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
    GeneratorRow,
    LogRow,
    MetricRow,
    SessionRow,
    StepRow,
    TrialTiming,
    VariantRecord,
    variant_key,
)
from db.revision import at_head
from db.rows import campaign_record, finite, variant_record
from db.sibling import sibling_url
from db.trial_reads import TrialReads


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


class Store(TrialReads):
    """A database of campaigns. ``Store.open(path_or_url)`` migrates it to the newest schema."""

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
            if not at_head(engine):
                from db.migrate import upgrade_engine  # alembic: only where there is work

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
            return campaign_record(row)

    def get_campaign(self, id: str) -> CampaignRecord:
        with self._session(f"read campaign {id!r}") as s:
            return campaign_record(self._get_campaign(s, id))

    def list_campaigns(self) -> list[CampaignRecord]:
        """All campaigns, newest first."""
        with self._session("list campaigns") as s:
            rows = s.scalars(select(Campaign).order_by(Campaign.created_at.desc(), Campaign.id))
            return [campaign_record(row) for row in rows]

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
                    return variant_record(row)
            except StoreError as exc:
                if not isinstance(exc.__cause__, IntegrityError):
                    raise
        raise StoreError(f"cannot record variant {key!r} of campaign {campaign_id!r}")

    def variants(self, campaign_id: str) -> list[VariantRecord]:
        with self._session(f"list the variants of campaign {campaign_id!r}") as s:
            query = select(Variant).where(Variant.campaign_id == campaign_id).order_by(Variant.id)
            return [variant_record(row) for row in s.scalars(query)]

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
                row.performance_json = json.dumps(finite(dict(performance)), sort_keys=True,
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
