"""Hostile values for `bisect schedule add`: names, calendars and paths with newlines, carriage
returns, other control characters, %, $, backslashes, quotes, spaces, a leading '-' and
semicolons, typed or reaching a value untyped (the working directory, HOME, the directory of the
`bisect` program itself).

A value the units or the crontab line cannot hold exactly, as it is made absolute, is refused with
exit 2 and a sentence naming it, and nothing is written. Every unit the code would write passes
`systemd-analyze verify`, and systemd itself reads it back (`systemd --test` loads units as its
manager does and dumps what it parsed) as exactly the intended ExecStart= and WorkingDirectory=.
Every crontab line is one line that cron (its %-escapes, as Vixie cron's do_command.c reads them)
and then `sh` turn into exactly the intended directory and argv (the program is a script that
records them)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from orchestrator.cli import app, schedule_view  # noqa: F401 - registers `bisect schedule`
from orchestrator.sweeps import calendar
from orchestrator.sweeps.calendar import CalendarError
from orchestrator.sweeps.schedule import (
    Schedule,
    ScheduleError,
    bisect_program,
    check_name,
    check_sweep,
    crontab_line,
    render_service,
    render_timer,
    unit_store,
)
from tests.support.schedules import write_sweep

pytestmark = pytest.mark.real

runner = CliRunner()
BISECT = typer.main.get_command(app)  # built once: typer's runner.invoke builds it every time
WHEN = "Mon..Fri 9:00"
HOSTILE = ["nl\nExecStartPre=/bin/sh -c id", "cr\rx", "tab\tx", "esc\x1b[1m", "del\x7f",
           "c1\x85x", "pct 100% %h %%n", "dollar $HOME ${X} $$ $", "bs \\ \\n \\x41 \\%h \\\\%",
           "q'uote", 'dq"uote', "sp ace", "-lead", "semi;colon && echo x | y", "glob *?[a] #x ~",
           "ünï ☃", "end space ", "end\\"]
NAMES = ["a\nb", "a\rb", "a\tb", "a\x1bb", "a%b", "a$b", "a\\b", "a'b", 'a"b', "a b", "-x",
         "a;b"]
CALENDARS = ["daily\nOnCalendar=minutely", "daily\r", "daily\x1b", "daily\x85", "daily%", "%h",
             "$X", "daily\\", "'daily'", '"daily"', "daily ", "-daily", "daily;hourly"]
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Records what it was started as: its directory, its own path and its arguments.
RECORDER = "#!/bin/sh\nprintf '%s\\0' \"$PWD\" \"$0\" \"$@\" > \"$BISECT_ARGV\"\n"


@dataclass(frozen=True)
class Ran:
    exit_code: int
    stdout: str
    stderr: str


def invoke(args: list[str]) -> Ran:
    """`bisect ARGS` as typer's runner.invoke runs it (its isolation), with the command built
    once (some 150 cases, two runs each)."""
    with runner.isolation() as (out, err, _):
        try:
            BISECT.main(args=args, prog_name="bisect")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        return Ran(code, out.getvalue().decode(), err.getvalue().decode())


@dataclass(frozen=True)
class Case:
    """One `add`: the words typed, where it runs, and what the units must hold."""
    name: str
    sweep: str  # as typed
    store: str  # as typed
    cwd: Path
    home: Path
    program: Path
    calendar: str = WHEN
    label: str = ""  # the argument a refusal must name ("" accepted)
    value: str = ""  # ... and the value, as the refusal shows it
    intended: tuple[str, ...] = ()  # the argv (accepted)


def recorder(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bisect"
    path.write_text(RECORDER)
    path.chmod(0o755)
    return path


def cases(base: Path) -> list[Case]:
    """Each hostile string as: a typed directory, the working directory, HOME, a typed store file,
    the store's directory (untyped, as a path and in a relative SQLite URL), the program's
    directory; a store URL with % and $; and every bad name and calendar."""
    clean = base / "clean"
    sweep, program, store = write_sweep(clean), recorder(clean), str(clean / "s.db")
    found: list[Case] = []
    for hostile in HOSTILE:
        place = base / hostile
        write_sweep(place)
        own = recorder(place)
        at = str(place / "nightly.yaml")
        ways = [  # (sweep typed, store typed, cwd, HOME, program, label, the value as made)
            (f"{hostile}/nightly.yaml", store, base, base, program, "SWEEP", at),
            ("nightly.yaml", store, place, base, program, "SWEEP", at),
            ("~/nightly.yaml", store, base, place, program, "SWEEP", at),
            (str(sweep), f"{hostile}.db", base, base, program, "--store", f"{place}.db"),
            (str(sweep), "bisect.db", place, base, program, "--store", str(place / "bisect.db")),
            # SQLAlchemy %-escapes the path it makes absolute: what no line can hold is never there
            (str(sweep), "sqlite:///rel.db", place, base, program, "--store",
             make_url("sqlite://").set(database=f"{place}/rel.db").render_as_string(False)),
            (str(sweep), store, base, base, own, "the `bisect` program", str(own)),
        ]
        for typed, typed_store, cwd, home, runs, label, value in ways:
            swept = at if label == "SWEEP" else str(sweep)
            stored = value if label == "--store" else store
            refused = bool(CONTROL.search(value))
            if refused:  # a refusal names what was typed, if that was bad already
                as_typed = {"SWEEP": typed, "--store": typed_store}.get(label, "")
                value = as_typed if CONTROL.search(as_typed) else value
            elif label == "SWEEP" and (hostile != hostile.rstrip() or hostile.endswith("\\")):
                refused, value = True, str(place)  # WorkingDirectory= would lose its end
            elif label == "the `bisect` program" and re.search(r"[\"'\\$]", hostile):
                refused = True  # systemd runs no program whose path has one (nor expands $$)
            intended = (str(runs), "schedule", "run", f"h{len(found)}", "--sweep", swept,
                        "--store", stored, "--on-calendar", WHEN)
            found.append(Case(f"h{len(found)}", typed, typed_store, cwd, home, runs,
                              label=label if refused else "", value=value if refused else "",
                              intended=() if refused else intended))
    url = "postgresql://bisect@127.0.0.1:5432/b%20x?application_name=100%25%20$HOME%h"
    found.append(Case(f"h{len(found)}", str(sweep), url, base, base, program, intended=(
        str(program), "schedule", "run", f"h{len(found)}", "--sweep", str(sweep), "--store", url,
        "--on-calendar", WHEN)))
    for name in NAMES:
        found.append(Case(name, str(sweep), store, base, base, program, label="NAME", value=name))
    for expression in CALENDARS:
        found.append(Case(f"c{len(found)}", str(sweep), store, base, base, program,
                          calendar=expression, label="--on-calendar", value=expression))
    return found


def planned(case: Case) -> Schedule:
    """The schedule `bisect schedule add` makes of these words, step by step as
    orchestrator/cli/schedule_view.py's `add` does (its crontab line must be this one's)."""
    check_name(case.name)
    calendar.check(case.calendar)
    store = unit_store(case.store)
    return Schedule(name=case.name, calendar=case.calendar, sweep=check_sweep(Path(case.sweep)),
                    store=store, program=bisect_program())


def cron_reads(command: str) -> tuple[str, str | None]:
    """What Vixie cron (do_command.c) runs of a crontab command: the text it gives `sh -c`, and
    the text after the first bare % that it gives the command as stdin (None: no bare %). It
    keeps every backslash but one right before a %, which makes that % a plain one."""
    out: list[str] = []
    escaped = False
    for i, ch in enumerate(command):
        if escaped:
            if ch == "%":
                out[-1] = "%"
            else:
                out.append(ch)
            escaped = False
        elif ch == "%":
            return "".join(out), command[i + 1:]
        else:
            out.append(ch)
            escaped = ch == "\\"
    return "".join(out), None


def dump_words(line: str) -> list[str]:
    """The words of a `Command Line:` of systemd's unit dump (each word as systemd's
    shell_maybe_quote prints it: bare, or in double quotes with \\ before `"\\$`), then as
    systemd's exec expands them ($$ is $; no other $ may be left: it would be a variable)."""
    words = []
    for matched in re.finditer(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s"]+))', line):
        quoted, bare = matched.groups()
        word = bare if bare is not None else re.sub(r"\\(.)", lambda m: {
            "n": "\n", "t": "\t"}.get(m[1], m[1]), quoted)
        assert "$" not in word.replace("$$", ""), f"systemd would expand a variable: {word!r}"
        words.append(word.replace("$$", "$"))
    assert "".join(m[0] for m in re.finditer(
        r'\s*(?:"(?:[^"\\]|\\.)*"|[^\s"]+)', line)) == line, f"not all words: {line!r}"
    return words


def systemd_reads(units: Path, target: str) -> dict[str, dict[str, str]]:
    """systemd's own reading of the units: `systemd --test` (a user manager that only loads the
    units, plans the start of ``target`` and dumps every unit it loaded) run as nobody (it
    refuses root), with the units alone on its path. By unit: its dumped settings."""
    runtime = units / "runtime"
    runtime.mkdir()
    if os.geteuid() == 0:
        os.chown(runtime, 65534, 65534)
    env = {"HOME": str(runtime), "XDG_RUNTIME_DIR": str(runtime),
           "SYSTEMD_UNIT_PATH": str(units), "PATH": "/usr/bin:/bin"}
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] \
        if os.geteuid() == 0 else []
    done = subprocess.run([*drop, "/lib/systemd/systemd", "--test", "--user", f"--unit={target}",
                           "--no-pager"], capture_output=True, text=True, check=False, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    found: dict[str, dict[str, str]] = {}
    unit: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if matched := re.fullmatch(r"\t-> Unit (.+):", line):
            unit = found.setdefault(matched[1], {})
        elif matched := re.fullmatch(r"\t\t(WorkingDirectory|OnCalendar): (.*)", line):
            unit[matched[1]] = matched[2]
        elif matched := re.fullmatch(r"\t\t\tCommand Line: (.*)", line):
            unit.setdefault("ExecStart", matched[1])
    return found


@pytest.fixture
def units() -> Iterator[Path]:
    """Readable by nobody (systemd --test): pytest's own directories are root's alone."""
    directory = Path(tempfile.mkdtemp(prefix="bisect-units-", dir="/tmp"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_hostile_values_are_refused_or_written_exactly(tmp_path: Path, units: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    written = tmp_path / "config" / "systemd" / "user"
    accepted: list[tuple[Case, Schedule]] = []
    all_cases = cases(tmp_path / "base")
    for case in all_cases:
        words = ["schedule", "add", "--on-calendar", case.calendar, "--store", case.store]
        with monkeypatch.context() as env:
            env.chdir(case.cwd)
            env.setenv("HOME", str(case.home))
            env.setattr(sys, "argv", [str(case.program)])
            printed = invoke([*words, "--crontab", "--", case.name, case.sweep])
            installed = invoke([*words, "--user", "--", case.name, case.sweep]) \
                if case.label else None
            try:
                made: Schedule | None = planned(case)
            except (ScheduleError, CalendarError) as exc:
                made, why = None, str(exc)
        if case.label:  # refused, naming the value, and nothing written
            shown = f"{case.label}: {case.value!r}" if case.label != "SWEEP" else repr(case.value)
            for done in (printed, installed):
                assert done is not None and done.exit_code == 2, (case, done)
                assert done.stdout == "" and "Traceback" not in done.stderr
                assert done.stderr.startswith(f"error: {case.label}") and (
                    case.label in ("NAME", "--on-calendar") or shown in done.stderr), (
                    case, done.stderr)
            assert made is None and why.startswith(case.label), (case, why)
            assert not written.exists(), case
            continue
        assert printed.exit_code == 0 and made is not None, (case, printed)
        line = printed.stdout.removesuffix("\n")
        assert "\n" not in line and "\r" not in line and not CONTROL.search(line), case
        assert line == crontab_line(made)  # what the test checks below is what `add` made
        fields = calendar.cron_fields(WHEN)
        assert line.startswith(f"{fields} ")
        command, stdin = cron_reads(line.removeprefix(f"{fields} "))
        assert stdin is None, (case, command)  # no bare %: cron would cut the command there
        record = tmp_path / "argv"
        ran = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                             check=False, cwd="/", env={"PATH": "/usr/bin:/bin",
                                                        "BISECT_ARGV": str(record)})
        assert ran.returncode == 0, (case, ran.stderr)
        if made.store.startswith("sqlite:"):
            assert make_url(made.store).database == str(case.cwd / "rel.db"), case
        pwd, *argv = record.read_bytes().decode().split("\0")[:-1]
        assert pwd == str(Path(case.intended[5]).parent) and tuple(argv) == case.intended, case
        accepted.append((case, made))

    # Every unit `add` would write, in one directory: verified, then read by systemd itself.
    for _, made in accepted:
        (units / made.service).write_text(render_service(made))
        (units / made.timer).write_text(render_timer(made))
    everything = sorted(str(path) for path in units.iterdir())
    verified = subprocess.run(["systemd-analyze", "verify", *everything], capture_output=True,
                              text=True, check=False, timeout=120)
    assert verified.returncode == 0 and verified.stderr == "", verified.stderr
    wanted = " ".join(unit for _, made in accepted for unit in (made.service, made.timer))
    (units / "all.target").write_text(f"[Unit]\nWants={wanted}\n")
    read = systemd_reads(units, "all.target")
    normalized = calendar.check(WHEN).normalized
    for case, made in accepted:
        service = read[made.service]
        assert dump_words(service["ExecStart"]) == list(case.intended), case
        assert service["WorkingDirectory"] == str(Path(case.intended[5]).parent), case
        assert read[made.timer]["OnCalendar"] == normalized, case
    refused = len(all_cases) - len(accepted)
    # every way a hostile string reaches a value is tried; both outcomes are there
    assert len(all_cases) == 7 * len(HOSTILE) + 1 + len(NAMES) + len(CALENDARS)
    assert len(accepted) >= 40 and refused >= 60, (len(accepted), refused)
