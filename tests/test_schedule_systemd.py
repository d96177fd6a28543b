"""Schedules against a real systemd: a lab host that is a container with systemd 252 as PID 1,
reached over real SSH, where `bisect schedule` runs as root as an operator would run it.

The units `add` writes load and are scheduled; a run started by hand, by the timer or at start
(Persistent=true, after a slot missed while "off") runs `bisect schedule run`, which records the
missed slots in the store and runs the sweep. Most schedules here run a sweep whose node cannot
be reached (a failed run, in seconds): a failing run keeps its journal and its log, and the timer
fires again after it. One runs a sweep on a twin inside the container, its Ray started there by
the sweep itself, to the end: a clean run stored as the schedule's, exit 0."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from db.store import Store
from db.sweeps import Sweeps
from deploy.lab import Lab
from deploy.transports.base import CommandResult
from deploy.transports.ssh import SSHTransport
from orchestrator.sweeps import calendar
from tests.support.schedules import VENV_BISECT, write_sweep, write_twin_sweep

pytestmark = pytest.mark.real

STATE = "/var/lib/bisect/schedules"
UNITS = "/etc/systemd/system"


@pytest.fixture(scope="module", autouse=True)
def timers_stopped(systemd_node: SSHTransport) -> Iterator[None]:
    """The lab host is the run's (tests/lab_fixture.py): no timer of these tests fires after."""
    yield
    sh(systemd_node, "systemctl stop 'bisect-sweep-*.timer'").check()


@pytest.fixture(scope="module")
def work(systemd_lab: Lab) -> Path:
    """The host's workdir: the one directory the container and this process both write (the
    container's /tmp is its own)."""
    return Path(systemd_lab.host(1).workdir)


@pytest.fixture(scope="module")
def program() -> Path:
    return VENV_BISECT


@pytest.fixture(scope="module")
def sweep(work: Path) -> Path:
    # what WorkingDirectory= and ExecStart= must hold verbatim: a space, %, $, quotes
    return write_sweep(work / "sweeps dir 100% $HOME 'q' \"d\"")


@pytest.fixture(scope="module")
def twin_sweep(work: Path) -> Path:
    # its services, their logs and Ray's files inside the container; the store out here
    return write_twin_sweep(work / "twin sweep")


def sh(node: SSHTransport, script: str, *args: str, timeout_s: float = 120) -> CommandResult:
    return node.run(["sh", "-c", script, "sh", *args], timeout_s=timeout_s)


def bisect(node: SSHTransport, program: Path, cwd: Path | str, *args: str) -> CommandResult:
    return sh(node, 'cd "$1" && shift && exec "$@"', str(cwd), str(program), *args)


def add(node: SSHTransport, program: Path, sweep: Path, name: str, when: str) -> CommandResult:
    done = bisect(node, program, sweep.parent, "schedule", "add", name, "--on-calendar", when,
                  sweep.name, "--store", "../bisect.db")
    assert done.returncode == 0, done.stderr
    return done


def show(node: SSHTransport, unit: str, *properties: str) -> dict[str, str]:
    out = sh(node, 'systemctl show -p "$1" -- "$2"', ",".join(properties), unit).check().stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def listed(node: SSHTransport, program: Path) -> dict[str, dict[str, object]]:
    done = bisect(node, program, "/", "schedule", "ls", "--json")
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)["schedules"]}


def logs(node: SSHTransport, name: str) -> list[str]:
    done = sh(node, 'ls -1 "$1" 2>/dev/null || true', f"{STATE}/{name}")
    return sorted(line for line in done.stdout.split() if line.endswith(".log"))


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
    """Until ``check`` holds (an event systemd makes happen), or fail saying what never did."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.2)


def finished_runs(node: SSHTransport, name: str) -> list[str]:
    """The logs of the runs that ended (their last line says how)."""
    return [log for log in logs(node, name) if sh(
        node, 'tail -n 1 "$1"', f"{STATE}/{name}/{log}").stdout.startswith(f"# schedule {name}: "
                                                                            "exit ")]


def test_add_installs_units_that_systemd_loads_and_schedules(
        systemd_node: SSHTransport, program: Path, sweep: Path) -> None:
    done = add(systemd_node, program, sweep, "nightly", "*-*-* 03:00")
    assert "added schedule nightly" in done.stdout
    service, timer = f"{UNITS}/bisect-sweep-nightly.service", f"{UNITS}/bisect-sweep-nightly.timer"
    modes = sh(systemd_node, 'stat -c %a "$1" "$2"', service, timer).check().stdout.split()
    assert modes == ["644", "644"]
    assert sh(systemd_node, 'systemd-analyze verify "$1" "$2"', service, timer).returncode == 0
    state = show(systemd_node, "bisect-sweep-nightly.timer", "UnitFileState", "ActiveState",
                 "NextElapseUSecRealtime", "TimersCalendar")
    assert state["UnitFileState"] == "enabled" and state["ActiveState"] == "active"
    assert state["NextElapseUSecRealtime"] and "OnCalendar=*-*-* 03:00:00" in state[
        "TimersCalendar"]
    loaded = show(systemd_node, "bisect-sweep-nightly.service", "WorkingDirectory", "ExecStart",
                  "Type")
    assert loaded["WorkingDirectory"] == str(sweep.parent) and loaded["Type"] == "oneshot"
    # (the words arrive exactly: a run says what it got, see the next test)
    assert loaded["ExecStart"].startswith(f"{{ path={program} ; argv[]={program} schedule run "
                                          "nightly --sweep ")
    row = listed(systemd_node, program)["nightly"]
    assert row["calendar"] == "*-*-* 03:00" and row["enabled"] == "enabled"
    assert row["next"] is not None and row["last"] is None and row["last_result"] is None

    again = add(systemd_node, program, sweep, "nightly", "Mon..Fri 04:00")  # a new calendar applies
    assert "replaced schedule nightly" in again.stdout
    assert "OnCalendar=Mon..Fri *-*-* 04:00:00" in show(
        systemd_node, "bisect-sweep-nightly.timer", "TimersCalendar")["TimersCalendar"]


def test_a_failing_run_keeps_its_journal_and_its_log_and_run_by_hand_is_the_same(
        systemd_node: SSHTransport, program: Path, sweep: Path) -> None:
    add(systemd_node, program, sweep, "failing", "*-*-* 03:00")
    # oneshot: until it ends
    started = sh(systemd_node, "systemctl start bisect-sweep-failing.service")
    assert started.returncode != 0
    ended = show(systemd_node, "bisect-sweep-failing.service", "Result", "ExecMainStatus")
    assert ended["Result"] == "exit-code" and ended["ExecMainStatus"] not in ("", "0")
    journal = sh(systemd_node, "journalctl -q --no-pager -o cat -u bisect-sweep-failing.service"
                 ).check().stdout
    ran = shlex.join([str(program), "sweep", str(sweep)])
    assert f"schedule failing: {ran} --store" in journal  # every word as `add` was given it
    assert f"schedule failing: exit {ended['ExecMainStatus']}" in journal
    [log] = logs(systemd_node, "failing")
    text = sh(systemd_node, 'cat "$1"', f"{STATE}/failing/{log}").check().stdout
    sweep_said = [line for line in text.splitlines() if not line.startswith("# ")]
    assert sweep_said and all(line in journal for line in sweep_said)  # its words, both places
    assert sh(systemd_node, 'stat -c %a "$1" "$2"', f"{STATE}/failing", f"{STATE}/failing/{log}"
              ).check().stdout.split() == ["700", "600"]
    row = listed(systemd_node, program)["failing"]
    assert row["last_result"] == "exit-code"
    assert row["last_exit_status"] == int(ended["ExecMainStatus"])

    by_hand = bisect(systemd_node, program, "/", "schedule", "run", "failing")  # read from its unit
    assert by_hand.returncode == int(ended["ExecMainStatus"])
    assert f"{ran} --store" in by_hand.stderr and len(logs(systemd_node, "failing")) == 2


def test_the_timer_fires_on_its_calendar_and_again_after_a_failure_until_removed(
        systemd_node: SSHTransport, program: Path, sweep: Path) -> None:
    add(systemd_node, program, sweep, "every2", "*:*:0/2")
    wait_for(lambda: len(finished_runs(systemd_node, "every2")) >= 2, "two runs of the 2 s timer")
    for log in finished_runs(systemd_node, "every2"):
        last = sh(systemd_node, 'tail -n 1 "$1"', f"{STATE}/every2/{log}").stdout
        assert last.strip() != "# schedule every2: exit 0"
    timer = show(systemd_node, "bisect-sweep-every2.timer", "ActiveState", "LastTriggerUSec")
    assert timer["ActiveState"] == "active" and timer["LastTriggerUSec"] not in ("", "n/a")

    removed = bisect(systemd_node, program, "/", "schedule", "rm", "every2")
    assert removed.returncode == 0, removed.stderr
    assert sh(systemd_node, 'ls "$1"/bisect-sweep-every2.* 2>/dev/null', UNITS).stdout == ""
    state = show(systemd_node, "bisect-sweep-every2.timer", "LoadState", "ActiveState")
    assert state == {"LoadState": "not-found", "ActiveState": "inactive"}
    assert "every2" not in listed(systemd_node, program)
    again = bisect(systemd_node, program, "/", "schedule", "rm", "every2")
    assert again.returncode == 2 and "no schedule 'every2'" in again.stderr
    assert logs(systemd_node, "every2")  # the runs' logs stay


def test_a_slot_missed_while_off_runs_at_start_and_the_ones_before_it_are_recorded(
        systemd_node: SSHTransport, program: Path, sweep: Path, work: Path) -> None:
    now = datetime.now(UTC)
    latest = now.replace(hour=3, minute=0, second=0, microsecond=0)
    latest -= timedelta(days=1) if latest > now else timedelta(0)
    previous = latest - timedelta(days=3)  # the schedule's last run: three slots ago
    with Store.open(str(work / "bisect.db")) as store:
        Sweeps(store).record_missed("nightly", schedule="catchup", slot=previous)
    # The timer last fired then (systemd's own record of it): it has been "off" since.
    sh(systemd_node, 'mkdir -p /var/lib/systemd/timers && touch -d "@$1" "$2"',
       str(int(previous.timestamp()) + 1),
       "/var/lib/systemd/timers/stamp-bisect-sweep-catchup.timer").check()
    add(systemd_node, program, sweep, "catchup", "*-*-* 03:00 UTC")
    wait_for(lambda: bool(finished_runs(systemd_node, "catchup")), "the catch-up run at start")
    with Store.open(str(work / "bisect.db")) as store:
        rows = [r for r in Sweeps(store).runs("nightly") if r.schedule == "catchup"]
    missed = [r.slot for r in rows if r.status == "missed"]
    assert missed == [previous, latest - timedelta(days=2), latest - timedelta(days=1)]
    assert missed[1:] == calendar.missed("*-*-* 03:00 UTC", previous, now)
    journal = sh(systemd_node, "journalctl -q --no-pager -o cat -u bisect-sweep-catchup.service"
                 ).check().stdout
    assert "2 missed run(s) recorded" in journal
    row = listed(systemd_node, program)["catchup"]
    assert row["last"] is not None and row["last_result"] == "exit-code"


def test_a_clean_run_on_twins_inside_the_host_is_stored_as_the_schedules_run(
        systemd_node: SSHTransport, program: Path, twin_sweep: Path, work: Path) -> None:
    add(systemd_node, program, twin_sweep, "ontwins", "*-*-* 03:00")
    started = sh(systemd_node, "systemctl start bisect-sweep-ontwins.service", timeout_s=600)
    journal = sh(systemd_node, "journalctl -q --no-pager -o cat -u bisect-sweep-ontwins.service"
                 ).check().stdout
    assert started.returncode == 0, journal[-4000:]
    ended = show(systemd_node, "bisect-sweep-ontwins.service", "Result", "ExecMainStatus")
    assert ended == {"Result": "success", "ExecMainStatus": "0"}
    with Store.open(str(work / "bisect.db")) as store:
        [run] = Sweeps(store).runs("twins")
        assert run.campaign_id is not None
        trials = store.trials(run.campaign_id)
    assert (run.trigger, run.schedule, run.status) == ("schedule", "ontwins", "clean")
    assert run.reason is not None and run.reason.startswith("no baseline yet")
    assert len(trials) == 2  # trials.min of the one variant, run by Ray inside the container

    [log] = logs(systemd_node, "ontwins")
    text = sh(systemd_node, 'cat "$1"', f"{STATE}/ontwins/{log}").check().stdout
    sweep_said = [line for line in text.splitlines() if not line.startswith("# ")]
    assert "sweep twins: run 1, no baseline yet" in sweep_said
    assert any(line.startswith("sweep twins run 1: clean: no baseline yet") for line in sweep_said)
    # its words, both places (journald drops a line's trailing blanks)
    assert [line for line in sweep_said if line.rstrip() not in journal] == [], journal
    assert text.splitlines()[-1] == "# schedule ontwins: exit 0"
    assert "schedule ontwins: exit 0" in journal
    row = listed(systemd_node, program)["ontwins"]
    assert row["last_result"] == "success" and row["last_exit_status"] == 0
