"""Schedules: a regression sweep run on a calendar by a systemd timer, or a crontab line.

A schedule NAME is two units, ``bisect-sweep-NAME.service`` (Type=oneshot) and
``bisect-sweep-NAME.timer`` (``OnCalendar=``, ``Persistent=true``: a slot missed while the
machine was off runs at boot), in /etc/systemd/system or, ``--user``, the user's own unit
directory. The service runs ``bisect schedule run NAME --sweep FILE --store STORE
--on-calendar EXPR``: every value it needs is on that one line (absolute, unit-quoted), so the
unit file is the schedule's only record and ``run NAME`` by hand reads it back and runs exactly
that command.

Writing the units into systemd, reading them back, removing and listing them is
``orchestrator.sweeps.installed``; what a run does is ``orchestrator.sweeps.scheduled``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from deploy.safe_words import SYSTEMD_UNIT, word_error
from deploy.services.systemd import unit_quote
from orchestrator.sweeps import calendar

PREFIX = "bisect-sweep-"
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# C0, DEL and C1: a newline or a carriage return would start a line of the unit or the crontab
# of its own; the others are refused with them (no path or URL needs one).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# What the path of a unit's program may not hold: systemd refuses quotes and backslashes there
# ("Executable name contains special characters") and does not expand $$ in it, as it does in
# the arguments.
_UNRUNNABLE = re.compile(r"[\"'\\$]")


class ScheduleError(ValueError):
    """Bad input to a schedule command (exit 2): the message names the argument."""


# --- what a schedule is --------------------------------------------------------------------

@dataclass(frozen=True)
class Schedule:
    name: str
    calendar: str  # OnCalendar= as the user wrote it
    sweep: Path  # the sweep file, absolute
    store: str  # an absolute SQLite path or a URL without a password
    program: str  # the absolute path of the `bisect` that runs it
    user: bool = False  # the user's own systemd instance

    def __post_init__(self) -> None:
        # Every value as the units and the crontab line will hold it, after it was made absolute:
        # a directory name nobody typed (the working directory's, HOME's, the program's) too.
        check_name(self.name)
        for what, value in (("--on-calendar", self.calendar), ("SWEEP", str(self.sweep)),
                            ("--store", self.store), ("the `bisect` program", self.program)):
            check_value(what, value)
        for what, value in (("SWEEP", str(self.sweep)), ("the `bisect` program", self.program)):
            if not os.path.isabs(value):
                raise ScheduleError(f"{what}: {value!r} is not an absolute path")
        if _UNRUNNABLE.search(self.program):  # systemd's string_is_safe(), and $ is not expanded
            raise ScheduleError(f"the `bisect` program: {self.program!r} holds a quote, a "
                                "backslash or a '$', which systemd refuses in (or does not "
                                "expand in) the path of the program a unit runs: install "
                                "bisect-serving where its path has none")
        directory = str(self.workdir)  # WorkingDirectory= takes the rest of its line, stripped
        if directory != directory.rstrip() or directory.endswith("\\"):
            raise ScheduleError(f"SWEEP: the directory {directory!r} ends in a space or a "
                                "backslash, which a unit's WorkingDirectory= cannot hold")

    @property
    def service(self) -> str:
        return f"{PREFIX}{self.name}.service"

    @property
    def timer(self) -> str:
        return f"{PREFIX}{self.name}.timer"

    @property
    def workdir(self) -> Path:
        return self.sweep.parent

    @property
    def scope(self) -> str:
        return "user" if self.user else "system"

    def argv(self) -> list[str]:
        """What the service runs (and `run NAME` by hand)."""
        return [self.program, "schedule", "run", self.name, "--sweep", str(self.sweep),
                "--store", self.store, "--on-calendar", self.calendar]

    def sweep_argv(self) -> list[str]:
        """What a run of the schedule runs: the sweep, as a run started by this schedule."""
        return [self.program, "sweep", str(self.sweep), "--store", self.store,
                "--schedule", self.name]


def check_name(name: str) -> str:
    if not NAME.fullmatch(name) or not SYSTEMD_UNIT.fullmatch(f"{PREFIX}{name}.service"):
        raise ScheduleError(f"NAME: {name!r} is not a schedule name (letters, digits, '_', '.' "
                            "and '-', not starting with '.' or '-', at most 100): it becomes the "
                            f"unit name {PREFIX}NAME.service")
    return name


def check_value(what: str, value: str) -> str:
    """``value`` if a unit file and a crontab line can hold it exactly, else ScheduleError naming
    ``what`` and the value."""
    if found := _CONTROL.search(value):
        raise ScheduleError(f"{what}: {value!r} contains a control character ({found[0]!r}), "
                            "which a unit file or a crontab line cannot hold (a newline or a "
                            "carriage return would start a line of its own)")
    if reason := word_error(value):  # a lone surrogate: a name that is not UTF-8
        raise ScheduleError(f"{what}: {reason}")
    return value


def unit_store(store: str) -> str:
    """``--store`` as a unit may hold it: a path made absolute (the service runs elsewhere); a
    URL as given, never with a password (secrets are never written at rest). Checked as typed
    and as made absolute (the working directory or HOME may hold what was not typed)."""
    check_value("--store", store)
    if not _URL.match(store):
        return check_value("--store", os.path.abspath(os.path.expanduser(store)))
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(store)
    except ArgumentError as exc:
        raise ScheduleError(f"--store: {store!r} is not a database URL ({exc})") from None
    in_query = [key for key in url.query if key.lower() == "password"]
    if url.password is not None or in_query:
        shown = url.difference_update_query(in_query).render_as_string(hide_password=True)
        where = f" (in {', '.join(in_query)}=)" if in_query else ""
        raise ScheduleError(
            f"--store: {shown} holds a password{where}: a schedule writes its store "
            "into a unit file, and secrets are never written at rest; leave the password out "
            "and give it in a .pgpass file (~/.pgpass of the user the sweep runs as, mode 0600) "
            "or a file named by PGPASSFILE")
    if url.drivername.startswith("sqlite") and url.database and url.database != ":memory:" \
            and not os.path.isabs(url.database):  # relative to the service's directory: not ours
        absolute = url.set(database=os.path.abspath(url.database))
        rendered = check_value("--store", absolute.render_as_string(False))
        if make_url(rendered).database != absolute.database:  # a '?' there starts the query
            raise ScheduleError(f"--store: {rendered!r} would not read back as the database "
                                f"{absolute.database!r}: give the file's path, not a URL")
        return rendered
    return store


def check_sweep(path: Path) -> Path:
    """The sweep file, absolute, that exists and validates (SweepError from its loader)."""
    shown = check_value("SWEEP", str(path))
    absolute = Path(check_value("SWEEP", os.path.abspath(os.path.expanduser(path))))
    if not absolute.is_file():
        raise ScheduleError(f"SWEEP: no sweep file {shown}")
    parent = str(absolute.parent)
    if parent != parent.rstrip() or parent.endswith("\\"):  # WorkingDirectory= takes the rest
        raise ScheduleError(f"SWEEP: the directory {parent!r} of {shown} ends in a space or a "
                            "backslash, which a unit's WorkingDirectory= cannot hold")
    sweep_name(absolute)
    return absolute


def sweep_name(path: Path) -> str:
    """The sweep's name, from its file as `bisect sweep` loads it (SweepError if invalid)."""
    from experiments.sweep import load_sweep  # pydantic and the campaign schema: only here

    return load_sweep(path).name


def bisect_program() -> str:
    """The absolute path of this `bisect`: the console script this process was started as, else
    the one installed beside this Python (a test's runner), else the one on PATH."""
    invoked = Path(sys.argv[0])
    candidates = [invoked] if invoked.name == "bisect" else []
    candidates.append(Path(sys.executable).parent / "bisect")
    if found := shutil.which("bisect"):
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise ScheduleError("cannot find the `bisect` program a schedule would run (the console "
                        "script of bisect-serving): install it, or run this as `bisect`")


# --- unit files and the crontab line -------------------------------------------------------

def _specifiers(value: str) -> str:
    """A value systemd takes whole (no quotes, no C escapes) but expands specifiers in."""
    return value.replace("%", "%%")


def render_service(schedule: Schedule) -> str:
    command = " ".join(unit_quote(word, expand_dollar=True) for word in schedule.argv())
    network = [] if schedule.user else ["Wants=network-online.target",
                                        "After=network-online.target"]
    return "\n".join([
        f"# Written by `bisect schedule add`: the regression sweep of schedule {schedule.name}.",
        f"# `bisect schedule rm {schedule.name}` removes it; `bisect schedule run "
        f"{schedule.name}` runs it now.",
        "[Unit]",
        f"Description=bisect regression sweep {schedule.name}",
        *network,
        "",
        "[Service]",
        "Type=oneshot",  # no start timeout for a oneshot: a sweep may take hours
        f"WorkingDirectory={_specifiers(str(schedule.workdir))}",  # a path, never unquoted
        f"ExecStart={command}",
        f"Environment={unit_quote('PYTHONUNBUFFERED=1', expand_dollar=False)}",
        "StandardOutput=journal",
        "StandardError=journal",
        f"SyslogIdentifier={PREFIX}{schedule.name}",
        "",
    ])


def render_timer(schedule: Schedule) -> str:
    return "\n".join([
        f"# Written by `bisect schedule add`: when schedule {schedule.name} runs.",
        "[Unit]",
        f"Description=bisect regression sweep {schedule.name} on "
        f"{_specifiers(schedule.calendar)}",
        "",
        "[Timer]",
        f"OnCalendar={_specifiers(schedule.calendar)}",
        "Persistent=true",  # a slot missed while the machine was off runs at boot
        # to the second (systemd's default is a minute): a run knows the slot it serves
        "AccuracySec=1s",
        f"Unit={schedule.service}",
        "",
        "[Install]",
        "WantedBy=timers.target",
        "",
    ])


def crontab_line(schedule: Schedule) -> str:
    """The crontab line that runs the schedule when its timer would. It guards nothing: a run
    that overlaps the last is refused by the sweep's own lock (exit 4, recorded as skipped)."""
    fields = calendar.cron_fields(schedule.calendar)
    command = f"cd {shlex.quote(str(schedule.workdir))} && " + shlex.join(schedule.argv())
    # cron ends the command at a bare % (the rest is its stdin) and reads \% as %. A backslash
    # of ours right before a % would swallow cron's: '' parts them, a no-op inside the single
    # quotes that shlex.quote puts every backslash in.
    return f"{fields} " + command.replace("\\%", "\\''%").replace("%", "\\%")


def unit_unquote(words: str) -> list[str]:
    """The words of an ``ExecStart=`` line that ``unit_quote`` wrote, exactly as systemd reads
    them back (C escapes, ``%%`` and ``$$``)."""
    found: list[str] = []
    rest = words.strip()
    while rest:
        matched = re.match(r'"((?:[^"\\]|\\.)*)"\s*', rest)
        if matched is None:
            raise ScheduleError(f"not a line `bisect schedule add` wrote: {words!r}")
        body, out, i = matched[1], [], 0
        while i < len(body):
            ch = body[i]
            if ch == "\\":
                code = body[i + 1]
                if code == "x":
                    out.append(chr(int(body[i + 2:i + 4], 16)))
                    i += 4
                    continue
                out.append({"n": "\n", "t": "\t"}.get(code, code))
                i += 2
            elif ch in "%$" and body[i + 1:i + 2] == ch:
                out.append(ch)
                i += 2
            else:
                out.append(ch)
                i += 1
        found.append("".join(out))
        rest = rest[matched.end():]
    return found


def parse_service(text: str, *, user: bool, where: str) -> Schedule:
    """The schedule a service unit of ours runs (its ExecStart= line)."""
    line = next((line for line in text.splitlines() if line.startswith("ExecStart=")), None)
    argv = unit_unquote(line.removeprefix("ExecStart=")) if line else []
    if len(argv) != 10 or argv[1:3] != ["schedule", "run"] or argv[4::2] != [
            "--sweep", "--store", "--on-calendar"]:
        raise ScheduleError(f"{where}: not a unit `bisect schedule add` wrote (its ExecStart= "
                            "is not `bisect schedule run NAME --sweep ... --store ... "
                            "--on-calendar ...`)")
    try:
        return Schedule(name=argv[3], calendar=argv[9], sweep=Path(argv[5]), store=argv[7],
                        program=argv[0], user=user)
    except ScheduleError as exc:
        raise ScheduleError(f"{where}: {exc}") from None
