"""The real engine's optimize files (experiments/real_engine/optimize.py) on the driver's real
loop (the strategy, the Optuna study in memory, a SQLite store), the engine replaced by pools whose
throughputs are run 2's grid on vLLM (BENCHMARKS.md "A real engine"): what the search's budget
lets it measure, and how many trials the grid gives each configuration. The engine itself runs
in `make real-engine-optimize`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench.knob_space import KnobPools
from db.records import SessionRow, TrialTiming
from db.store import Store
from experiments.campaign_load import load_campaign
from experiments.real_engine.optimize import CONFIRM, SPACE, optimize
from orchestrator.executor.base import TrialReport
from orchestrator.executor.driver import drive
from orchestrator.search.study import OptunaSearch
from orchestrator.stored import verdict_of
from tests.support.scratch import in_memory

pytestmark = pytest.mark.pure

# output tokens/s by (max_num_seqs, eager): run 2's grid, rounded
SPEEDS = {("256", "off"): 1700.0, ("256", "on"): 1230.0, ("4", "off"): 1190.0,
          ("4", "on"): 890.0, ("1", "off"): 330.0, ("1", "on"): 300.0}
SESSIONS = 32


class EnginePools(KnobPools):
    """An executor of clean trials, each at its configuration's speed within ``noise`` (the
    knob space's pools' queue, not their space)."""

    def __init__(self, seed: int, noise: float) -> None:
        super().__init__(seed)
        self.noise = noise

    def next_report(self) -> tuple[str, TrialReport]:
        name, order = self.orders.popleft()
        speed = SPEEDS[order.levels["max_num_seqs"], order.levels["eager"]]
        tokens = speed * self.random.uniform(1 - self.noise, 1 + self.noise)
        sessions = [SessionRow(i, f"s{i}", "ok", 4, None, None, 0.0) for i in range(SESSIONS)]
        latency = {"p50_ms": 100.0, "p90_ms": 200.0, "p99_ms": 300.0}
        performance = {"wall_s": 20.0, "requests": SESSIONS * 4, "completed": SESSIONS * 4,
                       "output_tokens": int(tokens * 20), "good_sessions": SESSIONS,
                       "request_throughput": tokens / 54, "output_throughput": tokens,
                       "goodput": SESSIONS / 20.0, "ttft": latency, "tpot": None, "itl": None,
                       "e2e": latency}
        timing = TrialTiming(wall_s=0.0, restart_s=90.0, workload_s=20.0, restarts=1,
                             stopped_early=False)
        return name, TrialReport(order.trial_id, None, timing, sessions,
                                 performance=performance)


def run(directory: Path, kind: str, seed: int, noise: float = 0.15,
        **strategy: Any) -> tuple[dict[str, Any], Counter[str]]:
    """The verdict JSON of one run of ``kind``'s file, and its trials by configuration."""
    (directory / "venv/lib/python3.11/site-packages").mkdir(parents=True, exist_ok=True)
    written = optimize(directory / "venv", directory / "model", 39999, str(directory), kind)
    written["strategy"].update(strategy)
    path = directory / f"{kind}.yaml"
    path.write_text(json.dumps(written), encoding="utf-8")
    campaign = load_campaign(path)
    with Store.open(str(directory / f"{kind}.db")) as store:
        store.create_campaign(kind, campaign.name, campaign.model_dump(mode="json"), "test")
        # the study in memory: where it is kept is test_optimize_search's (a quarter the CPU)
        drive(store, kind, campaign, EnginePools(seed, noise),
              search=OptunaSearch(campaign, kind, None))
        verdict = verdict_of(store, kind).to_json()
    section = verdict["optimize"]
    counts = Counter({f"{row['levels']['max_num_seqs']}/{row['levels']['eager']}":
                      len(row["objectives"][0]["values"])
                      for row in [*section["ranked"], *section["rejected"], *section["unproven"]]})
    return verdict, counts


def test_the_search_budget_leaves_picks_for_the_fastest_after_the_leaders_reruns() -> None:
    with in_memory() as directory:
        verdict, counts = run(directory, "search", 1)
        assert counts["256/off"] >= CONFIRM, counts
        assert verdict["optimize"]["best"] == {"max_num_seqs": "256", "eager": "off"}
        # run 3's budget (5): production's re-runs and the first leader's took it all
        _, before = run(directory / "five", "search", 1, trials=5)
        assert "256/off" not in before and "256/on" not in before, before


def test_the_grid_measures_every_configuration_three_times() -> None:
    with in_memory() as directory:
        verdict, counts = run(directory, "grid", 1)
    assert len(counts) == SPACE and min(counts.values()) == CONFIRM, counts
    assert verdict["optimize"]["best"] == {"max_num_seqs": "256", "eager": "off"}
