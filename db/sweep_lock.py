"""The lock that lets one run of a sweep at a time: ``db.sweeps`` takes it in the transaction
that creates the run and releases it in the one that ends it.

The lock is a ``sweep_lock`` row: its primary key refuses a second holder on every backend, so
several orchestrators on one store never run one sweep twice. A holder that died leaves its row.
Only one case is told for sure: a holder on this host whose process is gone (or rebooted away, or
whose pid now names a later process) is stale, and the next run takes the lock over and marks the
dead run 'interrupted'. A holder on another host is never taken over: from here a dead
orchestrator and a slow one look the same (``Sweeps.break_lock`` is the explicit way out, as
``bisect unlock`` is for node locks).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, delete, insert, select, update
from sqlalchemy.orm import Session

from db.errors import StoreError
from db.models import SweepLock, SweepRun, utcnow

# deploy.procs is a leaf of the standard library alone (/proc reads): the same test of "this
# process is gone" as the node locks', rather than a second copy of it.
from deploy import procs

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class SweepLocked(StoreError):
    """Another live run holds the sweep (``run_id``: that run; ``holder``: "host pid N since T").
    """

    def __init__(self, sweep: str, run_id: int, holder: str, message: str) -> None:
        super().__init__(message)
        self.sweep, self.run_id, self.holder = sweep, run_id, holder


class Raced(Exception):
    """The lock changed hands between reading it and taking it over: read it again."""


@dataclass(frozen=True, slots=True)
class Holder:
    host: str
    boot_id: str | None
    pid: int
    pid_start: int | None


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def this_process() -> Holder:
    pid = os.getpid()
    return Holder(socket.gethostname(), _boot_id(), pid, procs.start_time(pid))


def _holder_gone(lock: Mapping[str, Any]) -> bool:
    """True if the lock's holder is known dead: it ran on this host, and the host has rebooted
    since, or its pid is not alive, or is alive with another start time (a later process that
    reuses the pid). A holder on another host cannot be told: never gone."""
    if lock["host"] != socket.gethostname():
        return False
    boot = _boot_id()
    if lock["boot_id"] and boot and lock["boot_id"] != boot:
        return True
    if not procs.alive(lock["pid"]):
        return True
    started = procs.start_time(lock["pid"])
    return started is not None and lock["pid_start"] is not None and started != lock["pid_start"]


def _describe(lock: Mapping[str, Any]) -> str:
    return f"{lock['host']} pid {lock['pid']} since {lock['since']:%Y-%m-%d %H:%M:%S} UTC"


def held(s: Session, sweep_id: int) -> dict[str, Any] | None:
    """The sweep's lock row; None while nobody holds it."""
    found = s.execute(select(*SweepLock.__table__.columns)
                      .where(SweepLock.sweep_id == sweep_id)).mappings().one_or_none()
    return None if found is None else dict(found)


def take_over(s: Session, sweep: str, lock: Mapping[str, Any]) -> None:
    """Free the sweep of a dead holder's lock, marking its run interrupted; SweepLocked if
    the holder is alive or cannot be told dead."""
    holder = _describe(lock)
    if not _holder_gone(lock):
        elsewhere = lock["host"] != socket.gethostname()
        raise SweepLocked(sweep, lock["run_id"], holder, (
            f"sweep {sweep!r} is held by its run {lock['run_id']} ({holder}): one run of a "
            "sweep at a time" + ("; a run on another host is never taken over from here"
                                 if elsewhere else "")))
    # compare-and-delete: only the lock read above; another run may have taken it meanwhile
    if not release(s, lock["sweep_id"], lock["run_id"]):
        raise Raced
    s.execute(update(SweepRun)
              .where(SweepRun.id == lock["run_id"], SweepRun.status == "running")
              .values(status="interrupted", finished_at=utcnow(),
                      reason=f"its orchestrator ({holder}) died holding the sweep; the "
                             "next run took the lock over"))


def take(s: Session, sweep_id: int, run_id: int, me: Holder, since: datetime) -> None:
    """Hold the sweep for ``run_id``. The primary key refuses this if another orchestrator took
    the lock since it was read: IntegrityError, and the caller starts again and finds that
    holder."""
    s.execute(insert(SweepLock).values(
        sweep_id=sweep_id, run_id=run_id, host=me.host, boot_id=me.boot_id, pid=me.pid,
        pid_start=me.pid_start, since=since))


def release(s: Session, sweep_id: int, run_id: int) -> bool:
    """Remove ``run_id``'s lock of the sweep, and only its (a lock another run took since
    stays); True if it held one."""
    gone = s.execute(delete(SweepLock).where(SweepLock.sweep_id == sweep_id,
                                             SweepLock.run_id == run_id))
    return cast(CursorResult[Any], gone).rowcount == 1
