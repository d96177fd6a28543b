"""A test run stopped by a signal leaves nothing running: SIGTERM (a CI timeout) and SIGINT end
it with every fixture torn down (tests/support/stops.py); after a SIGKILL its reaper
(tests/support/reaper.py) tears its labs down and stops its twins and its PostgreSQL server.

Each case is a child pytest of tests/support/held_run.py, whose one test takes the real fixtures
(the SSH lab, the systemd lab host, a twin, PostgreSQL), writes what they started, and sleeps.
The three children run at once: the expensive part, starting pytest and the labs, is paid in
parallel (the labs build one at a time, under the lab registry's lock)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from deploy.lab import lab_down, net
from deploy.lab.sshd import start_time
from tests.lab_fixture import needs_root
from tests.support import stops

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parent.parent
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGKILL)
UP_S = 120.0  # three children building two labs each, on a loaded 2-core machine
GONE_S = 30.0  # from the signal to nothing left


def start(directory: Path) -> subprocess.Popen[bytes]:
    directory.mkdir()
    log = open(directory / "pytest.log", "wb")  # noqa: SIM115 - the child's, closed at exit
    with log:
        return subprocess.Popen(
            [sys.executable, "-m", "pytest", "tests/support/held_run.py", "-q",
             "-p", "no:cacheprovider", f"--basetemp={directory / 'tmp'}"], cwd=REPO,
            env={**os.environ, "BISECT_HELD": str(directory / "held.json")},
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)  # its own group: what it starts is no concern of ours


def log_of(directory: Path) -> str:
    return (directory / "pytest.log").read_text(errors="replace")[-3000:]


def wait_held(child: subprocess.Popen[bytes], directory: Path, deadline: float
              ) -> dict[str, Any]:
    """What the child started, once it has written it (the file appears whole)."""
    path = directory / "held.json"
    while not path.exists():
        assert child.poll() is None, f"the child run ended before it held anything:\n" \
                                     f"{log_of(directory)}"
        assert time.monotonic() < deadline, f"the child run held nothing:\n{log_of(directory)}"
        time.sleep(0.05)
    held: dict[str, Any] = json.loads(path.read_text())
    return held


def _named_namespaces() -> dict[int, str]:
    found = {}
    for name in net.namespaces():
        with contextlib.suppress(OSError):
            found[os.stat(f"/run/netns/{name}").st_ino] = name
    return found


def leftovers(held: dict[str, Any]) -> list[str]:
    """What the child started that still runs or exists."""
    left = []
    processes = [("pytest", held["pytest"]), ("postgres", held["postgres"]),
                 *(("reaper", p) for p in held["reapers"]), *(("twin", p) for p in held["twins"]),
                 *(("lab process", p) for lab in held["labs"] for p in lab["processes"])]
    left += [f"{what} {p['pid']}" for what, p in processes if start_time(p["pid"]) == p["start"]]
    ours = {ino: name for lab in held["labs"] for name, ino in lab["namespaces"].items()}
    named = _named_namespaces()
    left += [f"namespace {name}" for name in ours.values() if name in named.values()]
    for ns in Path("/proc").glob("[0-9]*/ns/net"):  # a process can hold an unnamed one alive
        with contextlib.suppress(OSError):
            inode = ns.stat().st_ino
            if inode in ours and named.get(inode, ours[inode]) == ours[inode]:
                left.append(f"process {ns.parent.parent.name} in namespace {ours[inode]}")
    left += [f"cgroup {c}" for lab in held["labs"] for c in lab["cgroups"] if Path(c).exists()]
    left += [f"lab registry entry {lab['registry']}" for lab in held["labs"]
             if Path(lab["registry"]).exists()]
    return left


def test_a_run_stopped_by_a_signal_leaves_nothing_running(tmp_path: Path) -> None:
    needs_root("the labs need root")
    runs = {sig: (start(tmp_path / sig.name), tmp_path / sig.name) for sig in SIGNALS}
    held: dict[signal.Signals, dict[str, Any]] = {}
    try:
        deadline = time.monotonic() + UP_S
        for sig, (child, directory) in runs.items():
            held[sig] = wait_held(child, directory, deadline)
        for sig, (child, _) in runs.items():
            assert leftovers(held[sig]), "the child holds nothing: the test would prove nothing"
            os.kill(child.pid, sig)
        deadline = time.monotonic() + GONE_S
        for sig, (child, directory) in runs.items():
            code = child.wait(timeout=max(deadline - time.monotonic(), 1))
            if sig != signal.SIGKILL:  # a clean end: pytest's own for an interrupted run
                assert code == 2 and f"stopped by {sig.name}" in log_of(directory), log_of(
                    directory)
                # the held test swallowed its KeyboardInterrupt: the run stopped all the same
                assert not (directory / "held.reached").exists(), log_of(directory)
                assert not Path(held[sig]["postgres"]["root"]).exists()  # removed, not reaped
        for sig in SIGNALS:
            while (left := leftovers(held[sig])) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not left, f"{sig.name}: left running: {left}\n{log_of(runs[sig][1])}"
    finally:  # whatever the outcome, nothing of this test outlives it
        for child, _ in runs.values():
            if child.poll() is None:
                child.kill()
                child.wait()
        for record in held.values():
            for directory, lab in zip(record["lab_directories"], record["labs"], strict=True):
                lab_down(directory, prefix=lab["prefix"])
            for process in [record["postgres"], *record["twins"], *record["reapers"]]:
                if start_time(process["pid"]) == process["start"]:
                    os.kill(process["pid"], signal.SIGKILL)
            # a killed run's server directory is the next run's to remove (reap_orphans): ours
            shutil.rmtree(record["postgres"]["root"], ignore_errors=True)


def test_the_run_takes_its_signals_back_from_ray(ray_cluster: object) -> None:
    """ray.init (the shared Ray's fixture) sets SIGTERM's handler to ``sys.exit``, which would
    fail the test in hand and let the run go on; conftest takes the signals back before every
    test, so a CI timeout still stops the run with its fixtures torn down."""
    assert stops.owns_the_signals(), signal.getsignal(signal.SIGTERM)
