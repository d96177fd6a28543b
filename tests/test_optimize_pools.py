"""`bisect optimize` on two twin pools, one planted slower (its decode costs 3 times as long on the
twin's clock): the answer is compared with production pair by pair, each pair on one pool,
so the slower pool does not make an answer "better than production" that is no faster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from db.store import Store
from orchestrator.cli import app
from orchestrator.demo import twin_pool
from tests.sweep_support import builtin_triage  # noqa: F401 - autouse: the built-in parser

pytestmark = pytest.mark.real

# per token, on the twin's clock: the planted offset. The slow pool first: the search's first
# trial (production) lands there, the other configuration on the fast pool, and leads
DECODE_MS = {"slow": "6", "fast": "2"}


def campaign(tmp_path: Path) -> dict[str, Any]:
    faults = tmp_path / "faults.yaml"
    faults.write_text(yaml.safe_dump({"rules": []}))
    pools = []
    for name, ms in DECODE_MS.items():
        pool = twin_pool(name, "here", faults, latency_ms=2)
        pool["services"][0]["start"] += ["--twin-startup-delay", "0",
                                         "--twin-decode-ms-per-token", ms]
        pools.append(pool)
    return {
        "name": "two pools",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": pools,
        # a knob of no effect on speed: the two configurations are as fast as each other
        "factors": [{"name": "label", "levels": {"a": None, "b": {"env": {"LABEL": "b"}}}}],
        "workload": {"sessions": 40, "rounds": 1, "timeout_s": 30, "seed": 5},
        "known_good": {"label": "a"},
        "strategy": {"kind": "optimize", "sampler": "grid", "trials": 2, "confirm_top": 1,
                     "confirm_trials": 2, "max_corruption": 0.2, "max_wedging": 0.2,
                     "production": {"label": "a"}},
    }


def test_each_pair_with_production_runs_on_one_pool(ray_cluster: None, tmp_path: Path) -> None:
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(campaign(tmp_path), sort_keys=False))
    result = CliRunner().invoke(app, ["optimize", str(path), "--store",
                                      str(tmp_path / "bisect.db"), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    against = verdict["optimize"]["versus_production"]
    with Store.open(str(tmp_path / "bisect.db")) as store:
        pools = {t.seq: t.pool for t in store.trials(verdict["campaign"])}
    assert not against["is_production"], against  # what the fast pool measured leads
    assert against["paired"] and against["pairs"] >= 2, against
    # every pair's two trials on one pool, and both pools ran pairs
    assert all(pools[mine] == pools[theirs] for mine, theirs in against["pair_trials"])
    assert {pools[mine] for mine, _ in against["pair_trials"]} == set(DECODE_MS)
    # as fast as production in truth: not called better (the pools' difference is 3x)
    assert not against["shown_better"], against
