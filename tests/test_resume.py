"""`kill -9` in the middle of a campaign, then `bisect resume`: nothing repeated, nothing lost."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from db.store import Store
from orchestrator.stored import trial_seed
from tests.support import kill_points

pytestmark = pytest.mark.real

BISECT = str(Path(sys.executable).parent / "bisect")


def write_campaign(workdir: Path) -> Path:
    return kill_points.write_campaign(workdir, 24, rounds=3, latency_ms=40, name="resume",
                                      faults=kill_points.race_faults(0.4))


def trial_states(db: Path) -> list[tuple[int, str]]:
    try:
        with sqlite3.connect(db, timeout=5) as connection:
            return list(connection.execute("SELECT seq, status FROM trial ORDER BY id"))
    except sqlite3.OperationalError:
        return []  # not created yet


@pytest.mark.parametrize("kill_after", [1, 3])
def test_kill_minus_nine_then_resume(tmp_path: Path, kill_after: int) -> None:
    campaign = write_campaign(tmp_path)
    db = tmp_path / "bisect.db"
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
    run = subprocess.Popen([BISECT, "run", str(campaign), "--store", str(db), "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                           start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = trial_states(db)
        done = sum(status == "done" for _, status in states)
        if done >= kill_after and states and states[-1][1] == "running":
            break
        assert run.poll() is None, run.communicate()[1].decode()[-2000:]
        time.sleep(0.05)
    else:
        pytest.fail("the campaign never reached the kill point")
    os.kill(run.pid, signal.SIGKILL)  # the driver only, as the OOM killer would
    run.wait()
    killed_at = trial_states(db)
    assert killed_at[-1][1] == "running"

    with Store.open(str(db)) as store:
        [record] = store.list_campaigns()
    resume = subprocess.run([BISECT, "resume", record.id, "--store", str(db), "--json"],
                            capture_output=True, text=True, env=env, timeout=240, check=False)
    os.killpg(run.pid, signal.SIGKILL) if _group_alive(run.pid) else None
    assert resume.returncode == 0, resume.stderr[-3000:]
    verdict = json.loads(resume.stdout)
    assert verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [{"index_k": "bf16", "hicache": "on"}]

    states = trial_states(db)
    seqs = [seq for seq, _ in states]
    assert len(seqs) == len(set(seqs)), "a trial was written twice"
    done_before = [seq for seq, status in killed_at if status == "done"]
    assert all((seq, "done") in states for seq in done_before), "a finished trial was lost"
    assert (killed_at[-1][0], "discarded") in states, "the interrupted trial was not discarded"
    assert verdict["cost"]["trials"] == sum(status == "done" for _, status in states)
    assert verdict["seed"] == record.spec["workload"]["seed"]  # the run seed, kept
    with Store.open(str(db)) as store:  # every trial's, before the kill and after, drawn from it
        assert all(t.seed == trial_seed(verdict["seed"], t.seq)
                   for t in store.trials(record.id, status=None))
    assert not list((tmp_path / "services").glob("*.pid")), "a service was left running"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
