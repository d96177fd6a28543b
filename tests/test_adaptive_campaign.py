"""First looks and the sufficiency test for real: twins over HTTP, Ray pool actors, a SQLite
file. Known-good and known-bad differ in all four of the demo's factors; one of them alone
makes the twins leak."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from db.store import Store
from experiments.campaign import Campaign
from orchestrator.cli import app
from orchestrator.demo import DEMO_FACTORS, twin_pool
from orchestrator.executor.driver import run_campaign
from orchestrator.stored import create_campaign

pytestmark = pytest.mark.real

SESSIONS = 20
FAULTS = {"seed": 11, "rules": [{
    "name": "topk-v2", "when": {"env": {"SGLANG_OPT_USE_TOPK_V2": "1"}},
    "min_inflight": 1, "probability": 0.4, "effect": "leak", "markup": "dsml",
}]}
GOOD = {"index_k": "fp8", "hicache": "off", "topk_v2": "off", "cuda_graph": "on"}
BAD = {"index_k": "bf16", "hicache": "on", "topk_v2": "on", "cuda_graph": "off"}


def test_innocent_flips_are_let_go_after_a_look_and_cleared_at_once(
        ray_cluster: None, tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text(yaml.safe_dump(FAULTS))
    campaign = Campaign.model_validate({
        "name": "looks",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool(f"p{index}", "here", faults, latency_ms=5) for index in range(2)],
        "factors": DEMO_FACTORS,
        "workload": {"sessions": SESSIONS, "rounds": 2, "timeout_s": 20, "seed": 3},
        "strategy": {"kind": "adaptive", "alpha": 0.01},
        "known_good": GOOD,
        "known_bad": BAD,
    })
    db = tmp_path / "bisect.db"
    with Store.open(str(db)) as store:
        campaign_id = create_campaign(store, campaign, "test")
        run_campaign(store, campaign_id)
        trials = store.trials(campaign_id)

    result = CliRunner().invoke(app, ["verdict", campaign_id, "--store", str(db), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert [c["factors"] for c in verdict["culprits"]] == [{"topk_v2": "on"}]

    log = verdict["log"]
    let_go = [step for step in log if step["answer"] == "looks failing"]
    assert sorted(step["phase"] for step in let_go) == [
        "flip cuda_graph", "flip hicache", "flip index_k"]
    [sufficient] = [step for step in log if step["phase"] == "sufficient?"]
    assert sufficient["answer"] == "fail"
    assert sufficient["levels"] == {**GOOD, "topk_v2": "on"}
    # Each flip let go ran once and stopped at its first leaking session; the stored trial
    # holds the sessions that had finished, no more.
    for step in let_go:
        [trial] = [t for t in trials if t.levels == step["levels"]]
        assert trial.stopped_early and 0 < trial.counts.get("leak", 0) < SESSIONS
        assert sum(trial.counts.values()) < SESSIONS
