"""A variant that cannot be deployed is skipped with its reason, never judged."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from db.store import Store
from experiments.campaign import Campaign
from orchestrator.core.verdict import Status
from orchestrator.demo import twin_pool
from orchestrator.executor.driver import run_campaign
from orchestrator.executor.nodes import PreflightFailed
from orchestrator.stored import MAX_FAILED_ATTEMPTS, create_campaign

pytestmark = pytest.mark.real
# a server that exits at once: its start (the process manager) or its health wait sees it
WHY_EXITED = ("its server did not start: ", "its server did not become healthy: ")


def one_pool(tmp_path: Path, name: str, factors: list[dict[str, Any]]) -> dict[str, Any]:
    """A small factorial campaign on one twin pool with an empty fault model, as data."""
    faults = tmp_path / "faults.yaml"
    faults.write_text("rules: []\n")
    return {
        "name": name,
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", faults, latency_ms=1)],
        "factors": factors,
        "workload": {"sessions": 8, "rounds": 1, "timeout_s": 10},
        "strategy": {"kind": "factorial", "repeats": 1},
    }


def test_a_variant_whose_server_does_not_start_is_unresolvable(ray_cluster: None,
                                                                tmp_path: Path) -> None:
    campaign = Campaign.model_validate(one_pool(tmp_path, "unresolvable", [
        # Accepted by the build's --help, fatal at start: a fault model that is not there.
        {"name": "build", "levels": {"good": {}, "broken": {
            "flags": ["--fault-model", str(tmp_path / "missing.yaml")]}}},
        {"name": "hicache", "levels": {"off": {},
                                       "on": {"flags": ["--enable-hierarchical-cache"]}}},
    ]))
    assert sys.executable in campaign.pools[0].services[0].start
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "test")
        verdict = run_campaign(store, campaign_id)
        failed = store.trials(campaign_id, status="failed")
    document = verdict.to_json()
    broken = document["unresolvable"]
    assert {tuple(sorted(u["levels"].items())) for u in broken} == {
        (("build", "broken"), ("hicache", "off")), (("build", "broken"), ("hicache", "on"))}
    assert all(u["attempts"] == MAX_FAILED_ATTEMPTS for u in broken)
    assert all("missing.yaml" in u["error"] for u in broken)  # the server's own words
    assert all(u["why"].startswith(WHY_EXITED) for u in broken), [u["why"] for u in broken]
    assert len(failed) == 2 * MAX_FAILED_ATTEMPTS
    # Judged on the variants that did deploy: clean, but 16 sessions are too few to say so.
    assert verdict.status is Status.INCONCLUSIVE and "too few" in verdict.reason
    assert {tuple(sorted(v["levels"].items())) for v in document["variants"]} == {
        (("build", "good"), ("hicache", "off")), (("build", "good"), ("hicache", "on"))}


def test_a_variant_that_cannot_be_proven_loaded_is_not_stressed(ray_cluster: None,
                                                                 tmp_path: Path) -> None:
    campaign = Campaign.model_validate(one_pool(tmp_path, "not proven", [
        {"name": "hicache", "levels": {
            "off": {"absent_log_markers": ["host memory for hierarchical KV cache"]},
            # Claims a log line the server never prints: the proof must refuse it.
            "on": {"flags": ["--enable-hierarchical-cache"],
                   "log_markers": ["hicache_v9=1"]},
        }}]))
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "test")
        verdict = run_campaign(store, campaign_id)
        done = store.trials(campaign_id)
    [skipped] = verdict.to_json()["unresolvable"]
    assert skipped["levels"] == {"hicache": "on"}
    assert "not loaded" in skipped["error"] and "hicache_v9=1" in skipped["error"]
    assert skipped["why"] == f"it could not be proven loaded: {skipped['error'].splitlines()[0]}"
    assert [t.levels for t in done] == [{"hicache": "off"}]  # the proven one was stressed


def test_a_flag_the_build_rejects_stops_the_campaign_before_anything_changes(
        ray_cluster: None, tmp_path: Path) -> None:
    campaign = Campaign.model_validate(one_pool(tmp_path, "preflight", [
        {"name": "build", "levels": {"good": {}, "broken": {"flags": ["--no-such-flag"]}}}]))
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "test")
        with pytest.raises(PreflightFailed, match="level broken passes --no-such-flag"):
            run_campaign(store, campaign_id)
        assert store.trials(campaign_id, status=None) == []
    assert not list((tmp_path / "services").glob("*.pid"))
    assert not (tmp_path / "services" / ".bisect.lock").exists()  # the lock was released
    with Store.open(str(tmp_path / "bisect.db")) as store:
        assert store.held_locks(campaign_id) == []  # and its store row says so


def test_a_node_held_by_another_campaign_is_refused_until_unlocked(ray_cluster: None,
                                                                    tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from deploy import locks
    from deploy.transports.local import LocalTransport
    from orchestrator.cli import app
    from orchestrator.executor.driver import RunFailed

    workdir = tmp_path / "services"
    spec = one_pool(tmp_path, "locked", [{"name": "f", "levels": {"a": {}, "b": {}}}])
    locks.acquire(LocalTransport("here"), "here", str(workdir), "other-campaign")
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, Campaign.model_validate(spec), "test")
        with pytest.raises(RunFailed, match="locked by campaign other-campaign"):
            run_campaign(store, campaign_id)
        assert store.trials(campaign_id, status=None) == []
        assert store.held_locks() == []  # it never held the node
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(app, ["unlock", str(path), "here", "--holder", "other-campaign"])
    assert result.exit_code == 0, result.output
    assert locks.read(LocalTransport("here"), "here", str(workdir)) is None
