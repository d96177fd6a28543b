"""`bisect optimize` on two twin pools, one planted slower (each request costs it 10 ms more on
the twin's clock): each pair of the answer and production runs on one pool, next to each other,
and both pools run pairs at once; the comparison reads each pair on its pool. Production's
re-runs during confirmation each run beside a re-run of the answer, on one pool."""

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

LATENCY_MS = {"fast": 2, "slow": 12}  # a request's fixed cost on each pool: the planted offset


def campaign(tmp_path: Path) -> dict[str, Any]:
    faults = tmp_path / "faults.yaml"
    faults.write_text(yaml.safe_dump({"rules": []}))
    pools = []
    for name, latency in LATENCY_MS.items():
        pool = twin_pool(name, "here", faults, latency_ms=latency)
        # time on the twin's clock: admission (--max-running-requests) sets the speed
        pool["services"][0]["start"] += ["--twin-startup-delay", "0",
                                         "--twin-decode-ms-per-token", "6"]
        pools.append(pool)
    return {
        "name": "two pools",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": pools,
        "factors": [{"name": "max_running", "range": {
            "min": 4, "max": 32, "step": 28, "integer": True,
            "flag": "--max-running-requests"}}],
        "workload": {"sessions": 32, "rounds": 1, "timeout_s": 60, "seed": 5},
        "known_good": {"max_running": 4},
        # production admits 4 requests at a time: the other configuration is the answer
        "strategy": {"kind": "optimize", "sampler": "grid", "trials": 2, "confirm_top": 1,
                     "confirm_trials": 2, "max_corruption": 0.2, "max_wedging": 0.2,
                     "production": {"max_running": 4}},
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
        trials = store.trials(verdict["campaign"])
    ran = {t.seq: (t.pool, t.levels["max_running"]) for t in trials}
    assert verdict["optimize"]["best"] == {"max_running": "32"}, ran
    assert against["paired"] and against["pairs"] >= 2, (against, ran)
    # every pair's two trials on one pool, one after the other there; both pools ran pairs
    for theirs, mine in against["pair_trials"]:
        assert ran[theirs][0] == ran[mine][0], (against["pair_trials"], ran)
        between = [seq for seq in range(min(theirs, mine) + 1, max(theirs, mine))
                   if ran[seq][0] == ran[mine][0]]
        assert not between, (against["pair_trials"], ran)
    assert {ran[mine][0] for _, mine in against["pair_trials"]} == set(LATENCY_MS), ran
    # confirmation (after the grid's 2 trials, before the final pairs): each re-run of
    # production next to a re-run of the answer on one pool (on main at b1ccbf9, production
    # re-ran on its own pool, beside its own first trial)
    final = {seq for pair in against["pair_trials"] for seq in pair}
    confirming = [seq for seq in sorted(ran) if seq > 2 and seq not in final]
    production = [seq for seq in confirming if ran[seq][1] == "4"]
    assert production, ran  # production re-ran during confirmation
    # until a trial of the answer has ended, production is the only configuration measured
    # and leads: its re-run then is the leader's own, alone (seen under load, where the slow
    # pool's trial of production ended first)
    answered = min(t.finished_at for t in trials if t.levels["max_running"] == "32"
                   and t.finished_at is not None)
    started = {t.seq: t.started_at for t in trials}
    for seq in [seq for seq in production if started[seq] >= answered]:
        order = [s for s in sorted(ran) if ran[s][0] == ran[seq][0]]  # its pool's trials
        at = order.index(seq)
        beside = order[max(0, at - 1):at] + order[at + 1:at + 2]
        assert any(ran[n][1] == "32" and n in confirming for n in beside), (seq, ran)
