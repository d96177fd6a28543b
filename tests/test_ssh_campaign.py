"""A whole campaign over real SSH: twins run inside lab hosts, deployed and restarted remotely."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from db.store import Store
from deploy.lab import Lab
from orchestrator.cli import app

FAULTS = {"rules": [{
    "name": "race", "when": {"env": {"BF16_INDEX_K": "1"},
                             "flags": {"enable-hierarchical-cache": True}},
    "min_inflight": 1, "probability": 0.5, "effect": "leak",
}]}


def lab_pool(lab: Lab, which: int, fault_model: Path) -> dict[str, Any]:
    host = lab.host(which)
    base = f"http://{host.address}:30000"
    return {
        "name": f"pool-{which}",
        "endpoint": base,
        "services": [{
            "name": "sglang",
            "node": host.name,
            # An absolute interpreter: an SSH session has sshd's PATH and starts in $HOME.
            "start": [sys.executable, "-m", "experiments.twin", "--host", host.address,
                      "--port", "30000", "--fault-model", str(fault_model),
                      "--twin-startup-delay", "0.2", "--twin-latency-ms", "5"],
            "health_url": f"{base}/health",
            "metrics_url": f"{base}/metrics",
            "startup_timeout_s": 60,
        }],
    }


@pytest.fixture
def campaign_file(lab: Lab, tmp_path: Path) -> Path:
    faults = tmp_path / "faults.yaml"
    faults.write_text(yaml.safe_dump(FAULTS))
    campaign = {
        "name": "over ssh",
        "nodes": [lab.node(1), lab.node(2)],
        "pools": [lab_pool(lab, 1, faults), lab_pool(lab, 2, faults)],
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
    for which in (1, 2):  # nothing left running, no pid file left on the hosts
        workdir = Path(lab.host(which).workdir)
        assert not list(workdir.glob("*.pid"))
