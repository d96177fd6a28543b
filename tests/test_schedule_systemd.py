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
import os
import shlex
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from db.store import Store
from db.sweeps import Sweeps
from deploy.lab import Lab, lab_down, lab_up
from deploy.lab.registry import process_prefix
from deploy.transports.base import CommandResult
from deploy.transports.ssh import SSHTransport
from orchestrator.sweeps import calendar
from tests.support.schedules import VENV_BISECT, write_sweep, write_twin_sweep

STATE = "/var/lib/bisect/schedules"
UNITS = "/etc/systemd/system"


@pytest.fixture(scope="module")
def sd_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if os.geteuid() != 0:
        reason = "a systemd lab host needs root"
        if os.environ.get("CI"):
            pytest.fail(reason)  # CI runs as root: a skip there would hide a broken lab
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("schedlab")
    built = lab_up(directory, hosts=1, systemd=True, prefix=process_prefix("bsc"),
                   owner_pid=os.getpid())
    try:
        yield built
    finally:
        lab_down(directory)


@pytest.fixture(scope="module")
def node(sd_lab: Lab) -> Iterator[SSHTransport]:
    transport = SSHTransport(sd_lab.target(1))
    yield transport
    transport.close()


@pytest.fixture(scope="module")
def work(sd_lab: Lab) -> Path:
    """The host's workdir: the one directory the container and this process both write (the
    container's /tmp is its own)."""
    return Path(sd_lab.host(1).workdir)


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
        node: SSHTransport, program: Path, sweep: Path) -> None:
    done = add(node, program, sweep, "nightly", "*-*-* 03:00")
    assert "added schedule nightly" in done.stdout
    service, timer = f"{UNITS}/bisect-sweep-nightly.service", f"{UNITS}/bisect-sweep-nightly.timer"
    modes = sh(node, 'stat -c %a "$1" "$2"', service, timer).check().stdout.split()
    assert modes == ["644", "644"]
    assert sh(node, 'systemd-analyze verify "$1" "$2"', service, timer).returncode == 0
    state = show(node, "bisect-sweep-nightly.timer", "UnitFileState", "ActiveState",
                 "NextElapseUSecRealtime", "TimersCalendar")
    assert state["UnitFileState"] == "enabled" and state["ActiveState"] == "active"
    assert state["NextElapseUSecRealtime"] and "OnCalendar=*-*-* 03:00:00" in state[
        "TimersCalendar"]
    loaded = show(node, "bisect-sweep-nightly.service", "WorkingDirectory", "ExecStart", "Type")
    assert loaded["WorkingDirectory"] == str(sweep.parent) and loaded["Type"] == "oneshot"
    # (the words arrive exactly: a run says what it got, see the next test)
    assert loaded["ExecStart"].startswith(f"{{ path={program} ; argv[]={program} schedule run "
                                          "nightly --sweep ")
    row = listed(node, program)["nightly"]
    assert row["calendar"] == "*-*-* 03:00" and row["enabled"] == "enabled"
    assert row["next"] is not None and row["last"] is None and row["last_result"] is None

    again = add(node, program, sweep, "nightly", "Mon..Fri 04:00")  # a new calendar applies
    assert "replaced schedule nightly" in again.stdout
    assert "OnCalendar=Mon..Fri *-*-* 04:00:00" in show(
        node, "bisect-sweep-nightly.timer", "TimersCalendar")["TimersCalendar"]


def test_a_failing_run_keeps_its_journal_and_its_log_and_run_by_hand_is_the_same(
        node: SSHTransport, program: Path, sweep: Path) -> None:
    add(node, program, sweep, "failing", "*-*-* 03:00")
    started = sh(node, "systemctl start bisect-sweep-failing.service")  # oneshot: until it ends
    assert started.returncode != 0
    ended = show(node, "bisect-sweep-failing.service", "Result", "ExecMainStatus")
    assert ended["Result"] == "exit-code" and ended["ExecMainStatus"] not in ("", "0")
    journal = sh(node, "journalctl -q --no-pager -o cat -u bisect-sweep-failing.service"
                 ).check().stdout
    ran = shlex.join([str(program), "sweep", str(sweep)])
    assert f"schedule failing: {ran} --store" in journal  # every word as `add` was given it
    assert f"schedule failing: exit {ended['ExecMainStatus']}" in journal
    [log] = logs(node, "failing")
    text = sh(node, 'cat "$1"', f"{STATE}/failing/{log}").check().stdout
    sweep_said = [line for line in text.splitlines() if not line.startswith("# ")]
    assert sweep_said and all(line in journal for line in sweep_said)  # its words, both places
    assert sh(node, 'stat -c %a "$1" "$2"', f"{STATE}/failing", f"{STATE}/failing/{log}"
              ).check().stdout.split() == ["700", "600"]
    row = listed(node, program)["failing"]
    assert row["last_result"] == "exit-code"
    assert row["last_exit_status"] == int(ended["ExecMainStatus"])

    by_hand = bisect(node, program, "/", "schedule", "run", "failing")  # read from its unit
    assert by_hand.returncode == int(ended["ExecMainStatus"])
    assert f"{ran} --store" in by_hand.stderr and len(logs(node, "failing")) == 2


def test_the_timer_fires_on_its_calendar_and_again_after_a_failure_until_removed(
        node: SSHTransport, program: Path, sweep: Path) -> None:
    add(node, program, sweep, "every5", "*:*:0/5")
    wait_for(lambda: len(finished_runs(node, "every5")) >= 2, "two runs of the 5 s timer")
    for log in finished_runs(node, "every5"):
        last = sh(node, 'tail -n 1 "$1"', f"{STATE}/every5/{log}").stdout
        assert last.strip() != "# schedule every5: exit 0"
    timer = show(node, "bisect-sweep-every5.timer", "ActiveState", "LastTriggerUSec")
    assert timer["ActiveState"] == "active" and timer["LastTriggerUSec"] not in ("", "n/a")

    removed = bisect(node, program, "/", "schedule", "rm", "every5")
    assert removed.returncode == 0, removed.stderr
    assert sh(node, 'ls "$1"/bisect-sweep-every5.* 2>/dev/null', UNITS).stdout == ""
    state = show(node, "bisect-sweep-every5.timer", "LoadState", "ActiveState")
    assert state == {"LoadState": "not-found", "ActiveState": "inactive"}
    assert "every5" not in listed(node, program)
    again = bisect(node, program, "/", "schedule", "rm", "every5")
    assert again.returncode == 2 and "no schedule 'every5'" in again.stderr
    assert logs(node, "every5")  # the runs' logs stay


def test_a_slot_missed_while_off_runs_at_start_and_the_ones_before_it_are_recorded(
        node: SSHTransport, program: Path, sweep: Path, work: Path) -> None:
    now = datetime.now(UTC)
    latest = now.replace(hour=3, minute=0, second=0, microsecond=0)
    latest -= timedelta(days=1) if latest > now else timedelta(0)
    previous = latest - timedelta(days=3)  # the schedule's last run: three slots ago
    with Store.open(str(work / "bisect.db")) as store:
        Sweeps(store).record_missed("nightly", schedule="catchup", slot=previous)
    # The timer last fired then (systemd's own record of it): it has been "off" since.
    sh(node, 'mkdir -p /var/lib/systemd/timers && touch -d "@$1" "$2"',
       str(int(previous.timestamp()) + 1),
       "/var/lib/systemd/timers/stamp-bisect-sweep-catchup.timer").check()
    add(node, program, sweep, "catchup", "*-*-* 03:00 UTC")
    wait_for(lambda: bool(finished_runs(node, "catchup")), "the catch-up run at start")
    with Store.open(str(work / "bisect.db")) as store:
        rows = [r for r in Sweeps(store).runs("nightly") if r.schedule == "catchup"]
    missed = [r.slot for r in rows if r.status == "missed"]
    assert missed == [previous, latest - timedelta(days=2), latest - timedelta(days=1)]
    assert missed[1:] == calendar.missed("*-*-* 03:00 UTC", previous, now)
    journal = sh(node, "journalctl -q --no-pager -o cat -u bisect-sweep-catchup.service"
                 ).check().stdout
    assert "2 missed run(s) recorded" in journal
    row = listed(node, program)["catchup"]
    assert row["last"] is not None and row["last_result"] == "exit-code"


def test_a_clean_run_on_twins_inside_the_host_is_stored_as_the_schedules_run(
        node: SSHTransport, program: Path, twin_sweep: Path, work: Path) -> None:
    add(node, program, twin_sweep, "ontwins", "*-*-* 03:00")
    started = sh(node, "systemctl start bisect-sweep-ontwins.service", timeout_s=600)
    journal = sh(node, "journalctl -q --no-pager -o cat -u bisect-sweep-ontwins.service"
                 ).check().stdout
    assert started.returncode == 0, journal[-4000:]
    ended = show(node, "bisect-sweep-ontwins.service", "Result", "ExecMainStatus")
    assert ended == {"Result": "success", "ExecMainStatus": "0"}
    with Store.open(str(work / "bisect.db")) as store:
        [run] = Sweeps(store).runs("twins")
        assert run.campaign_id is not None
        trials = store.trials(run.campaign_id)
    assert (run.trigger, run.schedule, run.status) == ("schedule", "ontwins", "clean")
    assert run.reason is not None and run.reason.startswith("no baseline yet")
    assert len(trials) == 2  # trials.min of the one variant, run by Ray inside the container

    [log] = logs(node, "ontwins")
    text = sh(node, 'cat "$1"', f"{STATE}/ontwins/{log}").check().stdout
    sweep_said = [line for line in text.splitlines() if not line.startswith("# ")]
    assert "sweep twins: run 1, no baseline yet" in sweep_said
    assert any(line.startswith("sweep twins run 1: clean: no baseline yet") for line in sweep_said)
    # its words, both places (journald drops a line's trailing blanks)
    assert [line for line in sweep_said if line.rstrip() not in journal] == [], journal
    assert text.splitlines()[-1] == "# schedule ontwins: exit 0"
    assert "schedule ontwins: exit 0" in journal
    row = listed(node, program)["ontwins"]
    assert row["last_result"] == "success" and row["last_exit_status"] == 0
