"""A variant that cannot be deployed is skipped with its reason, never judged."""

from __future__ import annotations

import sys
from pathlib import Path

from db.store import Store
from experiments.campaign import Campaign
from orchestrator.demo import twin_pool
from orchestrator.runner import MAX_FAILED_ATTEMPTS, create_campaign, run_campaign
from orchestrator.verdict import Status


def test_a_variant_whose_server_does_not_start_is_unresolvable(ray_cluster: None,
                                                                tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text("rules: []\n")
    campaign = Campaign.model_validate({
        "name": "unresolvable",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", faults, latency_ms=1)],
        "factors": [
            {"name": "build", "levels": {"good": {}, "broken": {"flags": ["--no-such-flag"]}}},
            {"name": "hicache", "levels": {"off": {},
                                           "on": {"flags": ["--enable-hierarchical-cache"]}}},
        ],
        "workload": {"sessions": 8, "rounds": 1, "timeout_s": 10},
        "strategy": {"kind": "factorial", "repeats": 1},
    })
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
    assert all("--no-such-flag" in u["error"] for u in broken)  # the server's own words
    assert len(failed) == 2 * MAX_FAILED_ATTEMPTS
    # Judged on the variants that did deploy: clean, but 16 sessions are too few to say so.
    assert verdict.status is Status.INCONCLUSIVE and "too few" in verdict.reason
    assert {tuple(sorted(v["levels"].items())) for v in document["variants"]} == {
        (("build", "good"), ("hicache", "off")), (("build", "good"), ("hicache", "on"))}


def test_a_variant_that_cannot_be_proven_loaded_is_not_stressed(ray_cluster: None,
                                                                 tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text("rules: []\n")
    campaign = Campaign.model_validate({
        "name": "not proven",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", faults, latency_ms=1)],
        "factors": [{"name": "hicache", "levels": {
            "off": {"absent_log_markers": ["host memory for hierarchical KV cache"]},
            # Claims a log line the server never prints: the proof must refuse it.
            "on": {"flags": ["--enable-hierarchical-cache"],
                   "log_markers": ["hicache_v9=1"]},
        }}],
        "workload": {"sessions": 8, "rounds": 1, "timeout_s": 10},
        "strategy": {"kind": "factorial", "repeats": 1},
    })
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "test")
        verdict = run_campaign(store, campaign_id)
        done = store.trials(campaign_id)
    [skipped] = verdict.to_json()["unresolvable"]
    assert skipped["levels"] == {"hicache": "on"}
    assert "not loaded" in skipped["error"] and "hicache_v9=1" in skipped["error"]
    assert [t.levels for t in done] == [{"hicache": "off"}]  # the proven one was stressed
