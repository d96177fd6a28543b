"""`bisect doctor ID`: a real SQLite store in the states a run can leave it, and real lock files
on a `transport: local` node, left by a live driver or by a dead one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from db.records import SessionRow, TrialTiming
from db.store import Store
from deploy.locks import acquire
from deploy.transports.local import LocalTransport
from experiments.campaign_load import parse_campaign
from experiments.yaml_lines import load_yaml
from orchestrator.cli import app
from tests.conftest import REPO

CAMPAIGN = """
name: doctor
nodes: [{{name: gpu-a, transport: local, workdir: {workdir}}}]
pools:
  - name: pool-1
    endpoint: http://127.0.0.1:9
    services: [{{name: sglang, node: gpu-a, start: sleep 1, health_url: http://127.0.0.1:9/health}}]
factors:
  - {{name: index_k, levels: {{fp8: {{}}, bf16: {{env: {{BF16_INDEX_K: "1"}}}}}}}}
workload: {{sessions: 2, rounds: 1}}
"""


def _sessions(n: int) -> list[SessionRow]:
    return [SessionRow(idx=i, key=f"s{i}", outcome="ok", turns=1, first_bad_turn=None,
                       evidence=None, latency_s=0.1) for i in range(n)]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "node"


@pytest.fixture
def store_path(tmp_path: Path, workdir: Path) -> Path:
    """A campaign with two done trials and one left running, holding its node's lock row."""
    path = tmp_path / "bisect.db"
    campaign = parse_campaign(load_yaml(CAMPAIGN.format(workdir=workdir), "c.yaml"))
    with Store.open(str(path)) as store:
        store.create_campaign("c1", "doctor", campaign.model_dump(mode="json"), "c.yaml")
        variant = store.variant("c1", {"index_k": "bf16"})
        for seq in (1, 2):
            trial = store.start_trial("c1", variant.id, seq, "pool-1", seq)
            store.finish_trial(trial, TrialTiming(wall_s=1.0), _sessions(2), [], [])
        store.start_trial("c1", variant.id, 3, "pool-1", 3)
        store.lock_taken("c1", "gpu-a")
    return path


def doctor(store: Path, *args: str) -> tuple[int, dict[str, object]]:
    done = CliRunner().invoke(app, ["doctor", "c1", "--store", str(store), "--json", *args])
    return done.exit_code, json.loads(done.stdout)


def kinds(report: dict[str, object]) -> list[str]:
    findings = report["findings"]
    assert isinstance(findings, list)
    return [f["kind"] for f in findings]


@pytest.mark.pure
def test_a_finished_campaign_is_healthy(store_path: Path) -> None:
    with Store.open(str(store_path)) as store:
        store.discard_unfinished("c1")
        store.lock_released("c1", "gpu-a")
        store.set_campaign_status("c1", "done", finished=True)
    code, report = doctor(store_path)
    assert (code, report["healthy"], report["trials"], kinds(report)) == (0, True, 2, [])
    plain = CliRunner().invoke(app, ["doctor", "c1", "--store", str(store_path)])
    assert plain.exit_code == 0 and "healthy: nothing to do" in plain.stdout


@pytest.mark.real
def test_a_dead_drivers_campaign_says_resume(store_path: Path, workdir: Path) -> None:
    # The lock file a driver leaves when it is killed: its record names a pid now gone.
    subprocess.run([sys.executable, "-c", "import sys; from deploy.locks import acquire; "
                    "from deploy.transports.local import LocalTransport; "
                    "acquire(LocalTransport('gpu-a'), 'gpu-a', sys.argv[1], 'c1')",
                    str(workdir)], cwd=REPO, check=True)
    code, report = doctor(store_path, "--nodes")
    assert code == 1 and not report["healthy"]
    assert kinds(report) == ["unfinished", "stale_lock"]
    findings = report["findings"]
    assert isinstance(findings, list)
    assert findings[0]["message"] == "trial 3 was left running by a driver that stopped"
    resume = f"bisect resume c1 --store {store_path}"
    assert resume in findings[0]["advice"] and resume in findings[1]["advice"]
    without_nodes = kinds(doctor(store_path)[1])
    assert without_nodes == ["unfinished", "driver_unknown"]


@pytest.mark.real
def test_a_live_driver_is_left_to_its_work(store_path: Path, workdir: Path) -> None:
    acquire(LocalTransport("gpu-a"), "gpu-a", str(workdir), "c1")  # this process: alive
    code, report = doctor(store_path, "--nodes")
    assert (code, kinds(report)) == (0, ["running"])


@pytest.mark.real
def test_orphan_rows_and_a_freed_node_the_store_still_holds(store_path: Path) -> None:
    engine = create_engine(f"sqlite:///{store_path}")
    with engine.begin() as db:
        db.execute(text("INSERT INTO session (trial_id, idx, key, outcome, turns, latency_s) "
                        "VALUES (999, 0, 'k', 'leak', 1, 0.1)"))
        db.execute(text("UPDATE campaign SET status = 'done'"))
        db.execute(text("UPDATE trial SET status = 'discarded' WHERE status = 'running'"))
    engine.dispose()
    code, report = doctor(store_path, "--nodes")
    assert code == 1 and kinds(report) == ["orphans", "stale_lock_row"]
    findings = report["findings"]
    assert isinstance(findings, list)
    assert findings[0]["message"].startswith("1 session rows belong to no trial")
    assert "bisect unlock" in findings[1]["advice"] and "--holder c1" in findings[1]["advice"]


@pytest.mark.pure
def test_a_damaged_store_file(store_path: Path) -> None:
    with Store.open(str(store_path)) as store:  # enough pages that one in the middle is data
        variant = store.variant("c1", {"index_k": "fp8"})
        for seq in range(4, 40):
            trial = store.start_trial("c1", variant.id, seq, "pool-1", seq)
            store.finish_trial(trial, TrialTiming(wall_s=1.0), _sessions(50), [], [])
    data = bytearray(store_path.read_bytes())
    page = 4096
    middle = (len(data) // page // 2) * page
    data[middle:middle + page] = b"\xff" * page
    store_path.write_bytes(bytes(data))
    done = CliRunner().invoke(app, ["doctor", "c1", "--store", str(store_path), "--json"])
    assert done.exit_code == 1, done.output
    report = json.loads(done.stdout)
    assert kinds(report) == ["damaged"]  # and no advice to resume into a damaged file
    findings = report["findings"]
    assert isinstance(findings, list)
    assert "malformed" in findings[0]["message"] and ".recover" in findings[0]["advice"]


@pytest.mark.pure
def test_unknown_campaign_is_bad_input(store_path: Path) -> None:
    done = CliRunner().invoke(app, ["doctor", "nope", "--store", str(store_path)])
    assert done.exit_code == 2 and "no campaign 'nope'" in done.stderr
