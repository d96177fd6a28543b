"""The CLI through the real console script and through typer's CliRunner, against real twins."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.conftest import TwinFactory

BISECT = str(Path(sys.executable).parent / "bisect")


def leak_model(path: Path, probability: float, min_inflight: int) -> Path:
    path.write_text(yaml.safe_dump({"rules": [{
        "name": "leak", "when": {}, "min_inflight": min_inflight,
        "probability": probability, "effect": "leak",
    }]}))
    return path


@pytest.mark.real
def test_console_script_help_lists_every_command() -> None:
    done = subprocess.run([BISECT, "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    for command in ("demo", "run", "resume", "verdict", "report", "ls", "stress", "twin",
                    "validate", "schema"):
        assert command in done.stdout


@pytest.mark.real
def test_twin_help_comes_from_the_twin() -> None:
    done = subprocess.run([BISECT, "twin", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert "--enable-hierarchical-cache" in done.stdout and "--fault-model" in done.stdout
    bad = subprocess.run([BISECT, "twin", "--no-such-flag"], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2 and "--no-such-flag" in bad.stderr


@pytest.mark.real
def test_stress_measures_a_planted_leak_inside_its_interval(twin: TwinFactory,
                                                             tmp_path: Path) -> None:
    model = leak_model(tmp_path / "faults.yaml", probability=0.1, min_inflight=32)
    url = twin("--fault-model", str(model), "--twin-latency-ms", "30")
    result = CliRunner().invoke(
        app, ["stress", url, "--sessions", "200", "--rounds", "4", "--seed", "7", "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["sessions"] == 200 and summary["infra"] == 0
    assert summary["counts"]["leak"] == summary["corrupted"] > 0
    low, high = summary["ci95"]
    assert low <= 0.1 <= high
    assert summary["wall_s"] > 0


@pytest.mark.real
def test_stress_at_concurrency_one_sees_no_race(twin: TwinFactory, tmp_path: Path) -> None:
    model = leak_model(tmp_path / "faults.yaml", probability=1.0, min_inflight=32)
    url = twin("--fault-model", str(model), "--twin-latency-ms", "1")
    result = CliRunner().invoke(app, ["stress", url, "--sessions", "1", "--rounds", "4", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["corrupted"] == 0 and summary["counts"]["ok"] == 1


@pytest.mark.real
def test_stress_human_output_is_a_table(twin: TwinFactory) -> None:
    url = twin("--twin-latency-ms", "1")
    result = CliRunner().invoke(app, ["stress", url, "--sessions", "4", "--rounds", "2"])
    assert result.exit_code == 0
    assert "ok" in result.stdout and "leak" in result.stdout


@pytest.mark.real
def test_stress_against_nothing_reports_errors_not_corruption() -> None:
    result = CliRunner().invoke(
        app, ["stress", "http://127.0.0.1:9", "--sessions", "3", "--rounds", "1", "--json"]
    )
    assert result.exit_code == 1, result.output  # nothing could be judged: the run failed
    summary = json.loads(result.stdout)
    assert summary["counts"]["error"] == 3 and summary["corrupted"] == 0 and summary["judged"] == 0


@pytest.mark.pure
def test_the_readme_campaign_example_is_valid(tmp_path: Path) -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    example = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "campaign.yaml"
    path.write_text(example)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "4 variants" in result.stdout


@pytest.mark.pure
def test_the_real_investigation_campaign_is_valid() -> None:
    path = Path(__file__).parent.parent / "experiments" / "dsv4-index-k.yaml"
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "4 factors, 16 variants, 1 pool(s)" in result.stdout
