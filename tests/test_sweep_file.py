"""The sweep file: validated with the campaign file's own care, every error naming the file, the
line and the field (exit 2 from `bisect sweep`, nothing started, nothing stored)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from experiments.strategy_config import SweepConfig
from experiments.sweep import SweepError, load_sweep, sweep_campaign
from orchestrator.cli import app

pytestmark = pytest.mark.pure


def sweep_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "nightly",
        "nodes": [{"name": "gpu-a", "workdir": "/var/tmp/bisect"}],
        "pools": [{"name": "p", "endpoint": "http://127.0.0.1:30000", "services": [{
            "name": "sglang", "node": "gpu-a", "start": "python -m sglang.launch_server",
            "health_url": "http://127.0.0.1:30000/health"}]}],
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": 0}},
                                           "bf16": {"env": {"BF16_INDEX_K": 1}}}},
            {"name": "hicache", "levels": {"off": None,
                                           "on": {"flags": "--enable-hierarchical-cache"}}}],
        "variants": {"production": {"index_k": "bf16", "hicache": "off"},
                     "hicache-on": {"index_k": "bf16", "hicache": "on"}},
    }
    data.update(changes)
    return data


def written(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def error_of(tmp_path: Path, data: dict[str, Any]) -> str:
    with pytest.raises(SweepError) as caught:
        load_sweep(written(tmp_path, data))
    return str(caught.value)


def test_a_sweep_becomes_a_campaign_of_the_sweep_strategy(tmp_path: Path) -> None:
    sweep = load_sweep(written(tmp_path, sweep_data(production="hicache-on")))
    assert [v.name for v in sweep.named_variants()] == ["hicache-on", "production"]
    campaign = sweep_campaign(sweep)
    assert isinstance(campaign.strategy, SweepConfig)
    assert campaign.strategy.production == "hicache-on"
    assert campaign.known_good == {"index_k": "bf16", "hicache": "on"}
    assert campaign.strategy.thresholds.corruption == 0.05


def test_the_first_variant_is_production_unless_named(tmp_path: Path) -> None:
    sweep = load_sweep(written(tmp_path, sweep_data()))
    assert sweep.production_name == "production"


@pytest.mark.parametrize(("changes", "where"), [
    ({"variants": {"production": {"index_k": "bf17", "hicache": "off"}}},
     "variants.production.index_k: no factor level index_k=bf17"),
    ({"variants": {"production": {"index_k": "bf16"}}},
     "variants.production: no level for hicache"),
    ({"production": "nope"}, "production: no variant 'nope'"),
    ({"hunt": True}, "hunt: a hunt bisects the source tree's commits"),
    ({"trials": {"min": 4, "max": 3}}, "trials.max: below trials.min (4)"),
    ({"thresholds": {"corruption": 2}}, "thresholds.corruption: Input should be less than"),
    ({"thresholds": {"latency": 0.1}}, "thresholds.latency: Extra inputs are not permitted"),
    ({"source": {"tree": "relative/path"}}, "source.tree: String should match pattern"),
    ({"source": {"tree": "/srv/sglang", "services": ["ghost"]}},
     "source.services[0]: unknown service 'ghost'"),
    ({"variants": {}}, "variants: Dictionary should have at least 1 item"),
    ({"alpha": 0.7}, "alpha: Input should be less than 0.5"),
    ({"variants": {"production": {"index_k": "bf16", "hicache": "off"},
                   "again": {"hicache": "off", "index_k": "bf16"}}},
     "variants.again: the same levels as variant 'production'"),
])
def test_bad_sweep_files_name_line_and_field(tmp_path: Path, changes: dict[str, Any],
                                             where: str) -> None:
    message = error_of(tmp_path, sweep_data(**changes))
    assert "sweep.yaml:" in message
    assert where in message, message


def test_a_campaign_problem_is_named_where_the_sweep_file_has_it(tmp_path: Path) -> None:
    data = sweep_data()
    data["pools"][0]["services"][0]["node"] = "elsewhere"
    message = error_of(tmp_path, data)
    assert "pools[0].services[0].node: unknown node 'elsewhere'" in message
    line = int(message.split("sweep.yaml:")[1].split(":")[0])
    assert "node: elsewhere" in (tmp_path / "sweep.yaml").read_text().splitlines()[line - 1]


def test_bad_input_exits_2_and_stores_nothing(tmp_path: Path) -> None:
    path = written(tmp_path, sweep_data(production="nope"))
    store = tmp_path / "bisect.db"
    result = CliRunner().invoke(app, ["sweep", str(path), "--store", str(store)])
    assert result.exit_code == 2, result.output
    assert "production: no variant 'nope'" in result.output
    assert "Traceback" not in result.output
    assert not store.exists()


def test_check_validates_without_running_and_schema_has_sweep_files(tmp_path: Path) -> None:
    path = written(tmp_path, sweep_data())
    store = tmp_path / "bisect.db"
    result = CliRunner().invoke(app, ["sweep", str(path), "--check", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert "ok — sweep nightly, 2 variant(s), 1 pool(s)" in result.output
    assert not store.exists()
    schema = CliRunner().invoke(app, ["schema", "--sweep"])
    assert schema.exit_code == 0
    assert {"variants", "thresholds", "trials", "hunt", "source"} <= set(
        json.loads(schema.stdout)["properties"])
