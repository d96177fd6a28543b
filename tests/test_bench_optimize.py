"""The optimize benchmark (bench/optimize.py) on a tiny budget: its notion of the right answer,
the oracle's order against the real loop's, and the command's table and JSON."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from bench.knob_space import BEST, KNOWN_GOOD, PRODUCTION, corruption, knob_campaign
from bench.optimize import GRID, Settings, answers, hits, main, measure, right


def test_right_is_safe_and_within_two_percent_of_the_best() -> None:
    assert right(BEST)
    assert right({**BEST, "chunk": "3072"})  # 1,987 tok/s: within 2%
    assert not right({**BEST, "max_running": "112"})  # faster, but corrupts 30%
    assert not right({**BEST, "max_running": "80"})  # safe, 14% slower
    assert not right(PRODUCTION) and not right(KNOWN_GOOD) and not right(None)


def test_the_oracles_order_is_the_real_loops() -> None:
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


def test_bad_options_are_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--samplers", "tpe,annealing"]) == 2
    assert "annealing" in capsys.readouterr().err
    assert main(["--seeds", "0"]) == 2
