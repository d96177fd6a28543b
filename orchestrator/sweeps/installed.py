"""Installed schedules: a ``Schedule``'s two units written into systemd's unit directory (the
system's or, ``--user``, the user's own), enabled, read back, removed and listed, through
``systemctl``. What a schedule is, and the text of its units, is ``orchestrator.sweeps.schedule``.

Unit files are 0644 in /etc/systemd/system (systemd's convention there: ``systemctl cat`` and
``bisect schedule ls`` work for every user; they hold no secret, a store password is refused)
and 0600 in the user's directory (only that user's manager reads them). systemd needs neither:
it refuses only files it could not read and warns about executable or world-writable ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.sweeps.schedule import (
    PREFIX,
    Schedule,
    ScheduleError,
    check_name,
    parse_service,
    render_service,
    render_timer,
)

SYSTEM_DIR = Path("/etc/systemd/system")


class SystemctlFailed(RuntimeError):
    """systemctl refused (exit 1): its own words."""


# --- where things are ---------------------------------------------------------------------

def unit_dir(user: bool) -> Path:
    if not user:
        return SYSTEM_DIR
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(config, "systemd", "user")


def systemctl(user: bool, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = ["systemctl", *(["--user"] if user else []), *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SystemctlFailed("`systemctl` is not installed: this machine has no systemd "
                              "(`bisect schedule add --crontab` prints a crontab line)") from None
    if check and done.returncode != 0:
        raise SystemctlFailed(f"`{shlex.join(argv)}` failed: "
                              f"{done.stderr.strip() or f'exit {done.returncode}'}")
    return done


def _write(path: Path, text: str, mode: int) -> None:
    """Atomically: a unit systemd reads while we write is the old one or the new one."""
    fd, temporary = tempfile.mkstemp(prefix=".bisect-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


# --- add, rm, ls --------------------------------------------------------------------------

def install(schedule: Schedule) -> bool:
    """Write both units, reload, enable and start the timer; True if it replaced a schedule of
    this name. What systemctl refuses is undone: a new schedule removed, a replaced one back."""
    directory = unit_dir(schedule.user)
    if not schedule.user:
        if not Path("/run/systemd/system").is_dir():
            raise ScheduleError("this machine does not run systemd (no /run/systemd/system): "
                                "`--crontab` prints a crontab line to install instead")
        if not os.access(directory, os.W_OK):
            raise ScheduleError(f"{directory} is not writable: a system schedule needs root "
                                "(or add --user for your own systemd instance)")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths = [directory / schedule.service, directory / schedule.timer]
    before = {path: path.read_text(encoding="utf-8") for path in paths if path.is_file()}
    mode = 0o600 if schedule.user else 0o644
    _write(paths[0], render_service(schedule), mode)
    _write(paths[1], render_timer(schedule), mode)
    try:
        systemctl(schedule.user, "daemon-reload")
        systemctl(schedule.user, "enable", "--now", schedule.timer)
        if before:  # a running timer keeps its old calendar until it starts again
            systemctl(schedule.user, "restart", schedule.timer)
    except SystemctlFailed:
        for path in paths:
            if path in before:
                _write(path, before[path], mode)
            else:
                path.unlink(missing_ok=True)
        systemctl(schedule.user, "daemon-reload", check=False)
        raise
    return bool(before)


def load(name: str, user: bool) -> Schedule:
    """The installed schedule NAME, read back from its service unit."""
    path = unit_dir(user) / f"{PREFIX}{check_name(name)}.service"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        other = unit_dir(not user) / path.name
        hint = f" (there is one in {other.parent}: {'leave out' if user else 'add'} --user)" \
            if other.is_file() else " (`bisect schedule ls` lists them)"
        raise ScheduleError(f"NAME: no schedule {name!r} in {path.parent}{hint}") from None
    return parse_service(text, user=user, where=str(path))


def remove(name: str, user: bool) -> Schedule:
    """Disable and stop the timer, delete both units, reload. A run under way finishes."""
    schedule = load(name, user)
    directory = unit_dir(user)
    systemctl(user, "disable", "--now", schedule.timer)
    for unit in (schedule.timer, schedule.service):
        (directory / unit).unlink(missing_ok=True)
    systemctl(user, "daemon-reload")
    systemctl(user, "reset-failed", schedule.service, check=False)  # a failed last run's state
    return schedule


def _show(user: bool, units: list[str]) -> dict[str, dict[str, str]]:
    done = systemctl(user, "show", "-p", "Id,ActiveState,UnitFileState,Result,ExecMainStatus,"
                     "ExecMainStartTimestampMonotonic", "--", *units, check=False)
    shown: dict[str, dict[str, str]] = {}
    for block in done.stdout.split("\n\n"):
        values = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if "Id" in values:
            shown[values["Id"]] = values
    return shown


def _when(microseconds: Any) -> str | None:
    if not isinstance(microseconds, int) or microseconds <= 0:
        return None
    return datetime.fromtimestamp(microseconds / 1e6, UTC).isoformat(timespec="seconds")


def listing(user: bool) -> list[dict[str, Any]]:
    """The installed schedules of one scope with their calendar, next and last trigger, and how
    their last run ended (None where systemd does not know, or does not run here)."""
    directory = unit_dir(user)
    timers = sorted(directory.glob(f"{PREFIX}*.timer")) if directory.is_dir() else []
    schedules = []
    for path in timers:
        with contextlib.suppress(ScheduleError, OSError):
            schedules.append(load(path.name.removeprefix(PREFIX).removesuffix(".timer"), user))
    if not schedules:
        return []
    triggers: dict[str, dict[str, Any]] = {}
    shown: dict[str, dict[str, str]] = {}
    if user or Path("/run/systemd/system").is_dir():
        done = systemctl(user, "list-timers", "--all", "--output=json", f"{PREFIX}*.timer",
                         check=False)
        with contextlib.suppress(ValueError):
            triggers = {t["unit"]: t for t in json.loads(done.stdout or "[]")}
        shown = _show(user, [u for s in schedules for u in (s.timer, s.service)])
    rows = []
    for schedule in schedules:
        timer, service = shown.get(schedule.timer, {}), shown.get(schedule.service, {})
        trigger = triggers.get(schedule.timer, {})
        ran = service.get("ExecMainStartTimestampMonotonic", "0") not in ("", "0")
        status = service.get("ExecMainStatus")
        rows.append({
            "name": schedule.name, "scope": schedule.scope, "calendar": schedule.calendar,
            "sweep": str(schedule.sweep), "store": schedule.store,
            "enabled": timer.get("UnitFileState"), "timer": timer.get("ActiveState"),
            "next": _when(trigger.get("next")), "last": _when(trigger.get("last")),
            "running": service.get("ActiveState") == "activating",
            # how its service last ended (a start by the timer, by hand or at boot); None: never
            # since systemd started
            "last_result": service.get("Result") if ran else None,
            "last_exit_status": int(status) if ran and status else None,
        })
    return rows
