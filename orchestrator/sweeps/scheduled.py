"""A scheduled run of a regression sweep: ``bisect schedule run NAME``, what the schedule's service
runs (and a crontab line, or a user by hand).

First the calendar slots since the schedule's previous run that got no run are recorded as
missed runs of the sweep, all but the latest: that one is this run's own, on time or caught up at
boot (``Persistent=true``). Then ``bisect sweep FILE --store STORE --schedule NAME`` runs in the
foreground; its exit code is the run's (4: another run held the sweep, recorded as skipped by
the sweep itself). Its output goes to this process's stdout and stderr (the journal, under
systemd) and to a log file of the run, owner-only, in the schedule's state directory, where the
last LOGS_KEPT stay: a failed run's log outlives a volatile or rotated journal, and a run from
cron has one too.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from orchestrator.sweeps import calendar
from orchestrator.sweeps.schedule import Schedule, sweep_name

LOGS_KEPT = 30
SYSTEM_STATE = Path("/var/lib/bisect/schedules")
Progress = Callable[[str], None]


def state_dir(name: str) -> Path:
    """Where the runs of schedule NAME keep their logs: ``$BISECT_STATE_DIR/NAME`` where that
    is set, else /var/lib/bisect/schedules/NAME for root, else the user's state directory
    (``$XDG_STATE_HOME``, ``~/.local/state``)."""
    if override := os.environ.get("BISECT_STATE_DIR"):
        return Path(override, name)
    if os.geteuid() == 0:
        return SYSTEM_STATE / name
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state, "bisect", "schedules", name)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def record_missed(schedule: Schedule, now: datetime, progress: Progress) -> list[datetime]:
    """Record as missed each slot of the calendar since this schedule's previous run (or the
    last slot already recorded) that got no run, except the one this run serves."""
    from db.errors import NotFound
    from db.store import Store
    from db.sweeps import Sweeps

    try:
        sweep = sweep_name(schedule.sweep)
    except ValueError as exc:  # the sweep reports it, as its own run
        progress(f"schedule {schedule.name}: missed runs not counted: {exc}")
        return []
    with Store.open(schedule.store) as store:
        sweeps = Sweeps(store)
        try:
            runs = [r for r in sweeps.runs(sweep) if r.schedule == schedule.name]
        except NotFound:
            return []  # never ran: nothing to count from
        if not runs:
            return []
        seen = {_aware(r.slot) for r in runs if r.status == "missed" and r.slot is not None}
        previous = max(_aware(r.slot) if r.status == "missed" and r.slot is not None
                       else _aware(r.started_at) for r in runs)
        missed = [slot for slot in calendar.missed(schedule.calendar, previous, now)
                  if slot not in seen]
        for slot in missed:
            sweeps.record_missed(sweep, schedule=schedule.name, slot=slot)
    if missed:
        progress(f"schedule {schedule.name}: {len(missed)} missed run(s) recorded, the last at "
                 f"{missed[-1].isoformat(timespec='seconds')}")
    return missed


def _log_file(name: str, now: datetime) -> IO[bytes]:
    directory = state_dir(name)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    logs = sorted(directory.glob("run-*.log"))
    for old in logs[:max(0, len(logs) - LOGS_KEPT + 1)]:
        old.unlink(missing_ok=True)
    path = directory / f"run-{now:%Y%m%dT%H%M%S.%fZ}.log"
    return open(path, "xb", opener=lambda p, f: os.open(p, f, 0o600))


def _pump(source: IO[bytes], sink: IO[bytes], log: IO[bytes], lock: threading.Lock) -> None:
    for chunk in iter(lambda: os.read(source.fileno(), 65536), b""):
        with lock:
            log.write(chunk)
            log.flush()
        with contextlib.suppress(OSError, ValueError):  # a closed terminal: the log goes on
            sink.write(chunk)
            sink.flush()


def run(schedule: Schedule, progress: Progress, now: datetime | None = None) -> int:
    """One run of the schedule, in the foreground: missed slots recorded, then the sweep, its
    output to stdout/stderr and to the run's log file; its exit code."""
    now = now or datetime.now(UTC)
    argv = schedule.sweep_argv()
    with _log_file(schedule.name, now) as log:
        lock = threading.Lock()

        def say(message: str) -> None:
            progress(message)
            with lock:
                log.write(f"# {message}\n".encode())
                log.flush()

        say(f"{now.isoformat(timespec='seconds')} schedule {schedule.name} (log: {log.name})")
        record_missed(schedule, now, say)
        say(f"schedule {schedule.name}: {shlex.join(argv)}")
        child = subprocess.Popen(argv, cwd=schedule.workdir, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        assert child.stdout is not None and child.stderr is not None
        pumps = [threading.Thread(target=_pump, args=(child.stdout, sys.stdout.buffer, log,
                                                      lock), daemon=True),
                 threading.Thread(target=_pump, args=(child.stderr, sys.stderr.buffer, log,
                                                      lock), daemon=True)]
        for pump in pumps:
            pump.start()
        while True:
            try:  # Ctrl-C reaches the sweep too (one process group): wait for it to stop
                code = child.wait()
                break
            except KeyboardInterrupt:
                continue
        for pump in pumps:
            pump.join()
        code = code if code >= 0 else 128 - code  # killed by a signal: as a shell reports it
        say(f"schedule {schedule.name}: exit {code}")
    return code
