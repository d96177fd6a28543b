"""Service faults: a server that crashes mid-stress, never becomes healthy, exits at start,
wedges, or answers garbage. Each ends in a recorded, explained state, and nothing a broken
server said is evidence of corruption. And idempotence (Ansible molecule's): deploying the same
variant twice changes nothing the second time; restoring twice is a no-op.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from db.store import Store
from experiments.campaign import Campaign
from orchestrator.cli import app
from orchestrator.executor.driver import run_campaign
from orchestrator.stored import create_campaign
from tests.conftest import free_port
from tests.support import garbage_server
from tests.support.fault_campaigns import (
    TrialBench,
    campaign,
    corrupt,
    outcomes,
    snapshot,
    twin_service,
)
from tests.support.fault_proxy import FaultProxy, Toxic

pytestmark = pytest.mark.real

P1 = {"page": "p1"}


def test_a_server_killed_mid_stress_gives_errors_and_is_restarted_next(tmp_path: Path) -> None:
    port = free_port()
    with FaultProxy(("127.0.0.1", port)) as endpoint:
        spec = campaign(tmp_path, [{"name": "p", "endpoint": endpoint.url(),
                                    "services": [twin_service(port)]}])
        bench = TrialBench(spec, "p")
        try:
            assert bench.deploy(P1) == 1
            pid = int((tmp_path / "services" / "sglang.pid").read_text().split()[0])
            # Requests are slowed on the way back, so the kill lands while they are in flight.
            endpoint.add(Toxic("latency", latency_ms=300))

            def kill_once_the_load_is_on() -> None:
                if endpoint.wait_accepted(2):  # /v1/models, then the first chat request
                    os.killpg(pid, signal.SIGKILL)

            killer = threading.Thread(target=kill_once_the_load_is_on)
            killer.start()
            report = bench.run(P1)
            killer.join()
            endpoint.clear()
            assert report.error is None and len(report.sessions) == 6
            assert "error" in outcomes(report) and corrupt(report) == 0
            assert set(outcomes(report)) <= {"ok", "error"}
            healed = bench.run(P1)  # the same variant: the dead server is started again
            assert healed.timing.restarts == 1 and outcomes(healed) == ["ok"] * 6
        finally:
            bench.shutdown()


SICK_WAIT_S = 10


@pytest.fixture(scope="module")
def sick_campaign(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[Path, str]]:
    """One pool; a level that never becomes healthy, one whose server exits at start, one that
    wedges every request, and a healthy one."""
    workdir = tmp_path_factory.mktemp("sick")
    faults = workdir / "faults.yaml"
    faults.write_text(yaml.safe_dump({"rules": [{
        "name": "wedge", "when": {"flags": {"disable-cuda-graph": True}},
        "probability": 1.0, "effect": "wedge"}]}))
    port = free_port()
    # long enough for a twin that exits at start to have exited on a loaded machine (the
    # never-healthy level waits all of it, twice)
    service = twin_service(port, fault_model=faults, startup_timeout_s=SICK_WAIT_S)
    spec = campaign(workdir, [{"name": "p", "endpoint": f"http://127.0.0.1:{port}",
                               "services": [service]}],
                    factors=[{"name": "server", "levels": {
                        "fine": {},
                        "never_healthy": {"flags": ["--twin-startup-delay", "600"]},
                        "exits": {"flags": ["--tp-size", "not-a-number"]},
                        "wedged": {"flags": ["--disable-cuda-graph"]},
                    }}], workload={"timeout_s": 1.5, "rounds": 1})
    db = workdir / "bisect.db"
    with Store.open(str(db)) as store:
        campaign_id = create_campaign(store, Campaign.model_validate(spec), "test")
        run_campaign(store, campaign_id)
    yield db, campaign_id


def _shown(db: Path, campaign_id: str) -> list[dict[str, object]]:
    result = CliRunner().invoke(app, ["show", campaign_id, "--store", str(db), "--json"])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, object]] = json.loads(result.stdout)
    return rows


def test_a_server_that_never_becomes_healthy_or_exits_is_unresolvable_with_its_reason(
        sick_campaign: tuple[Path, str]) -> None:
    db, campaign_id = sick_campaign
    rows = _shown(db, campaign_id)
    by_level: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        levels = row["levels"]
        assert isinstance(levels, dict)
        by_level.setdefault(levels["server"], []).append(row)
    for level, reason in (("never_healthy", f"not healthy after {SICK_WAIT_S}s"),
                          ("exits", "exited while starting")):
        trials = by_level[level]
        assert [t["status"] for t in trials] == ["failed", "failed"]  # 2 attempts, then skipped
        assert all(reason in str(t["error"]) for t in trials)
        assert all(not t["counts"] for t in trials)  # no session of a broken deploy is kept
    verdict = CliRunner().invoke(app, ["verdict", campaign_id, "--store", str(db), "--json"])
    skipped = {u["levels"]["server"]: u for u in json.loads(verdict.stdout)["unresolvable"]}
    assert set(skipped) == {"never_healthy", "exits"}
    assert "exited while starting" in skipped["exits"]["error"]


def test_a_wedged_server_gives_timeouts_never_corruption(
        sick_campaign: tuple[Path, str]) -> None:
    db, campaign_id = sick_campaign
    with Store.open(str(db)) as store:
        trials = store.trials(campaign_id)
    wedged = [t for t in trials if t.levels["server"] == "wedged"]
    fine = [t for t in trials if t.levels["server"] == "fine"]
    assert wedged and all(t.counts == {"timeout": 6} for t in wedged)
    assert fine and all(t.counts == {"ok": 6} for t in fine)
    assert all(t.events.get("wedge", 0) >= 1 for t in wedged)  # the log says why


@pytest.fixture(scope="module")
def garbage_benches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        dict[bool, TrialBench]]:
    """Per workload mode (JSON replies, SSE streams), a pool of one garbage server."""
    benches: dict[bool, TrialBench] = {}
    for stream in (False, True):
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        service = {"name": "garbage", "node": "here",
                   "start": [sys.executable, garbage_server.__file__, "--port", str(port)],
                   "health_url": f"{base}/health", "metrics_url": f"{base}/metrics",
                   "startup_timeout_s": 20}
        spec = campaign(tmp_path_factory.mktemp("garbage"),
                        [{"name": "p", "endpoint": base, "services": [service]}],
                        factors=[{"name": "reply", "levels": {
                            kind: {"env": {garbage_server.ENV: kind}}
                            for kind in garbage_server.REPLIES}}],
                        workload={"rounds": 1, "sessions": 3, "stream": stream})
        benches[stream] = TrialBench(spec, "p")
    try:
        yield benches
    finally:
        for bench in benches.values():
            bench.shutdown()


@pytest.mark.parametrize("kind", list(garbage_server.REPLIES))
def test_a_server_answering_garbage_gives_errors_never_corruption(
        garbage_benches: dict[bool, TrialBench], kind: str) -> None:
    report = garbage_benches[kind.startswith("sse")].run({"reply": kind})
    assert report.error is None and report.timing.restarts == 1
    assert outcomes(report) == ["error"] * 3, [s.evidence for s in report.sessions]
    assert report.metrics == []  # garbage metrics are a gap, not a failed trial


def test_deploying_the_same_variant_twice_changes_nothing_the_second_time(
        tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "config.py").write_text("FLAG = 0\n")
    diff = ("--- a/config.py\n+++ b/config.py\n@@ -1 +1 @@\n-FLAG = 0\n+FLAG = 1\n")
    port = free_port()
    service = twin_service(port)
    spec = campaign(tmp_path, [{"name": "p", "endpoint": f"http://127.0.0.1:{port}",
                                "services": [service]}],
                    factors=[{"name": "fix", "levels": {
                        "off": {}, "on": {"patch": [{"root": str(tree), "diff": diff}],
                                          "env": {"FIX": "1"}}}}])
    bench = TrialBench(spec, "p")
    services = tmp_path / "services"
    try:
        assert bench.deploy({"fix": "on"}) == 1
        pid = (services / "sglang.pid").read_text()
        before = snapshot(tmp_path)
        assert (tree / "config.py").read_text() == "FLAG = 1\n"
        assert bench.deploy({"fix": "on"}) == 0  # the second converge: no restart ...
        assert (services / "sglang.pid").read_text() == pid
        assert snapshot(tmp_path) == before  # ... and not one file changed
    finally:
        bench.shutdown()
    restored = snapshot(tmp_path)
    assert (tree / "config.py").read_text() == "FLAG = 0\n"
    assert not (services / "sglang.pid").exists()
    bench.shutdown()  # restoring twice: a no-op
    assert snapshot(tmp_path) == restored
