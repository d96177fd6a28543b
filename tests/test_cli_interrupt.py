"""Ctrl-C through the real console script: `bisect run` on twins is interrupted while a trial
runs, stops the campaign cleanly (no twin left), prints the exact resume command, exits 130; and
that command, run as printed, finishes the campaign. SIGTERM (`kill`, `systemctl stop`, a CI
timeout) stops it the same way, though Ray, started by the run, sets a SIGTERM handler of its
own."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.demo import twin_pool
from tests.support.kill_points import CHAT
from tests.support.twins import race_faults

pytestmark = pytest.mark.real

BISECT = str(Path(sys.executable).parent / "bisect")


def _campaign(workdir: Path) -> Path:
    fault_model = workdir / "faults.yaml"
    fault_model.write_text(yaml.safe_dump(race_faults(seed=4)))
    path = workdir / "campaign.yaml"
    path.write_text(yaml.safe_dump({
        "name": "interrupted",
        "nodes": [{"name": "here", "workdir": str(workdir / "services")}],
        "pools": [twin_pool("p0", "here", fault_model, latency_ms=40)],
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": 0}},
                                           "bf16": {"env": {"BF16_INDEX_K": 1}}}},
            {"name": "hicache", "levels": {"off": None,
                                           "on": {"flags": "--enable-hierarchical-cache"}}},
        ],
        "workload": {"sessions": 20, "rounds": 4, "timeout_s": 20, "seed": 5},
        "strategy": {"repeats": 1},
        "cost": {"restart_s": 90, "workload_s": 485, "gpus": 16},
    }))
    return path


def _twins(marker: Path) -> list[int]:
    """Processes whose command line names ``marker`` (the twins take the fault model's path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone already
        if b"experiments.twin" in argv and any(str(marker).encode() in arg for arg in argv):
            found.append(int(entry.name))
    return found


def _loaded(workdir: Path) -> bool:
    """The twin's log shows a request of the trial's load."""
    return any(CHAT in log.read_text(errors="replace")
               for log in (workdir / "services").glob("*.log"))


def _under_way(tmp_path: Path, environment: dict[str, str]
               ) -> tuple[subprocess.Popen[str], list[str]]:
    """`bisect run` started and its first trial's load reaching the twin; what it said so far."""
    campaign = _campaign(tmp_path)
    # A session of its own, as a shell gives a foreground job: Ctrl-C is SIGINT to the group.
    run = subprocess.Popen([BISECT, "run", str(campaign), "--store", "bisect.db"],
                           cwd=tmp_path, env=environment, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert run.stderr is not None
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the first trial is under way
        line = run.stderr.readline()
        seen.append(line)
        if line.startswith("trial 1 on p0") or not line:
            break
    assert seen[-1].startswith("trial 1 on p0"), "".join(seen)
    # Waited for by its load, then looked for (at load 14 a run once saw the twin, then none
    # at the next look, and failed).
    while not _loaded(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _loaded(tmp_path), "the trial's load never started"
    assert _twins(tmp_path), "the twin serving the trial's load is not running"
    return run, seen


def test_ctrl_c_stops_the_run_and_prints_the_resume_command_that_finishes_it(
        tmp_path: Path, environment: dict[str, str], on_shared_ray: dict[str, str]) -> None:
    run, seen = _under_way(tmp_path, environment)
    os.killpg(run.pid, signal.SIGINT)
    _, rest = run.communicate(timeout=120)
    stderr = "".join(seen) + rest
    assert run.returncode == 130, stderr[-3000:]
    [store_line] = [line for line in seen if line.startswith("store: ")]
    assert store_line == "store: bisect.db\n"  # where the first run keeps the campaign
    [command] = [shlex.split(line) for line in stderr.splitlines() if " resume " in line]
    campaign_id = seen[0].split()[1].rstrip(":")
    # The program as it was started: by name where PATH finds it, else by its path.
    assert command[0] in ("bisect", BISECT)
    assert command[1:] == ["resume", campaign_id, "--store", "bisect.db"], stderr[-3000:]
    assert "Traceback" not in stderr
    assert f"interrupted: campaign {campaign_id} stopped" in stderr
    assert not _twins(tmp_path), "a twin outlived the interrupted run"

    # as printed; on the test run's Ray (the run stopped above started and ended its own)
    resumed = subprocess.run(command, cwd=tmp_path, env={**environment, **on_shared_ray},
                             capture_output=True, text=True, timeout=300, check=False)
    # One trial a variant: finished, its verdict most likely inconclusive (exit 3).
    assert resumed.returncode in (0, 3), resumed.stderr[-3000:]
    assert resumed.stdout.startswith("verdict ")
    listed = CliRunner().invoke(app, ["ls", "--store", str(tmp_path / "bisect.db"), "--json"])
    assert listed.exit_code == 0, listed.output
    assert '"status": "done"' in listed.stdout and '"trials": 4' in listed.stdout
    assert not _twins(tmp_path)


def test_sigterm_stops_the_run_as_ctrl_c_does(tmp_path: Path,
                                              environment: dict[str, str]) -> None:
    run, seen = _under_way(tmp_path, environment)
    run.send_signal(signal.SIGTERM)  # to the driver alone, as `kill PID` sends it
    _, rest = run.communicate(timeout=120)
    stderr = "".join(seen) + rest
    campaign_id = seen[0].split()[1].rstrip(":")
    assert run.returncode == 130, stderr[-3000:]
    assert f"interrupted: campaign {campaign_id} stopped" in stderr, stderr[-3000:]
    assert "Traceback" not in stderr
    assert not _twins(tmp_path), "a twin outlived the stopped run"
    listed = CliRunner().invoke(app, ["ls", "--store", str(tmp_path / "bisect.db"), "--json"])
    assert listed.exit_code == 0, listed.output
    assert '"status": "interrupted"' in listed.stdout, listed.stdout
