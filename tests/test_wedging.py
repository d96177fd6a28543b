"""A campaign that bisects wedging (errors and timeouts) instead of corruption."""

from __future__ import annotations

from pathlib import Path

import yaml

from db.store import Store
from experiments.campaign import Campaign
from orchestrator.demo import twin_pool
from orchestrator.runner import create_campaign, run_campaign


def test_the_switch_that_makes_the_server_fail_requests_is_named(ray_cluster: None,
                                                                 tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text(yaml.safe_dump({"rules": [{
        "name": "eager-decode-5xx", "when": {"flags": {"disable-cuda-graph": True}},
        "min_inflight": 1, "probability": 0.5, "effect": "error"}]}))
    campaign = Campaign.model_validate({
        "name": "wedging",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", faults, latency_ms=2)],
        "factors": [
            {"name": "cuda_graph",
             "levels": {"on": {}, "off": {"flags": ["--disable-cuda-graph"]}}},
            {"name": "topk_v2",
             "levels": {"off": {}, "on": {"env": {"SGLANG_OPT_USE_TOPK_V2": "1"}}}},
        ],
        "workload": {"sessions": 20, "rounds": 2, "timeout_s": 20},
        "strategy": {"target": "wedging"},
        "known_good": {"cuda_graph": "on", "topk_v2": "on"},
        "known_bad": {"cuda_graph": "off", "topk_v2": "on"},
    })
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "test")
        verdict = run_campaign(store, campaign_id).to_json()
    assert verdict["target"] == "wedging" and verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [{"cuda_graph": "off"}]
    assert verdict["reason"].startswith("wedging follows")
