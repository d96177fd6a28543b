"""Schedules without a running systemd: the units (checked by `systemd-analyze verify`, read back
exactly), the crontab line, the calendar as systemd counts it (missed slots), a run's log and
exit code, and bad input refused with exit 2 before anything is written."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.store import Store
from db.sweeps import Sweeps
from orchestrator.cli import app, schedule_view  # noqa: F401 - registers `bisect schedule`
from orchestrator.sweeps import calendar, scheduled
from orchestrator.sweeps.calendar import CalendarError
from orchestrator.sweeps.schedule import (
    Schedule,
    ScheduleError,
    bisect_program,
    parse_service,
    render_service,
    render_timer,
    unit_store,
    unit_unquote,
)
from tests.support.schedules import VENV_BISECT, write_sweep

runner = CliRunner()
HOSTILE_DIR = "sweeps 100% $HOME \"q\" 'a' \\b ;x"


def schedule(sweep: Path, **changes: object) -> Schedule:
    values: dict[str, object] = {"name": "nightly", "calendar": "*-*-* 03:00", "sweep": sweep,
                                 "store": str(sweep.parent / "bisect.db"),
                                 "program": str(VENV_BISECT)}
    values.update(changes)
    return Schedule(**values)  # type: ignore[arg-type]


def add(*args: str) -> tuple[int, str, str]:
    done = runner.invoke(app, ["schedule", "add", *args])
    return done.exit_code, done.stdout, done.stderr


# -- the units --

@pytest.mark.real
def test_the_units_pass_systemd_analyze_verify_and_read_back_exactly(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / HOSTILE_DIR)
    made = schedule(sweep, store=str(tmp_path / "store %h $USER.db"), calendar="Mon..Fri 9:00")
    units = tmp_path / "units"
    units.mkdir()
    (units / made.service).write_text(render_service(made))
    (units / made.timer).write_text(render_timer(made))
    done = subprocess.run(["systemd-analyze", "verify", str(units / made.service),
                           str(units / made.timer)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    service = render_service(made)
    assert "Type=oneshot" in service and "StandardOutput=journal" in service
    assert f"WorkingDirectory={str(sweep.parent).replace('%', '%%')}\n" in service
    timer = render_timer(made)
    for line in ("OnCalendar=Mon..Fri 9:00", "Persistent=true", f"Unit={made.service}",
                 "WantedBy=timers.target"):
        assert f"\n{line}\n" in timer
    # What `run NAME` reads back is what systemd runs: every byte of every word.
    assert parse_service(service, user=False, where="x") == made
    assert made.argv()[0] == str(VENV_BISECT) and made.argv()[1:4] == ["schedule", "run",
                                                                          "nightly"]
    # A program that does not exist is what verify catches.
    (units / made.service).write_text(render_service(schedule(sweep, program="/no/bisect")))
    failed = subprocess.run(["systemd-analyze", "verify", str(units / made.service)],
                            capture_output=True, text=True, check=False)
    assert failed.returncode != 0 and "/no/bisect" in failed.stderr


@pytest.mark.pure
@pytest.mark.parametrize("word", ["plain", "a b", "100%", "$X ${Y} $$", '"q" \\ \\n', "tab\t",
                                  "ünï ☃", "%h%n", "-x", ""])
def test_unit_quoting_reads_back_every_word(word: str) -> None:
    from deploy.services.systemd import unit_quote

    line = " ".join(unit_quote(w, expand_dollar=True) for w in (word, "next"))
    assert unit_unquote(line) == [word, "next"]


@pytest.mark.pure
def test_user_units_have_no_network_target_and_the_program_is_absolute(tmp_path: Path) -> None:
    made = schedule(write_sweep(tmp_path), user=True)
    assert "network-online" not in render_service(made)
    assert "network-online.target" in render_service(schedule(made.sweep))
    assert os.path.isabs(bisect_program()) and os.access(bisect_program(), os.X_OK)


# -- the crontab line --

@pytest.mark.real
@pytest.mark.parametrize(("expression", "fields"), [
    ("*-*-* 03:00", "0 3 * * *"), ("*-*-* 03:07:00", "7 3 * * *"), ("daily", "0 0 * * *"),
    ("hourly", "0 * * * *"), ("weekly", "0 0 * * 1"), ("monthly", "0 0 1 * *"),
    ("Mon..Fri 09:30", "30 9 * * 1-5"), ("Sat,Sun 1:00", "0 1 * * 0,6"),
    ("*-*-* *:00/15", "*/15 * * * *"), ("*:05/20", "5-59/20 * * * *"),
    ("*-*-* 1..5/2:00", "0 1-5/2 * * *"), ("*-01,07-01 00:00", "0 0 1 1,7 *"),
])
def test_common_calendars_become_crontab_fields(expression: str, fields: str) -> None:
    assert calendar.cron_fields(expression) == fields


@pytest.mark.real
@pytest.mark.parametrize(("expression", "why"), [
    ("*-*-* 03:00:30", "seconds"), ("*:*:0/5", "seconds"), ("2099-*-* 03:00", "years"),
    ("*-*~01", "end of the month"), ("*-*-* 03:00 Europe/Berlin", "time zone"),
    ("Mon *-*-01 00:00", "both weekdays and days"),
])
def test_what_cron_cannot_say_is_refused_with_exit_2(tmp_path: Path, expression: str,
                                                     why: str) -> None:
    with pytest.raises(CalendarError, match=why):
        calendar.cron_fields(expression)
    code, stdout, stderr = add("n", str(write_sweep(tmp_path)), "--on-calendar", expression,
                               "--crontab")
    assert code == 2 and stdout == ""
    assert "--on-calendar" in stderr and "no crontab equivalent" in stderr and why in stderr


@pytest.mark.real
def test_crontab_prints_one_line_that_runs_what_the_service_would(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "a dir 100%")
    code, stdout, stderr = add("nightly", str(sweep), "--on-calendar", "Mon..Fri 03:00",
                               "--crontab", "--store", str(tmp_path / "s.db"))
    assert code == 0, stderr
    line = stdout.rstrip("\n")
    assert "\n" not in line and line.startswith("0 3 * * 1-5 cd ")
    assert "no catch-up" in stderr
    # cron turns a bare % into a newline: every % is escaped; the rest is one shell line
    command = line.split(" ", 5)[5]
    assert "%" not in command.replace("\\%", "")
    words = shlex.split(command.replace("\\%", "%"))
    assert words[:3] == ["cd", str(sweep.parent), "&&"]
    assert words[3:] == schedule(sweep, calendar="Mon..Fri 03:00", store=str(tmp_path / "s.db"),
                                 program=bisect_program()).argv()
    assert not list(tmp_path.glob("**/*.service"))


# -- bad input: exit 2, nothing written --

@pytest.mark.pure
@pytest.mark.parametrize("name", ["a b", "../x", "-x", ".hidden", "x/y", "é", "", "x" * 101,
                                  "a;b", "a$b"])
def test_a_name_that_is_not_safe_is_refused(tmp_path: Path, name: str) -> None:
    code, _, stderr = add(name, str(write_sweep(tmp_path)), "--on-calendar", "daily",
                          "--crontab")
    assert code == 2 and "NAME" in stderr and "Traceback" not in stderr


@pytest.mark.real
@pytest.mark.parametrize("expression", ["bogus", "*-*-* 25:00", "2001-01-01", "daily%", "a\nb"])
def test_a_bad_calendar_is_refused_naming_on_calendar(tmp_path: Path, expression: str) -> None:
    code, _, stderr = add("n", str(write_sweep(tmp_path)), "--on-calendar", expression)
    assert code == 2 and stderr.startswith("error: --on-calendar:"), stderr


@pytest.mark.real
@pytest.mark.parametrize("url", ["postgresql://bisect:s3cr3t@127.0.0.1/bisect",
                                 "postgresql://bisect@127.0.0.1/bisect?password=s3cr3t"])
def test_a_store_url_with_a_password_is_refused(tmp_path: Path, url: str) -> None:
    code, stdout, stderr = add("n", str(write_sweep(tmp_path)), "--on-calendar", "daily",
                               "--store", url, "--crontab")
    assert code == 2 and stdout == ""
    assert ".pgpass" in stderr and "PGPASSFILE" in stderr and "s3cr3t" not in stderr


@pytest.mark.pure
def test_stores_become_absolute_and_a_url_without_a_password_stays(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    monkeypatch.chdir(tmp_path)
    assert unit_store("bisect.db") == str(tmp_path / "bisect.db")
    assert unit_store("sqlite:///rel.db") == f"sqlite:///{tmp_path}/rel.db"
    url = "postgresql://bisect@127.0.0.1:5432/bisect?passfile=/etc/bisect/pgpass"
    assert unit_store(url) == url
    with pytest.raises(ScheduleError, match="control character"):
        unit_store("a\nb.db")


@pytest.mark.real
def test_a_missing_or_invalid_sweep_file_is_refused_naming_it(tmp_path: Path) -> None:
    code, _, stderr = add("n", str(tmp_path / "none.yaml"), "--on-calendar", "daily")
    assert code == 2 and "no sweep file" in stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: nightly\nnodes: []\n")
    code, _, stderr = add("n", str(bad), "--on-calendar", "daily", "--crontab")
    assert code == 2 and f"{bad}:2: nodes" in stderr, stderr


@pytest.mark.pure
def test_run_and_rm_of_an_unknown_schedule_and_half_the_run_options_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for command in (["run", "ghost", "--user"], ["rm", "ghost", "--user"]):
        done = runner.invoke(app, ["schedule", *command])
        assert done.exit_code == 2 and "no schedule 'ghost'" in done.stderr
    done = runner.invoke(app, ["schedule", "run", "n", "--sweep", "x.yaml"])
    assert done.exit_code == 2 and "go together" in done.stderr


# -- the calendar, as systemd counts it --

def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0,
        second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.mark.real
def test_missed_slots_are_all_but_the_one_this_run_serves() -> None:
    previous, now = utc(2024, 1, 1, 3, 0, 5), utc(2024, 1, 4, 3, 0, 2)
    assert calendar.slots("*-*-* 03:00", previous, now) == [
        utc(2024, 1, 2, 3), utc(2024, 1, 3, 3), utc(2024, 1, 4, 3)]
    assert calendar.missed("*-*-* 03:00", previous, now) == [utc(2024, 1, 2, 3),
                                                             utc(2024, 1, 3, 3)]
    # On time: nothing missed. A slot exactly at `previous` is previous's own.
    assert calendar.missed("*-*-* 03:00", utc(2024, 1, 3, 3), now) == []
    assert calendar.missed("Mon..Fri 03:00", utc(2024, 1, 5, 3), utc(2024, 1, 9, 4)) == [
        utc(2024, 1, 8, 3)]  # Fri -> Tue: Mon missed, Sat and Sun are no slots


@pytest.mark.real
def test_slots_follow_the_local_time_zone_as_timers_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlin")  # 03:00 there: 02:00 UTC in winter, 01:00 in summer
    assert calendar.slots("*-*-* 03:00", utc(2024, 1, 1), utc(2024, 1, 2)) == [utc(2024, 1, 1, 2)]
    assert calendar.slots("*-*-* 03:00", utc(2024, 7, 1), utc(2024, 7, 2)) == [utc(2024, 7, 1, 1)]
    assert calendar.slots("*-*-* 03:00 UTC", utc(2024, 7, 1), utc(2024, 7, 2)) == [
        utc(2024, 7, 1, 3)]


@pytest.mark.real
def test_slots_over_many_batches_are_counted_once() -> None:
    found = calendar.slots("*:*:0/5", utc(2024, 1, 1), utc(2024, 1, 1, 2))
    assert len(found) == 2 * 3600 // 5 and len(set(found)) == len(found)
    assert found[0] == utc(2024, 1, 1, 0, 0, 5) and found[-1] == utc(2024, 1, 1, 2)


# -- a run --

@pytest.mark.real
def test_a_run_records_the_missed_slots_once(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path)
    made = schedule(sweep, store=str(tmp_path / "bisect.db"))
    now = datetime.now(UTC)
    with Store.open(made.store) as store:
        sweeps = Sweeps(store)
        assert scheduled.record_missed(made, now, print) == []  # no previous run: none
        last = (now - timedelta(days=3)).replace(hour=3, minute=0, second=0, microsecond=0)
        sweeps.record_missed("nightly", schedule="nightly", slot=last)
        sweeps.record_missed("nightly", schedule="other", slot=last - timedelta(days=9))
        expected = calendar.missed(made.calendar, last, now)
        assert len(expected) in (1, 2)  # 3 or 2 slots since, as now is before or after 03:00
        assert scheduled.record_missed(made, now, print) == expected
        assert scheduled.record_missed(made, now, print) == []  # counted from the last slot
        rows = [r for r in sweeps.runs("nightly") if r.schedule == "nightly"]
    assert [r.slot for r in rows] == [last, *expected]
    assert all(r.status == "missed" and r.trigger == "schedule" for r in rows)


@pytest.mark.real
def test_a_run_passes_its_exit_code_and_keeps_its_log_owner_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BISECT_STATE_DIR", str(tmp_path / "state"))
    program = tmp_path / "fake-bisect"  # a stand-in for `bisect sweep`: argv, both streams, 3
    program.write_text('#!/bin/sh\necho "out $*"; echo "err $PWD" >&2; exit 3\n')
    program.chmod(0o755)
    made = schedule(write_sweep(tmp_path / "s d"), program=str(program))
    assert scheduled.run(made, print) == 3
    seen = capfd.readouterr()
    assert f"out sweep {made.sweep} --store {made.store} --schedule nightly" in seen.out
    assert f"err {made.workdir}" in seen.err  # run from the sweep file's directory
    directory = tmp_path / "state" / "nightly"
    [log] = directory.glob("run-*.log")
    text = log.read_text()
    assert "out sweep" in text and "err " in text and text.endswith("exit 3\n")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    for _ in range(scheduled.LOGS_KEPT + 2):  # the last ones stay
        scheduled.run(made, lambda _: None)
    assert len(list(directory.glob("run-*.log"))) == scheduled.LOGS_KEPT


@pytest.mark.real
def test_ls_lists_installed_schedules_even_where_systemd_does_not_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    empty = runner.invoke(app, ["schedule", "ls", "--user", "--json"])
    assert empty.exit_code == 0 and json.loads(empty.stdout) == {"scope": "user",
                                                                 "schedules": []}
    made = schedule(write_sweep(tmp_path / "sweeps"), user=True, calendar="hourly")
    units = tmp_path / "config" / "systemd" / "user"
    units.mkdir(parents=True)
    (units / made.service).write_text(render_service(made))
    (units / made.timer).write_text(render_timer(made))
    listed = runner.invoke(app, ["schedule", "ls", "--user", "--json"])
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)["schedules"]
    assert row["name"] == "nightly" and row["calendar"] == "hourly"
    assert row["sweep"] == str(made.sweep) and row["store"] == made.store
    assert row["next"] is None and row["last_result"] is None  # no user manager here
    shown = runner.invoke(app, ["schedule", "ls", "--user"])
    assert shown.exit_code == 0 and "nightly  'hourly'" in shown.stdout


@pytest.mark.real
def test_what_systemctl_refuses_is_undone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """No user manager answers here: a new schedule's units go again, a replaced one's come
    back exactly (exit 1, systemctl's own words)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    sweep = write_sweep(tmp_path / "sweeps")
    code, _, stderr = add("fresh", str(sweep), "--on-calendar", "daily", "--user")
    assert code == 1 and "systemctl --user" in stderr
    units = tmp_path / "config" / "systemd" / "user"
    assert list(units.iterdir()) == []
    old = schedule(sweep, user=True, calendar="hourly")
    (units / old.service).write_text(render_service(old))
    (units / old.timer).write_text(render_timer(old))
    code, _, stderr = add("nightly", str(sweep), "--on-calendar", "daily", "--user")
    assert code == 1
    assert (units / old.service).read_text() == render_service(old)
    assert (units / old.timer).read_text() == render_timer(old)
    assert sorted(p.name for p in units.iterdir()) == [old.service, old.timer]
