"""The sweeps in the store: each sweep's runs, the hunts they started, its baseline; a run takes
the lock that lets one run of a sweep at a time (``db.sweep_lock``) in the transaction that
creates it, and releases it in the one that ends it.

Rows never leave this module; callers get ``db.sweep_records`` values.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.errors import NotFound, StoreError
from db.models import Campaign, Sweep, SweepHunt, SweepRun, utcnow
from db.rows import finite
from db.store import Store
from db.sweep_lock import Raced, held, release, take, take_over, this_process
from db.sweep_records import (
    FINISHED_STATUSES,
    TRIGGERS,
    HuntRecord,
    SweepRecord,
    SweepRunRecord,
)

R = TypeVar("R")
ATTEMPTS = 5  # a concurrent writer took the same seq, sweep name or stale lock: read again


def _json(value: Mapping[str, Any] | None) -> str | None:
    # the caller's key order kept (variants in the order the sweep file gives them); a value JSON
    # has no word for (a datetime) stored as its text, a NaN as null
    return None if value is None else json.dumps(finite(dict(value)), allow_nan=False,
                                                 default=str)


def _loads(text: str | None) -> dict[str, Any] | None:
    return None if text is None else cast(dict[str, Any], json.loads(text))


def _run(row: SweepRun, sweep: str) -> SweepRunRecord:
    return SweepRunRecord(
        id=row.id, sweep_id=row.sweep_id, sweep=sweep, seq=row.seq, campaign_id=row.campaign_id,
        status=row.status, trigger=row.trigger, schedule=row.schedule, started_at=row.started_at,
        finished_at=row.finished_at, accepted=row.accepted, accepted_at=row.accepted_at,
        baseline_run_id=row.baseline_run_id, result=_loads(row.result_json),
        facts=_loads(row.facts_json), reason=row.reason, slot=row.slot)


def _hunt(row: SweepHunt) -> HuntRecord:
    return HuntRecord(id=row.id, run_id=row.run_id, campaign_id=row.campaign_id, good=row.good,
                      bad=row.bad, created_at=row.created_at)


def _check_trigger(trigger: str) -> None:
    if trigger not in TRIGGERS:
        known = ", ".join(sorted(TRIGGERS))
        raise StoreError(f"unknown sweep trigger {trigger!r} (known: {known})")


class Sweeps:
    """The sweeps of one store: ``Sweeps(store)``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def _write(self, doing: str, write: Callable[[Session], R]) -> R:
        """``write`` in one transaction, again from the start when a concurrent writer took what
        it was about to (a seq, a sweep's name, a stale lock): the unique keys decide."""
        for attempt in range(ATTEMPTS):
            try:
                with self._store._session(doing) as s:
                    return write(s)
            except Raced:
                continue
            except StoreError as exc:
                if not isinstance(exc.__cause__, IntegrityError) or attempt == ATTEMPTS - 1:
                    raise
        raise StoreError(f"cannot {doing}: other writers kept taking it first")

    def _session(self, doing: str) -> AbstractContextManager[Session]:
        return self._store._session(doing)  # one transaction, errors as StoreError

    # --- sweeps ---------------------------------------------------------------------------

    @staticmethod
    def _sweep(s: Session, name: str, create: bool = False) -> Sweep:
        row = s.scalars(select(Sweep).where(Sweep.name == name)).one_or_none()
        if row is None:
            if not create:
                raise NotFound(f"no sweep {name!r}")
            row = Sweep(name=name, created_at=utcnow())
            s.add(row)
            s.flush()  # a concurrent creator: IntegrityError on the name, and _write reads again
        return row

    def ensure(self, name: str) -> SweepRecord:
        """The sweep of this name, created on first use."""
        def write(s: Session) -> SweepRecord:
            row = self._sweep(s, name, create=True)
            return SweepRecord(row.id, row.name, row.created_at)
        return self._write(f"record sweep {name!r}", write)

    def list_sweeps(self) -> list[SweepRecord]:
        """Every sweep, by name."""
        with self._session("list the sweeps") as s:
            return [SweepRecord(row.id, row.name, row.created_at)
                    for row in s.scalars(select(Sweep).order_by(Sweep.name))]

    # --- runs -----------------------------------------------------------------------------

    @staticmethod
    def _new_run(s: Session, sweep: Sweep, **columns: Any) -> SweepRun:
        last = s.scalar(select(func.max(SweepRun.seq)).where(SweepRun.sweep_id == sweep.id))
        row = SweepRun(sweep_id=sweep.id, seq=(last or 0) + 1, accepted=False, **columns)
        s.add(row)
        s.flush()  # a concurrent run took this seq: IntegrityError, and _write reads again
        return row

    @staticmethod
    def _get_run(s: Session, run_id: int) -> tuple[SweepRun, str]:
        found = s.execute(select(SweepRun, Sweep.name).join(Sweep, SweepRun.sweep_id == Sweep.id)
                          .where(SweepRun.id == run_id)).one_or_none()
        if found is None:
            raise NotFound(f"no sweep run {run_id}")
        return found[0], found[1]

    @classmethod
    def _running(cls, s: Session, run_id: int) -> tuple[SweepRun, str]:
        row, sweep = cls._get_run(s, run_id)
        if row.status != "running":
            raise StoreError(f"sweep run {run_id} is {row.status}, not running")
        return row, sweep

    def start_run(self, sweep: str, *, trigger: str = "manual", schedule: str | None = None,
                  baseline_run_id: int | None = None) -> SweepRunRecord:
        """A new running run of ``sweep`` (created on first use) holding the sweep's lock, both in
        one transaction. SweepLocked if another live run holds it; a dead holder's lock on this
        host is taken over, its run marked interrupted."""
        _check_trigger(trigger)
        me = this_process()

        def write(s: Session) -> SweepRunRecord:
            row = self._sweep(s, sweep, create=True)
            if baseline_run_id is not None:
                base, of = self._get_run(s, baseline_run_id)
                if base.sweep_id != row.id:
                    raise StoreError(f"sweep run {baseline_run_id} is a run of sweep {of!r}, "
                                     f"not of {sweep!r}: it cannot be its baseline")
            lock = held(s, row.id)
            if lock is not None:
                take_over(s, sweep, lock)
            run = self._new_run(s, row, status="running", trigger=trigger, schedule=schedule,
                                started_at=utcnow(), baseline_run_id=baseline_run_id)
            take(s, row.id, run.id, me, run.started_at)  # a race: _write starts again
            return _run(run, sweep)
        return self._write(f"start a run of sweep {sweep!r}", write)

    def set_campaign(self, run_id: int, campaign_id: str) -> None:
        """Link the running run to the campaign that holds its trials."""
        with self._session(f"link sweep run {run_id} to campaign {campaign_id!r}") as s:
            row, _ = self._running(s, run_id)
            if s.get(Campaign, campaign_id) is None:
                raise NotFound(f"no campaign {campaign_id!r}")
            row.campaign_id = campaign_id

    def set_facts(self, run_id: int, facts: Mapping[str, Any]) -> None:
        """What the run's nodes were (JSON-able): replaces what was stored."""
        with self._session(f"record the facts of sweep run {run_id}") as s:
            row, _ = self._get_run(s, run_id)
            row.facts_json = _json(facts)

    def finish_run(self, run_id: int, status: str, result: Mapping[str, Any] | None = None,
                   reason: str | None = None) -> None:
        """End the running run with ``status`` (FINISHED_STATUSES), its result (JSON-able) and
        why, and release the sweep's lock, in one transaction."""
        if status not in FINISHED_STATUSES:
            known = ", ".join(sorted(FINISHED_STATUSES))
            raise StoreError(f"sweep run {run_id}: {status!r} is not a status a run ends with "
                             f"(known: {known})")
        with self._session(f"finish sweep run {run_id}") as s:
            row, _ = self._running(s, run_id)
            row.status = status
            row.result_json = _json(result)
            row.reason = reason
            row.finished_at = utcnow()
            release(s, row.sweep_id, run_id)

    def break_lock(self, sweep: str, run_id: int,
                   reason: str = "its lock was broken by hand") -> SweepRunRecord:
        """Remove the lock of ``run_id`` (a dead orchestrator's, on another host), marking the
        run interrupted. Naming the run keeps a break from removing a lock taken since."""
        with self._session(f"break the lock of sweep {sweep!r}") as s:
            row = self._sweep(s, sweep)
            if not release(s, row.id, run_id):
                raise StoreError(f"sweep {sweep!r} is not held by its run {run_id}: "
                                 "nothing was broken")
            run, _ = self._get_run(s, run_id)
            if run.status == "running":
                run.status, run.reason, run.finished_at = "interrupted", reason, utcnow()
            s.flush()
            return _run(run, sweep)

    def record_skipped(self, sweep: str, *, trigger: str, schedule: str | None,
                       reason: str) -> SweepRunRecord:
        """A finished 'skipped' run (another run held the sweep); it never takes the lock."""
        _check_trigger(trigger)

        def write(s: Session) -> SweepRunRecord:
            now = utcnow()
            run = self._new_run(s, self._sweep(s, sweep, create=True), status="skipped",
                                trigger=trigger, schedule=schedule, started_at=now,
                                finished_at=now, reason=reason)
            return _run(run, sweep)
        return self._write(f"record a skipped run of sweep {sweep!r}", write)

    def record_missed(self, sweep: str, *, schedule: str, slot: datetime,
                      reason: str | None = None) -> SweepRunRecord:
        """A finished 'missed' run: ``schedule``'s time ``slot`` (UTC-aware) passed with no run;
        it never takes the lock."""
        if slot.tzinfo is None:
            raise StoreError(f"sweep {sweep!r}: the missed slot {slot.isoformat()} has no time "
                             "zone (the store keeps UTC)")

        def write(s: Session) -> SweepRunRecord:
            now = utcnow()
            run = self._new_run(s, self._sweep(s, sweep, create=True), status="missed",
                                trigger="schedule", schedule=schedule, started_at=now,
                                finished_at=now, slot=slot.astimezone(UTC),
                                reason=reason or "no run started at its scheduled time")
            return _run(run, sweep)
        return self._write(f"record a missed run of sweep {sweep!r}", write)

    def get_run(self, run_id: int) -> SweepRunRecord:
        with self._session(f"read sweep run {run_id}") as s:
            row, sweep = self._get_run(s, run_id)
            return _run(row, sweep)

    def runs(self, sweep: str) -> list[SweepRunRecord]:
        """Every run of the sweep, by seq (NotFound: no such sweep)."""
        with self._session(f"list the runs of sweep {sweep!r}") as s:
            row = self._sweep(s, sweep)
            return [_run(run, sweep) for run in s.scalars(
                select(SweepRun).where(SweepRun.sweep_id == row.id).order_by(SweepRun.seq))]

    # --- the baseline ---------------------------------------------------------------------

    def accept(self, run_id: int) -> SweepRunRecord:
        """Make the finished run the sweep's baseline (accepting it again makes it the last
        accepted again). Which runs may be accepted (a clean one, or any with --force) is the
        caller's rule; a run still running, or with no campaign (skipped, missed), is refused:
        it measured nothing to compare with."""
        with self._session(f"accept sweep run {run_id}") as s:
            row, sweep = self._get_run(s, run_id)
            if row.status == "running":
                raise StoreError(f"sweep run {run_id} is still running: only a finished run "
                                 "can be accepted")
            if row.campaign_id is None:
                raise StoreError(f"sweep run {run_id} is {row.status} with no campaign: it "
                                 "measured nothing a later run could be compared with")
            row.accepted, row.accepted_at = True, utcnow()
            s.flush()
            return _run(row, sweep)

    def baseline(self, sweep: str) -> SweepRunRecord | None:
        """The sweep's last accepted run; None if none was (or the sweep never ran)."""
        with self._session(f"read the baseline of sweep {sweep!r}") as s:
            row = s.scalars(
                select(SweepRun).join(Sweep, SweepRun.sweep_id == Sweep.id)
                .where(Sweep.name == sweep, SweepRun.accepted.is_(True))
                .order_by(SweepRun.accepted_at.desc(), SweepRun.id.desc()).limit(1)
            ).one_or_none()
            return None if row is None else _run(row, sweep)

    # --- hunts ----------------------------------------------------------------------------

    def add_hunt(self, run_id: int, campaign_id: str, good: str, bad: str) -> HuntRecord:
        """Record the campaign that the run started to hunt what made ``bad`` differ from
        ``good``."""
        with self._session(f"record a hunt of sweep run {run_id}") as s:
            self._get_run(s, run_id)
            if s.get(Campaign, campaign_id) is None:
                raise NotFound(f"no campaign {campaign_id!r}")
            row = SweepHunt(run_id=run_id, campaign_id=campaign_id, good=good, bad=bad,
                            created_at=utcnow())
            s.add(row)
            s.flush()
            return _hunt(row)

    def hunts(self, run_id: int) -> list[HuntRecord]:
        """The run's hunts, in the order they were recorded."""
        with self._session(f"list the hunts of sweep run {run_id}") as s:
            self._get_run(s, run_id)
            return [_hunt(row) for row in s.scalars(
                select(SweepHunt).where(SweepHunt.run_id == run_id).order_by(SweepHunt.id))]
