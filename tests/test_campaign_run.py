"""A whole campaign for real: Ray pool actors, twin processes over HTTP, a SQLite file, the CLI."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from db.store import Store
from experiments.campaign import Campaign
from experiments.secrets import shown_argv
from orchestrator.cli import app
from orchestrator.core.verdict import Status
from orchestrator.demo import twin_pool
from orchestrator.executor.driver import run_campaign
from orchestrator.stored import create_campaign
from tests.support.twins import race_faults

HOSTILE_NAME = '<script>alert("x")</script> & [bold]co[/bold]'
FAULTS = race_faults(seed=3)


def small_campaign(workdir: Path) -> dict[str, Any]:
    fault_model = workdir / "faults.yaml"
    fault_model.write_text(yaml.safe_dump(FAULTS))
    pools = [twin_pool(f"p{index}", "here", fault_model, latency_ms=5) for index in range(2)]
    return {
        "name": HOSTILE_NAME,
        "nodes": [{"name": "here", "workdir": str(workdir / "services")}],
        "pools": pools,
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": 0}},
                                           "bf16": {"env": {"BF16_INDEX_K": 1}}}},
            {"name": "hicache", "levels": {"off": None,
                                           "on": {"flags": "--enable-hierarchical-cache"}}},
        ],
        "workload": {"sessions": 20, "rounds": 2, "timeout_s": 20, "seed": 5},
        "strategy": {"repeats": 2},
        "cost": {"restart_s": 90, "workload_s": 485, "gpus": 16},
    }


@pytest.fixture(scope="module")
def finished(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[Path, str, Campaign]]:
    workdir = tmp_path_factory.mktemp("campaign")
    campaign = Campaign.model_validate(small_campaign(workdir))
    db_path = workdir / "bisect.db"
    with Store.open(str(db_path)) as store:
        campaign_id = create_campaign(store, campaign, "test")
        run_campaign(store, campaign_id)
    yield db_path, campaign_id, campaign


@pytest.mark.real
def test_the_planted_interaction_is_found(finished: tuple[Path, str, Campaign]) -> None:
    db_path, campaign_id, _ = finished
    result = CliRunner().invoke(app, ["verdict", campaign_id, "--store", str(db_path), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["status"] == Status.CULPRIT
    assert [c["factors"] for c in verdict["culprits"]] == [{"index_k": "bf16", "hicache": "on"}]
    assert verdict["cost"]["trials"] == 8 and verdict["cost"]["sessions"] == 160


@pytest.mark.real
def test_every_session_metric_and_log_event_is_stored(finished: tuple[Path, str, Campaign]) -> None:
    db_path, campaign_id, _ = finished
    with Store.open(str(db_path)) as store:
        trials = store.trials(campaign_id)
        assert len(trials) == 8 and {t.pool for t in trials} == {"p0", "p1"}
        assert store.get_campaign(campaign_id).status == "done"
        for trial in trials:
            assert len(store.sessions(trial.id)) == 20
            assert trial.wall_s and trial.workload_s is not None
            names = {m.name for m in store.metrics(trial.id)}
            assert "sglang:num_running_reqs" in names
        first_starts = [t for t in trials if t.restarts]
        assert first_starts
        kinds = {e.kind for t in first_starts for e in store.log_events(t.id)}
        assert "startup" in kinds
        leaks = [s for t in trials for s in store.sessions(t.id) if s.outcome == "leak"]
        assert leaks and all("DSML" in (s.evidence or "") for s in leaks)
        # each leak triaged against the parser the pool's services run (their flags say
        # --tool-call-parser deepseekv32), its line first in the stored evidence
        server_known = re.compile(r"\[(parses as deepseekv32, the server's parser|parser "
                                  r"mismatch: .*, the server runs deepseekv32|malformed: "
                                  r"deepseekv32: .*)\] ")
        assert all(server_known.match(s.evidence or "") for s in leaks), leaks[0].evidence


@pytest.mark.real
def test_services_are_stopped_when_the_campaign_ends(
        finished: tuple[Path, str, Campaign]) -> None:
    _, _, campaign = finished
    workdir = Path(campaign.nodes[0].workdir)
    assert not list(workdir.glob("*.pid"))
    for log in workdir.glob("*.log"):
        assert "fired up and ready to roll" in log.read_text()
    for pool in campaign.pools:
        command = " ".join(shown_argv(pool.services[0].start))  # it holds no secret
        running = [p for p in os.listdir("/proc")
                   if p.isdigit() and _cmdline(p).startswith(command)]
        assert running == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


@pytest.mark.real
def test_report_escapes_what_came_from_users_and_servers(
        finished: tuple[Path, str, Campaign], tmp_path: Path) -> None:
    db_path, campaign_id, _ = finished
    out = tmp_path / "r.html"
    args = ["report", campaign_id, "-o", str(out), "--store", str(db_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert "&lt;｜DSML｜" in html and "<｜DSML｜" not in html
    assert "index_k=bf16" in html and "culprit" in html


@pytest.mark.real
def test_ls_lists_the_campaign(finished: tuple[Path, str, Campaign]) -> None:
    db_path, campaign_id, _ = finished
    result = CliRunner().invoke(app, ["ls", "--store", str(db_path), "--json"])
    assert result.exit_code == 0
    [row] = json.loads(result.stdout)
    assert row["id"] == campaign_id and row["status"] == "done" and row["trials"] == 8
    # A name from the campaign file is shown as written, never read as rich markup.
    table = CliRunner().invoke(app, ["ls", "--store", str(db_path)], terminal_width=200)
    assert "[bold]co[/bold]" in table.stdout


@pytest.mark.real
def test_resume_discards_an_unfinished_trial_and_repeats_nothing(
        finished: tuple[Path, str, Campaign]) -> None:
    db_path, campaign_id, _ = finished
    with Store.open(str(db_path)) as store:
        variant = store.variant(campaign_id, {"index_k": "fp8", "hicache": "off"})
        orphan = store.start_trial(campaign_id, variant.id, 99, "p0", 1)  # as a kill -9 leaves it
    result = CliRunner().invoke(app, ["resume", campaign_id, "--store", str(db_path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cost"]["trials"] == 8
    with Store.open(str(db_path)) as store:
        assert store.get_trial(orphan).status == "discarded"
        assert len(store.trials(campaign_id)) == 8


@pytest.mark.pure
def test_unknown_campaign_is_bad_input(tmp_path: Path) -> None:
    Store.open(str(tmp_path / "x.db")).close()  # a store without it (none: "no store at")
    result = CliRunner().invoke(app, ["verdict", "nope", "--store", str(tmp_path / "x.db")])
    assert result.exit_code == 2
    assert "nope" in result.output and "Traceback" not in result.output
