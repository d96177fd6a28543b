"""Real campaigns for the report tests: run once per test session on twins (Ray pool actors,
twin processes over HTTP, one SQLite file), as a user's campaign runs.

- ``culprit``: bf16 index keys with HiCache leak DSML in half the sessions (the seed
  investigation's race), and fp8 index keys with HiCache wedge a third of the sessions (the
  server logs ``WaitingForInput`` and then aborts the request): a corruption culprit, a wedging
  culprit, metric samples, wedge log events. Its servers want an API key, declared in the file
  as a secret (``{secret: REPORT_SECRET_ENV}``): its value must never reach a report.
- ``clean``: the same factors and levels on one pool, with the race fixed (no fault): known-bad
  is not reproduced, no culprit. The two are comparable (``bisect report A --compare B``).

Use: ``from tests.support.report_campaigns import report_campaigns_fixture  # noqa: F401`` in a test
module, then a test takes ``report_campaigns: ReportCampaigns``. Each module that imports it
gets its own copy of the fixture (pytest keys them by module): the campaigns are run once per
test session all the same (``_RUN``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from db.store import Store
from experiments.campaign import Campaign
from orchestrator.demo import twin_pool
from orchestrator.executor.driver import run_campaign
from orchestrator.stored import create_campaign
from tests.support.twins import race_faults

REPORT_SECRET_ENV = "BISECT_REPORT_TEST_KEY"
REPORT_SECRET = "sk-report-fixture-7f3a9c"  # what the twins want as their --api-key
CULPRIT = {"index_k": "bf16", "hicache": "on"}
WEDGE_CULPRIT = {"index_k": "fp8", "hicache": "on"}
FACTORS = {"index_k": ["fp8", "bf16"], "hicache": ["off", "on"]}


def wedge_faults(seed: int) -> dict[str, Any]:
    """The race, and a wedge of fp8 index keys with HiCache (a third of the sessions hang)."""
    faults = race_faults(seed)
    faults["rules"].append({
        "name": "stuck-transfer",
        "when": {"env": {"BF16_INDEX_K": "0"}, "flags": {"enable-hierarchical-cache": True}},
        "probability": 0.34,
        "effect": "wedge",
    })
    return faults


def report_campaign(workdir: Path, name: str, faults: dict[str, Any],
                    pools: int = 2) -> dict[str, Any]:
    """A 2x2 campaign on twin pools, bisected adaptively from known-bad, as campaign-file
    data."""
    workdir.mkdir(parents=True, exist_ok=True)
    fault_model = workdir / "faults.yaml"
    fault_model.write_text(yaml.safe_dump(faults))
    made = []
    for index in range(pools):
        pool = twin_pool(f"p{index}", "here", fault_model, latency_ms=5)
        service = pool["services"][0]
        # wedged requests give up after 1 s; the key is a secret reference, never its value
        service["start"] = [*service["start"], "--twin-wedge-s", "1",
                            "--api-key", {"secret": REPORT_SECRET_ENV}]
        pool["api_key_env"] = REPORT_SECRET_ENV
        made.append(pool)
    return {
        "name": name,
        "nodes": [{"name": "here", "workdir": str(workdir / "services")}],
        "pools": made,
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": 0}},
                                           "bf16": {"env": {"BF16_INDEX_K": 1}}}},
            {"name": "hicache", "levels": {"off": None,
                                           "on": {"flags": "--enable-hierarchical-cache"}}},
        ],
        "workload": {"sessions": 20, "rounds": 2, "timeout_s": 20, "seed": 5},
        "strategy": {"kind": "adaptive", "alpha": 0.01},
        "known_good": {"index_k": "fp8", "hicache": "off"},
        "known_bad": dict(CULPRIT),
        "cost": {"restart_s": 90, "workload_s": 485, "gpus": 16},
    }


@dataclass(frozen=True)
class ReportCampaigns:
    db_path: Path  # one SQLite store holding both
    culprit: str  # campaign ids
    clean: str
    workdir: Path

    @property
    def store_arg(self) -> str:
        return str(self.db_path)


_RUN: list[ReportCampaigns] = []  # the campaigns, once run


@pytest.fixture(scope="session", name="report_campaigns")
def report_campaigns_fixture(ray_cluster: None,
                             tmp_path_factory: pytest.TempPathFactory) -> ReportCampaigns:
    if not _RUN:
        _RUN.append(_run(tmp_path_factory.mktemp("reports")))
    return _RUN[0]


def _run(workdir: Path) -> ReportCampaigns:
    db_path = workdir / "bisect.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(REPORT_SECRET_ENV, REPORT_SECRET)
        ids: list[str] = []
        with Store.open(str(db_path)) as store:
            # (one pool for the second: each pool's actor imports SGLang's detectors, seconds)
            for name, faults, pools in (("race under load", wedge_faults(seed=3), 2),
                                        ("race fixed", {"seed": 3, "rules": []}, 1)):
                spec = report_campaign(workdir / f"c{len(ids)}", name, faults, pools)
                campaign_id = create_campaign(store, Campaign.model_validate(spec), "test")
                run_campaign(store, campaign_id)
                ids.append(campaign_id)
    return ReportCampaigns(db_path, ids[0], ids[1], workdir)
