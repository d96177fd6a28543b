"""A fractional factorial campaign for real: a 2^(5-1) design of resolution V on twin servers over
HTTP, Ray pool actors, a SQLite store, the verdict through the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from db.store import Store
from experiments.campaign import Campaign
from orchestrator.cli import app
from orchestrator.core.verdict import Status
from orchestrator.demo import twin_pool
from orchestrator.executor.driver import run_campaign
from orchestrator.stored import create_campaign
from tests.support.twins import race_faults

pytestmark = pytest.mark.real

FAULTS = race_faults(seed=11)


def env_factor(name: str, variable: str, first: str, second: str) -> dict[str, Any]:
    return {"name": name, "levels": {first: {"env": {variable: 0}},
                                     second: {"env": {variable: 1}}}}


def fractional_campaign(workdir: Path) -> dict[str, Any]:
    fault_model = workdir / "faults.yaml"
    fault_model.write_text(yaml.safe_dump(FAULTS))
    pools = [twin_pool(f"p{index}", "here", fault_model, latency_ms=2) for index in range(2)]
    return {
        "name": "fraction of five factors",
        "nodes": [{"name": "here", "workdir": str(workdir / "services")}],
        "pools": pools,
        "factors": [
            env_factor("index_k", "BF16_INDEX_K", "fp8", "bf16"),
            {"name": "hicache", "levels": {"off": None,
                                           "on": {"flags": "--enable-hierarchical-cache"}}},
            env_factor("topk_v2", "SGLANG_TOPK_V2", "off", "on"),
            env_factor("overlap", "SGLANG_OVERLAP", "off", "on"),
            env_factor("radix", "SGLANG_RADIX", "on", "off"),
        ],
        "workload": {"sessions": 12, "rounds": 1, "timeout_s": 20, "seed": 3},
        "strategy": {"kind": "factorial", "design": "fractional", "repeats": 1},
        "cost": {"restart_s": 90, "workload_s": 485, "gpus": 16},
    }


@pytest.fixture(scope="module")
def finished(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[Path, str]]:
    workdir = tmp_path_factory.mktemp("fraction")
    campaign = Campaign.model_validate(fractional_campaign(workdir))
    db_path = workdir / "bisect.db"
    with Store.open(str(db_path)) as store:
        campaign_id = create_campaign(store, campaign, "test")
        run_campaign(store, campaign_id)
    yield db_path, campaign_id


def test_the_fraction_runs_half_the_variants_and_names_the_interaction(
        finished: tuple[Path, str]) -> None:
    db_path, campaign_id = finished
    result = CliRunner().invoke(app, ["verdict", campaign_id, "--store", str(db_path), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["status"] == Status.CULPRIT
    assert [c["factors"] for c in verdict["culprits"]] == [{"index_k": "bf16", "hicache": "on"}]
    assert "2^(5-1) fraction of resolution V" in verdict["reason"]
    assert verdict["cost"]["trials"] == 16 and len(verdict["variants"]) == 16
    design = verdict["design"]
    assert design["kind"] == "fractional" and design["resolution"] == 5
    assert design["variants"] == 16 and design["full_variants"] == 32
    assert design["aliases"]["hicache×index_k"] == ["overlap×radix×topk_v2"]
    assert {row["effect"] for row in design["effects"][:3]} == {
        "index_k", "hicache", "hicache×index_k"}


def test_the_trials_ran_exactly_the_fraction(
        finished: tuple[Path, str]) -> None:
    db_path, campaign_id = finished
    with Store.open(str(db_path)) as store:
        trials = store.trials(campaign_id)
    assert len({json.dumps(t.levels, sort_keys=True) for t in trials}) == 16
    # Each run's fifth factor is the product of the other four (E = ABCD, in 0/1 coding XOR).
    seconds = {"index_k": "bf16", "hicache": "on", "topk_v2": "on", "overlap": "on",
               "radix": "off"}
    for trial in trials:
        assert sum(trial.levels[f] == level for f, level in seconds.items()) % 2 == 0
