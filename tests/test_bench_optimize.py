"""The optimize benchmark (bench/optimize.py) on a tiny budget: its notion of the right answer,
the oracle's order against the real loop's, and the command's table and JSON."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import bench.optimize_runs
from bench.knob_space import (
    BEST,
    KNOWN_GOOD,
    PRODUCTION,
    corruption,
    knob_campaign,
    throughput,
)
from bench.noise import REAL_WORLD, TrialNoise
from bench.optimize import main
from bench.optimize_figures import against_production, better_verdict, render_against
from bench.optimize_runs import (
    CLAIMS,
    GRID,
    Settings,
    answers,
    claim,
    hits,
    right,
    search_run,
)
from experiments.campaign import Campaign
from orchestrator.core.evidence import TrialEvidence, variant_key
from orchestrator.core.strategies.registry import strategy_for
from tests.support.scratch import in_memory

pytestmark = pytest.mark.pure

Measure = Callable[..., list[TrialEvidence]]
MEASURE = bench.optimize_runs.measure  # the real one, beside the module's memo below


@pytest.fixture(scope="module")
def scratch() -> Iterator[str]:
    with in_memory() as directory:
        yield str(directory)


@pytest.fixture(scope="module", autouse=True)
def measure(scratch: str) -> Iterator[Measure]:
    """``bench.optimize_runs.measure``, its stores in memory, each search measured once for the
    module: the tests here run the same searches again (the command's random search is its
    oracle-stopped one on this budget; the oracle test's searches are the command's), and a
    search is a function of its campaign, seed and noise
    (``test_a_search_is_its_campaign_seed_and_noise``)."""
    measured: dict[tuple[str, int, TrialNoise], list[TrialEvidence]] = {}

    def once(campaign: Campaign, seed: int, noise: TrialNoise = REAL_WORLD
             ) -> list[TrialEvidence]:
        key = (campaign.model_dump_json(), seed, noise)
        if key not in measured:
            measured[key] = MEASURE(campaign, seed, noise, scratch)
        return list(measured[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench.optimize_runs, "measure", once)
        yield once


def test_right_is_safe_and_within_two_percent_of_the_best() -> None:
    assert right(BEST)
    assert right({**BEST, "chunk": "3072"})  # 1,987 tok/s: within 2%
    assert not right({**BEST, "max_running": "112"})  # faster, but corrupts 30%
    assert not right({**BEST, "max_running": "80"})  # safe, 14% slower
    assert not right(PRODUCTION) and not right(KNOWN_GOOD) and not right(None)


def test_the_oracles_order_is_the_real_loops(measure: Measure) -> None:
    """The grid's and random's budgets are set from an in-memory study's order: the stored run
    must measure its first right configuration exactly at that trial (random after the two
    seeds, the grid with them among its 1,280)."""
    settings = Settings(trials=10)
    for sampler in ("random", "grid"):
        first = hits(knob_campaign(settings.strategy(sampler, 1)), 2)
        assert len(first) == 2 and first[0] < first[1] <= GRID + 2
        campaign = knob_campaign(settings.strategy(sampler, 1, first[0]))
        done = measure(campaign, 1)
        if sampler == "random":
            assert [t.levels for t in done[:2]] == [PRODUCTION, KNOWN_GOOD]
        assert [right(dict(t.levels)) for t in done].index(True) == first[0] - 1
    said = answers(campaign, done)
    assert len(said) == len(done) and said[0] is None  # one trial confirms nothing
    assert all(levels is None or corruption(levels) == 0 for levels in said)


def test_the_command_writes_its_table_and_json(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "optimize.json"
    assert main(["--seeds", "1", "--trials", "10", "--samplers", "tpe,random,grid",
                 "--workers", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for search in ("tpe", "random", "random, oracle-stopped", "grid, oracle-stopped",
                   "grid, full (computed)"):
        assert f"| {search} | 1 |" in printed
    assert "unsafe configurations ever reported as best: 0 (must be 0)" in printed
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    document = json.loads(out.read_text())
    assert [r["search"] for r in document["runs"]] == [
        "tpe", "random", "random, oracle-stopped", "grid, oracle-stopped"]
    for run in document["runs"]:
        assert run["unsafe_best"] == 0 and run["trials"] >= run["budget"]
        assert (run["reached"] is None) == (run["gpu_s_reach"] is None)
        assert run["gpu_s"] >= run["search_gpu_s"] > 0
    oracle = document["runs"][3]
    assert oracle["right"] and oracle["reached"] >= oracle["budget"]
    full = document["rows"][-1]
    assert full["search"] == "grid, full (computed)" and full["trials"] > GRID
    assert set(document["ratios"]) == {"grid, oracle-stopped", "grid, full (computed)"}
    versus = document["versus_production"]
    assert [row["search"] for row in versus] == [*(r["search"] for r in document["runs"]),
                                                 "all"]
    assert versus[-1]["runs"] == sum(sum(row["claims"].values()) for row in versus[:-1]) == 4
    assert "The final answer against production" in printed
    assert any(line.startswith("said better than production") for line in document["verdicts"])


def test_the_claims_against_production_add_up(measure: Measure) -> None:
    """Two seeds of TPE and one of random on a small budget: each run's claim is its
    verdict's, the counts of the claims add up to the runs, per search (of two runs and of
    one) and over all, and the truth of each claim is the space's (noise-free). The budget is
    the command test's: its seed-1 searches are measured once."""
    settings = Settings(trials=10)
    runs = [search_run(search, seed, settings)
            for search, seed in (("tpe", 1), ("tpe", 2), ("random", 1))]
    assert [(r.search, r.seed) for r in runs] == [("tpe", 1), ("tpe", 2), ("random", 1)]
    for run in runs:
        campaign = knob_campaign(settings.strategy(run.search, run.seed))
        done = measure(campaign, run.seed)
        conclusion = strategy_for(campaign).conclude(done, [])
        assert claim(conclusion) == (run.claim, run.tested)
        assert run.production_trials == sum(
            variant_key(t.levels) == variant_key(PRODUCTION) for t in done) >= 1
        assert (run.production_trials >= 2) == run.tested or run.claim != "no better"
        if run.claim == "better":  # the verdict's words agree
            assert "; better than production" in conclusion.reason and run.tested
        if run.claim == "no better":
            assert conclusion.reason.startswith("no better than production")
        if run.best is None:
            assert run.truly_faster is None and run.truly_safe is None
        else:
            assert run.truly_faster == (throughput(run.best) > throughput(PRODUCTION))
            assert run.truly_safe == (corruption(run.best) == 0)
    table = against_production(runs)
    assert [row["search"] for row in table] == ["tpe", "random", "all"]
    for row in table:
        mine = runs if row["search"] == "all" else [r for r in runs if r.search == row["search"]]
        assert set(row["claims"]) == set(CLAIMS) and sum(row["claims"].values()) == row["runs"]
        assert row["runs"] == len(mine)
        better, worse = row["claims"]["better"], row["claims"]["no better"]
        for key in ("better_truly_faster", "better_truly_safe"):
            assert row[key]["n"] == better and 0 <= row[key]["k"] <= better
            assert (row[key]["ci"] is None) == (better == 0)
        assert row["no_better_right"]["n"] == worse and 0 <= row["no_better_untested"] <= worse
        assert row["better_truly_faster"]["k"] == sum(
            r.claim == "better" and bool(r.truly_faster) for r in mine)
        assert row["no_better_right"]["k"] == sum(
            r.claim == "no better" and not r.truly_faster for r in mine)
    everyone = table[-1]
    for key in ("better_truly_faster", "better_truly_safe", "no_better_right"):
        assert everyone[key]["k"] == sum(row[key]["k"] for row in table[:-1])
        assert everyone[key]["n"] == sum(row[key]["n"] for row in table[:-1])
    assert "said better than production" in better_verdict(table)
    assert render_against(table).count("\n") == len(table) + 1


def test_a_search_is_its_campaign_seed_and_noise(measure: Measure, scratch: str) -> None:
    """Measured again from scratch (a new store, study and pools), a search gives the same
    trials: what this module's memo, and the benchmark's seeds, rest on. The second search's
    study is a user's, in SQLite next to the store: the benchmark's, in memory, picks the
    same."""
    campaign = knob_campaign(Settings(trials=10).strategy("tpe", 1))
    assert MEASURE(campaign, 1, REAL_WORLD, scratch, stored_study=True) == measure(campaign, 1)


def test_with_the_best_as_production_no_safe_answer_is_truly_faster() -> None:
    run = search_run("tpe", 1, Settings(trials=10, production="best"))
    assert run.production_trials >= 1 and run.claim in CLAIMS
    assert run.truly_faster is not True or run.truly_safe is False
    if run.best == BEST:
        assert run.claim == "production best"


def test_bad_options_are_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--samplers", "tpe,annealing"]) == 2
    assert "annealing" in capsys.readouterr().err
    assert main(["--seeds", "0"]) == 2


def test_speeds_give_that_many_pools_of_those_speeds(measure: Measure) -> None:
    """``--speeds 0.9,1``: two pools 10% apart, no random offsets; the driver runs the search's
    trials on both, and the final phase's pairs each on one pool."""
    settings = Settings(trials=10, speeds=(0.9, 1.0))
    assert settings.noise.pools == (("pool-1", 1.0, 0.9), ("pool-2", 1.0, 1.0))
    assert settings.noise.pool_spread == 0.0 and "pool pool-1 x1/x0.9" in (
        settings.noise.describe())
    campaign = settings.campaign("tpe", 1)
    assert [p.name for p in campaign.pools] == ["pool-1", "pool-2"]
    done = measure(campaign, 1, settings.noise)
    assert {t.pool for t in done} == {"pool-1", "pool-2"}
    said = strategy_for(campaign).conclude(done, []).finding_json("optimize")
    assert said is not None
    pool = {t.seq: t.pool for t in done}
    assert all(pool[theirs] == pool[mine]
               for theirs, mine in said["versus_production"]["pair_trials"])
    assert Settings().noise == REAL_WORLD  # no speeds: one pool, as before
    assert main(["--speeds", "fast"]) == 2
