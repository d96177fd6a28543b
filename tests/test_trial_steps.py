"""A trial is a chain of named steps, each stored with its duration, outcome and observations:
`bisect show ID --steps` and `--json` show them, the proof of load's checks included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from db.store import Store
from experiments.campaign import Campaign
from orchestrator.cli import app
from orchestrator.demo import DEMO_FACTORS, twin_pool
from orchestrator.executor.driver import run_campaign
from orchestrator.stored import MAX_FAILED_ATTEMPTS, create_campaign, evidence

pytestmark = pytest.mark.real

SERVICE = "sglang-p"
CHAIN = ["apply", "restart", "health", "prove", "hooks", "facts", "stress", "collect"]
READY = "The server is fired up and ready to roll!"


def campaign(tmp_path: Path) -> Campaign:
    """The demo's index_k factor (an env value and a log marker each) and a hicache level
    whose log marker the twin never prints: its trials fail at the proof."""
    faults = tmp_path / "faults.yaml"
    faults.write_text("rules: []\n")
    index_k = next(f for f in DEMO_FACTORS if f["name"] == "index_k")
    hicache: dict[str, Any] = {"name": "hicache", "levels": {
        "off": {"absent_log_markers": ["host memory for hierarchical KV cache"]},
        "v9": {"flags": ["--enable-hierarchical-cache"], "log_markers": ["hicache_v9=1"]}}}
    return Campaign.model_validate({
        "name": "steps",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", faults, latency_ms=1)],
        "factors": [index_k, hicache],
        "workload": {"sessions": 6, "rounds": 1, "timeout_s": 10},
        "strategy": {"kind": "factorial", "repeats": 1},
    })


def test_every_step_of_every_trial_is_stored_and_shown(ray_cluster: None,
                                                       tmp_path: Path) -> None:
    store_path = str(tmp_path / "bisect.db")
    with Store.open(store_path) as store:
        campaign_id = create_campaign(store, campaign(tmp_path), "test")
        run_campaign(store, campaign_id)
        trials = store.trials(campaign_id, status=None)
    measured = [t.performance for t in evidence(trials)]  # as the core sees them
    assert len(measured) == 2 and all(p is not None and p.e2e is not None and
                                      p.e2e.p50_ms <= p.e2e.p99_ms and p.goodput > 0
                                      for p in measured)
    runner = CliRunner()
    shown = runner.invoke(app, ["show", campaign_id, "--store", store_path, "--json"])
    assert shown.exit_code == 0, shown.output
    rows = json.loads(shown.stdout)
    assert len(rows) == len(trials) == 2 + 2 * MAX_FAILED_ATTEMPTS

    done = [row for row in rows if row["status"] == "done"]
    assert {row["levels"]["index_k"] for row in done} == {"fp8", "bf16"}
    for row in done:
        steps = row["steps"]
        assert [s["name"] for s in steps] == CHAIN and row["failure"] is None
        ran = [s for s in steps if s["outcome"] == "ok"]
        assert all(s["duration_s"] > 0 for s in ran)
        restarted = [s for s in steps if s["service"] == SERVICE and s["outcome"] == "ok"]
        skipped = [s for s in steps if s["outcome"] == "skipped"]
        # The first trial starts the server; a later one restarts it for its new env.
        assert [s["name"] for s in restarted] == ["restart", "health", "prove"] and not skipped
        checks = steps[3]["details"]["checks"]
        level = "1" if row["levels"]["index_k"] == "bf16" else "0"
        assert checks["argv"][1:4] == ["-m", "experiments.twin", "--port"]
        assert checks["env"] == {"BF16_INDEX_K": level}
        # btime is whole seconds: a start computed up to 1 s early is still after the deploy
        assert checks["started_at"] > checks["deployed_at"] - 1.0
        assert checks["started_at"] >= steps[1]["details"]["deployed_at"] - 1.0
        dtype = row["levels"]["index_k"]
        assert checks["markers"] == {READY: True, next(
            m for m in checks["markers"] if f"dtype={dtype}" in m): True}
        assert checks["absent_markers"] == {"host memory for hierarchical KV cache": True}
        assert steps[6]["details"]["sessions"] == 6
        # what the workload measured: 6 one-round sessions, all ok (no faults), streamed (the
        # workload's default, as bench_serving's)
        figures = row["performance"]
        assert (figures["requests"], figures["completed"], figures["good_sessions"]) == (6, 6, 6)
        assert figures["request_throughput"] > 0 and figures["goodput"] > 0
        assert figures["output_tokens"] > 0 and figures["output_throughput"] > 0
        assert 0 < figures["wall_s"] <= steps[6]["duration_s"]
        for name in ("ttft", "e2e"):
            latency = figures[name]
            assert 0 < latency["p50_ms"] <= latency["p90_ms"] <= latency["p99_ms"]
            assert latency["p99_ms"] <= figures["wall_s"] * 1000
        for name in ("itl", "tpot"):  # a stream's figures
            assert 0 < figures[name]["p50_ms"] <= figures[name]["p99_ms"]
        assert figures["ttft"]["p50_ms"] < figures["e2e"]["p50_ms"]

    failed = [row for row in rows if row["status"] == "failed"]
    assert all(row["levels"]["hicache"] == "v9" and row["failure"] == "variant"
               and row["skipped"] for row in failed)
    for row in failed:
        steps = row["steps"]
        assert [s["name"] for s in steps] == CHAIN
        assert [s["outcome"] for s in steps[3:]] == ["failed"] + ["skipped"] * 4
        assert row["performance"] is None  # never stressed
        proof = steps[3]["details"]
        assert proof["failure"] == "variant" and "hicache_v9=1" in proof["error"]
        assert proof["checks"]["markers"]["hicache_v9=1"] is False
        assert any("hicache_v9=1" in problem for problem in proof["problems"])

    text = runner.invoke(app, ["show", campaign_id, "--store", store_path, "--steps"],
                         env={"COLUMNS": "200"}).stdout
    assert text.count(f"prove {SERVICE}") == len(rows)
    assert "env BF16_INDEX_K=1" in text and "env BF16_INDEX_K=0" in text
    assert "argv " in text and "started after the deploy (node clock" in text
    assert f"log marker {READY!r} present" in text
    assert "log marker 'hicache_v9=1' MISSING" in text
    assert text.count("variant failure: ") == 2 * MAX_FAILED_ATTEMPTS
    plain = runner.invoke(app, ["show", campaign_id, "--store", store_path],
                          env={"COLUMNS": "200"}).stdout
    assert "prove " not in plain  # the steps only when asked
