"""`bisect optimize` as a user runs it: bad input refused with exit 2 before anything runs, and
a search on real twins (over HTTP, through Ray and the driver) whose fault model plants the
trade-off: HiCache with more than 96 running requests is the fastest and corrupt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.demo import twin_pool
from tests.sweep_support import builtin_triage  # noqa: F401 - autouse: the built-in parser

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[1]
TRADEOFF = ROOT / "experiments" / "twin" / "tradeoff.example.yaml"


def campaign(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    faults = tmp_path / "faults.yaml"
    shutil.copy(TRADEOFF, faults)
    pool = twin_pool("p", "here", faults, latency_ms=2)
    # time on the twin's clock, not this machine's CPU: decode and prefill cost what they cost
    # a server, so admission (--max-running-requests) and HiCache's cheap prefixes set the speed
    pool["services"][0]["start"] += ["--twin-startup-delay", "0", "--twin-decode-ms-per-token",
                                     "6", "--twin-prefill-us-per-token", "50"]
    data: dict[str, Any] = {
        "name": "fastest clean",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [pool],
        "factors": [
            {"name": "max_running", "range": {"min": 32, "max": 128, "step": 32,
                                              "integer": True,
                                              "flag": "--max-running-requests"}},
            {"name": "hicache", "levels": {"off": None, "on": {
                "flags": ["--enable-hierarchical-cache"]}}},
        ],
        "workload": {"sessions": 128, "rounds": 2, "timeout_s": 30, "seed": 3,
                     "context": {"start_tokens": 400, "end_tokens": 1200}},
        "known_good": {"max_running": 32, "hicache": "off"},
        "strategy": {"kind": "optimize", "sampler": "grid", "trials": 8, "confirm_top": 2,
                     "confirm_trials": 2, "max_corruption": 0.05, "max_wedging": 0.05,
                     "production": {"max_running": 64, "hicache": "off"}},
        "cost": {"restart_s": 90, "workload_s": 485, "gpus": 8},
    }
    data.update(changes)
    return data


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def optimize(path: Path, tmp_path: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["optimize", str(path), "--store",
                                    str(tmp_path / "bisect.db"), *extra])


@pytest.mark.parametrize(("change", "field", "said"), [
    ({"factors": [{"name": "max_running", "range": {"min": 300, "max": 256, "integer": True,
                                                    "flag": "--max-running-requests"}}]},
     "factors[0].range", "min (300) is above max (256)"),
    ({"factors": [{"name": "m", "range": {"min": 1, "max": 8, "flag": "--m", "env": "M"}}]},
     "factors[0].range", "exactly one of `flag` or `env`"),
    ({"factors": [{"name": "m", "range": {"min": 0, "max": 8, "scale": "log", "flag": "--m"}}]},
     "factors[0].range", "a log scale needs min above 0"),
    ({"known_good": {"max_running": 48, "hicache": "off"}},
     "known_good.max_running", "no level '48' (levels: 32..128 step 32)"),
    ({"known_bad": {"max_running": 128, "hicache": "on"}},
     "known_bad", "leave known_bad out"),
])
def test_bad_input_is_named_and_exit_2(tmp_path: Path, change: dict[str, Any], field: str,
                                       said: str) -> None:
    path = write(tmp_path, campaign(tmp_path, **change))
    result = optimize(path, tmp_path)
    assert result.exit_code == 2, result.output
    assert "campaign.yaml:" in result.stderr and field in result.stderr, result.stderr
    assert said in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "bisect.db").exists()  # nothing half-done


def test_a_range_needs_the_optimize_strategy(tmp_path: Path) -> None:
    data = campaign(tmp_path, strategy={"kind": "factorial"}, known_good=None)
    result = CliRunner().invoke(app, ["validate", str(write(tmp_path, data))])
    assert result.exit_code == 2
    assert "factors[0].range: a numeric range is searched by `bisect optimize`" in result.stderr


def test_optimize_refuses_another_strategy(tmp_path: Path) -> None:
    data = campaign(tmp_path, factors=[{"name": "hicache", "levels": {"off": None, "on": None}}],
                    strategy={"kind": "factorial"}, known_good=None)
    result = optimize(write(tmp_path, data), tmp_path)
    assert result.exit_code == 2
    assert "`bisect optimize` searches with the optimize strategy" in result.stderr


def test_a_grid_needs_steps(tmp_path: Path) -> None:
    data = campaign(tmp_path)
    data["factors"][0]["range"].pop("step")
    data["factors"][0]["range"]["integer"] = False
    result = CliRunner().invoke(app, ["validate", str(write(tmp_path, data))])
    assert result.exit_code == 2 and "a grid needs a `step`" in result.stderr


def test_a_knob_the_nodes_help_lacks_is_refused_before_anything_changes(tmp_path: Path) -> None:
    data = campaign(tmp_path)
    data["factors"][0]["range"]["flag"] = "--max-running-requestz"
    result = optimize(write(tmp_path, data), tmp_path)
    assert result.exit_code == 2, result.output
    assert "--max-running-requestz" in result.stderr and "preflight" in result.stderr
    assert not (tmp_path / "services").exists() or not any(
        (tmp_path / "services").glob("*.pid"))


def test_validate_shows_the_search_space(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(write(tmp_path, campaign(tmp_path)))])
    assert result.exit_code == 0, result.output
    assert "max_running 32..128 step 32 (8 variants on the grid)" in result.stdout


def test_the_readme_search_example_is_valid(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    example = (readme.split("## The fastest clean configuration", 1)[1]
               .split("```yaml\n", 1)[1].split("```", 1)[0])
    around = {k: v for k, v in campaign(tmp_path).items() if k in ("name", "nodes", "pools")}
    around["pools"][0]["services"][0]["name"] = "decode"
    path = tmp_path / "campaign.yaml"  # as written: `on` stays a name (YAML 1.2)
    path.write_text(yaml.safe_dump(around, sort_keys=False) + example)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def searched(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[
        Path, dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("optimize")
    path = write(tmp_path, campaign(tmp_path))
    result = optimize(path, tmp_path, "--json", "-o", str(tmp_path / "report.html"))
    assert result.exit_code == 0, result.output
    return tmp_path, json.loads(result.stdout)


def test_on_twins_the_best_safe_configuration_is_found(
        searched: tuple[Path, dict[str, Any]]) -> None:
    _, verdict = searched
    search = verdict["optimize"]
    assert verdict["status"] == "optimum"
    ranked = {row["key"]: row for row in search["ranked"]}
    assert "hicache=on,max_running=128" not in ranked  # the fastest, and corrupt
    corrupt = {row["key"]: row for row in search["rejected"]}["hicache=on,max_running=128"]
    assert corrupt["corruption"]["failed"] > 0 and corrupt["why"]
    best = search["ranked"][0]
    assert best["levels"] == search["best"] and best["confirmed"]
    assert best["corruption"]["upper"] < 0.05
    # Every configuration ranked is safe by the fault model: HiCache off, or at most 96 running
    assert all(row["levels"]["hicache"] == "off" or int(row["levels"]["max_running"]) <= 96
               for row in search["ranked"])
    # 128 sessions in flight, so admission is what speed needs: the answer admits more than
    # known-good's 32. Which of the wider ones wins is this 2-core machine's noise (up to +-40%
    # a trial; 64 won under a load of 13-37, 96 or 128 when quiet): the simulated space
    # (test_optimize_search.py) tests the exact best.
    assert int(best["levels"]["max_running"]) > 32


def test_on_twins_the_answer_is_stored_and_read_back(
        searched: tuple[Path, dict[str, Any]]) -> None:
    tmp_path, verdict = searched
    result = CliRunner().invoke(app, ["verdict", verdict["campaign"], "--store",
                                      str(tmp_path / "bisect.db")])
    assert result.exit_code == 0, result.output
    assert "safe configurations, best first:" in result.stdout
    assert f"    {verdict['optimize']['ranked'][0]['key']}: output_throughput" in result.stdout
    assert "rejected (not proven safe), fastest first:" in result.stdout
    assert (tmp_path / "bisect.optuna.db").exists() and (tmp_path / "report.html").exists()
    html = (tmp_path / "report.html").read_text()
    assert "hicache=on" in html or "max_running" in html


def test_gp_without_pytorch_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's install has no PyTorch (the test venv has the CPU build): seen as that
    install sees it, `sampler: gp` is refused before anything runs."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "torch" else real(name, *rest))
    data = campaign(tmp_path)
    data["strategy"]["sampler"] = "gp"
    result = optimize(write(tmp_path, data), tmp_path)
    assert result.exit_code == 2, result.output
    assert "strategy.sampler: gp needs PyTorch" in result.stderr
    assert not (tmp_path / "bisect.db").exists()
