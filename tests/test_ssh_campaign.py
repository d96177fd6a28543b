"""A whole campaign over real SSH: twins run inside lab hosts, deployed and restarted remotely."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from db.store import Store
from deploy.lab import Lab
from experiments.twin.server import VERSION
from orchestrator.cli import app
from orchestrator.lab_campaign import lab_pool

pytestmark = pytest.mark.real

FAULTS = {"rules": [{
    "name": "race", "when": {"env": {"BF16_INDEX_K": "1"},
                             "flags": {"enable-hierarchical-cache": True}},
    "min_inflight": 1, "probability": 0.5, "effect": "leak",
}]}


@pytest.fixture
def campaign_file(lab: Lab, tmp_path: Path) -> Path:
    faults = tmp_path / "faults.yaml"
    faults.write_text(yaml.safe_dump(FAULTS))
    campaign = {
        "name": "over ssh",
        "nodes": [lab.node(1), lab.node(2)],
        "pools": [lab_pool(lab, 1, faults), lab_pool(lab, 2, faults)],  # twins over SSH
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": "0"}},
                                           "bf16": {"env": {"BF16_INDEX_K": "1"}}}},
            {"name": "hicache", "levels": {"off": {},
                                           "on": {"flags": "--enable-hierarchical-cache"}}},
            {"name": "value", "levels": {  # a hostile value must arrive verbatim, run nothing
                "plain": {"env": {"NOTE": "plain"}},
                "hostile": {"env": {"NOTE": f"'; touch {tmp_path}/PWNED; '$(id)`id`"}}}},
        ],
        "workload": {"sessions": 20, "rounds": 2, "timeout_s": 20},
        "known_good": {"index_k": "fp8", "hicache": "on", "value": "hostile"},
        "known_bad": {"index_k": "bf16", "hicache": "on", "value": "hostile"},
    }
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(campaign))
    return path


def test_a_campaign_over_ssh_finds_the_culprit_and_leaves_the_hosts_clean(
        lab: Lab, campaign_file: Path, tmp_path: Path, ray_cluster: None) -> None:
    db = tmp_path / "bisect.db"
    result = CliRunner().invoke(app, ["run", str(campaign_file), "--store", str(db), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [{"index_k": "bf16", "hicache": "on"}]
    assert not (tmp_path / "PWNED").exists()

    with Store.open(str(db)) as store:
        [campaign] = store.list_campaigns()
        trials = store.trials(campaign.id)
        assert {t.pool for t in trials} == {"pool-1", "pool-2"}
        startup = [e.text for t in trials for e in store.log_events(t.id) if e.kind == "startup"]
        assert startup, "the service log was read back over SSH"
        # each trial's node facts, read over SSH on the node of its pool (test_node_facts.py
        # reads a GPU, a tree and a bare node over SSH function by function)
        steps = store.campaign_steps(campaign.id)
        for trial in trials:
            [facts] = [s for s in steps[trial.id] if s.name == "facts"]
            assert facts.outcome == "ok" and facts.service == lab.host(
                int(trial.pool.split("-")[1])).name
            assert (facts.details["server_version"], facts.details["gpu"],
                    facts.details["commit"], facts.details["problems"]) == (VERSION, None, None, [])
            assert facts.details["host"]
    for which in (1, 2):  # nothing left running, no pid file left on the hosts
        workdir = Path(lab.host(which).workdir)
        assert not list(workdir.glob("*.pid"))

    # The decision trail and the trials, replayed from the store.
    runner = CliRunner()
    trail = json.loads(runner.invoke(app, ["log", campaign.id, "--store", str(db),
                                           "--json"]).stdout)
    assert trail[0]["phase"] == "reproduce" and trail[0]["answer"] == "fail"
    assert any(step["phase"] == "flip hicache" and step["answer"] == "pass" for step in trail)
    human = runner.invoke(app, ["log", campaign.id, "--store", str(db)])
    assert human.exit_code == 0 and "reproduce" in human.stdout
    shown = json.loads(runner.invoke(app, ["show", campaign.id, "--store", str(db),
                                           "--json"]).stdout)
    assert len(shown) == len(trials) and all(t["status"] == "done" for t in shown)

