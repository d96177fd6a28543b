"""The strategy plug-in point is closed: a strategy defined here, registered here, runs a whole
campaign on real twins (Ray pool actors, HTTP, a SQLite file), and `bisect validate`, `verdict`
and `log` work on it, with no module of the project touched."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import pytest
import yaml
from pydantic import Field
from typer.testing import CliRunner

from db.store import Store
from experiments.campaign import Campaign
from experiments.campaign_load import load_campaign
from experiments.strategy_config import Problems, StrategyConfig
from orchestrator.cli import app
from orchestrator.core.attribution import measure
from orchestrator.core.evidence import Levels, TrialEvidence, variant_key
from orchestrator.core.stats.compare import StopWhenFailing
from orchestrator.core.stats.exact import fisher_greater
from orchestrator.core.strategies.base import (
    UNFINISHED,
    Conclusion,
    Status,
    Unresolvable,
    not_yet_running,
)
from orchestrator.core.strategies.registry import register, unregister
from orchestrator.core.strategies.sequential import Step
from orchestrator.core.verdict import judged_cells
from orchestrator.demo import twin_pool
from orchestrator.executor.driver import run_campaign
from orchestrator.stored import create_campaign

pytestmark = pytest.mark.real

GOOD = {"index_k": "fp8", "topk_v2": "off"}
BAD = {"index_k": "bf16", "topk_v2": "on"}
FAULTS = {"seed": 11, "rules": [{
    "name": "topk-v2", "when": {"env": {"SGLANG_OPT_USE_TOPK_V2": "1"}},
    "min_inflight": 1, "probability": 0.4, "effect": "leak", "markup": "dsml",
}]}


class ToyConfig(StrategyConfig):
    """Known-bad and known-good, ``runs`` times each: is known-bad worse?"""

    kind: Literal["toy"] = "toy"
    runs: int = Field(default=2, ge=1, le=20)

    def problems(self, campaign: Campaign, levels: dict[str, list[str]]) -> Problems:
        if campaign.known_good is None or campaign.known_bad is None:
            return [(("strategy", "kind"), "the toy strategy needs known_good and known_bad")]
        return []


class Toy:
    """Names known-bad's difference from known-good when known-bad fails more, else nothing."""

    def __init__(self, factors: dict[str, list[str]], good: Levels, bad: Levels, runs: int,
                 alpha: float) -> None:
        self.factors, self.good, self.bad = factors, dict(good), dict(bad)
        self.runs, self.alpha = runs, alpha

    def propose(self, done: Sequence[TrialEvidence], pending: Sequence[Levels]) -> list[
            dict[str, str]]:
        have = Counter(variant_key(t.levels) for t in done)
        needed = [levels for levels in (self.bad, self.good)
                  for _ in range(self.runs - have[variant_key(levels)])]
        return not_yet_running(needed, pending)

    def stop_rule(self, levels: Levels, done: Sequence[TrialEvidence]) -> StopWhenFailing | None:
        return None

    def conclude(self, done: Sequence[TrialEvidence],
                 unresolvable: Sequence[Unresolvable]) -> Conclusion:
        _, cells = judged_cells(done, self.factors)
        by_key = {variant_key(c.levels): c for c in cells}
        bad, good = by_key.get(variant_key(self.bad)), by_key.get(variant_key(self.good))
        if bad is None or good is None or len(bad.trials) < self.runs or \
                len(good.trials) < self.runs:
            return Conclusion(Status.INCONCLUSIVE, UNFINISHED)
        p = fisher_greater(bad.failures, bad.judged, good.failures, good.judged)
        # its trail in the adaptive search's entry type (a plug-in may bring its own: a
        # frozen dataclass with `phase`, `to_json()` and `line()`)
        log = tuple(Step(f"toy {name}", dict(cell.levels), "fail" if p <= self.alpha else "pass",
                         cell.failures, cell.judged, len(cell.trials), p, 1.0)
                    for name, cell in (("bad", bad), ("good", good)))
        if p > self.alpha:
            return Conclusion(Status.NO_CULPRIT, "known-bad is no worse", log=log)
        difference = {f: lvl for f, lvl in self.bad.items() if self.good[f] != lvl}
        return Conclusion(Status.CULPRIT, f"known-bad fails more (p={p:.2g})",
                          (measure(difference, cells),), log)

    def meeting(self, unresolvable: Sequence[Unresolvable]) -> Toy:
        return self


def toy_for(campaign: Campaign, plan: ToyConfig) -> Toy:
    assert campaign.known_good is not None and campaign.known_bad is not None
    return Toy(campaign.level_names(), campaign.known_good, campaign.known_bad, plan.runs,
               plan.alpha)


@pytest.fixture
def toy_kind() -> Iterator[None]:
    register(ToyConfig, toy_for)
    yield
    unregister("toy")


def campaign_file(tmp_path: Path, strategy: str) -> Path:
    faults = tmp_path / "faults.yaml"
    faults.write_text(yaml.safe_dump(FAULTS))
    text = yaml.safe_dump({
        "name": "toy",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool(f"p{index}", "here", faults, latency_ms=5) for index in range(2)],
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": 0}},
                                           "bf16": {"env": {"BF16_INDEX_K": 1}}}},
            {"name": "topk_v2", "levels": {"off": None,
                                           "on": {"env": {"SGLANG_OPT_USE_TOPK_V2": "1"}}}},
        ],
        "workload": {"sessions": 20, "rounds": 2, "timeout_s": 20, "seed": 3},
        "known_good": GOOD,
        "known_bad": BAD,
    }, sort_keys=False) + f"strategy: {strategy}\n"
    path = tmp_path / "campaign.yaml"
    path.write_text(text)
    return path


def test_a_registered_strategy_runs_a_whole_campaign(
        toy_kind: None, ray_cluster: None, tmp_path: Path) -> None:
    campaign = load_campaign(campaign_file(tmp_path, "{kind: toy, runs: 2}"))
    assert campaign.strategy == ToyConfig(runs=2)
    db = tmp_path / "bisect.db"
    with Store.open(str(db)) as store:
        campaign_id = create_campaign(store, campaign, "test")
        run_campaign(store, campaign_id)
        trials = store.trials(campaign_id)
    assert Counter(variant_key(t.levels) for t in trials) == {
        variant_key(BAD): 2, variant_key(GOOD): 2}

    runner = CliRunner()
    result = runner.invoke(app, ["verdict", campaign_id, "--store", str(db), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "culprit" and verdict["reason"].startswith("known-bad fails more")
    [culprit] = verdict["culprits"]
    assert culprit["factors"] == BAD and culprit["corrupted_with"] > 0
    assert culprit["corrupted_without"] == 0 and verdict["cost"]["trials"] == 4
    assert [v["levels"] for v in verdict["variants"]] == [GOOD, BAD]

    log = runner.invoke(app, ["log", campaign_id, "--store", str(db)])
    assert log.exit_code == 0, log.output
    lines = log.output.splitlines()
    assert len(lines) == 2 and "toy bad" in lines[0] and "toy good" in lines[1], log.output
    assert " 0/40 in 2 trial(s)" in lines[1], log.output


def test_a_registered_strategys_fields_are_validated_by_file_line_and_field(
        toy_kind: None, tmp_path: Path) -> None:
    runner = CliRunner()
    for strategy, said in (
            ("{kind: toy, runs: 99}", "strategy.runs: Input should be less than or equal to 20"),
            ("{kind: toy, design: fractional}", "strategy.design: only the factorial strategy "
                                                "has a design (this campaign's strategy is toy)")):
        path = campaign_file(tmp_path, strategy)
        line = path.read_text().splitlines().index(f"strategy: {strategy}") + 1
        result = runner.invoke(app, ["validate", str(path)])
        assert result.exit_code == 2, result.output
        assert f"{path}:{line}: {said}" in result.output, result.output
        assert "Traceback" not in result.output
    schema = runner.invoke(app, ["schema"])
    assert schema.exit_code == 0 and '"toy"' in schema.output, schema.output


def test_an_unregistered_kind_is_named_at_its_field(tmp_path: Path) -> None:
    # the real console script: a process of its own, where only the built-in kinds are
    # registered (this one may hold the benchmark's oracle, or the toy above)
    path = campaign_file(tmp_path, "{kind: toy}")
    result = subprocess.run([str(Path(sys.executable).parent / "bisect"), "validate", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert ("strategy.kind: Input should be 'adaptive', 'factorial', 'commits', 'sweep' or "
            "'optimize'") in result.stderr
