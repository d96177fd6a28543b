"""A sweep alerts rarely and rightly: an unchanged build on noisy twins raises no alert run
after run; a throughput regression planted in the twin's time model is found and confirmed;
a run that overlaps another of the same sweep is refused (exit 4) and recorded as skipped, on
SQLite and on the real PostgreSQL; two orchestrators run whole sweeps on one PostgreSQL store.
The regression is found on SQLite alone: what differs on PostgreSQL is the store, whose sweep
records are tested on both (test_sweep_store.py), and whole sweeps on it run here below."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from db.store import Store
from db.sweeps import Sweeps
from orchestrator.cli import app
from tests.postgres_fixture import BOTH_REAL
from tests.support.twins import FAST
from tests.sweep_support import (
    builtin_triage,  # noqa: F401 - autouse
    commit_faults,
    run_sweep_cli,
    sweep_file,
)

pytestmark = pytest.mark.real

RUNS = 5  # after the accepted one: each a pool actor, a twin and 2 to 4 trials (seconds)


@pytest.mark.parametrize("store_url", BOTH_REAL, indirect=True)  # git runs, on both
def test_an_overlapping_run_is_refused_and_recorded(store_url: str, tmp_path: Path) -> None:
    tree = tmp_path / "src"
    commit_faults(tree, 0.0, "first")
    path = sweep_file(tmp_path, tree)
    with Store.open(store_url) as db:
        running = Sweeps(db).start_run("nightly")  # another orchestrator's run, still going
    code, document = run_sweep_cli(path, store_url)
    assert code == 4, document
    assert document["status"] == "skipped"
    assert f"run {running.id}" in document["reason"]
    with Store.open(store_url) as db:
        runs = Sweeps(db).runs("nightly")
        assert [r.status for r in runs] == ["running", "skipped"]
        assert runs[1].campaign_id is None and "under way" in (runs[1].reason or "")
        assert db.list_campaigns() == []  # nothing started


def test_a_throughput_regression_is_found_and_confirmed(ray_cluster: None,
                                                        tmp_path: Path) -> None:
    store_url = str(tmp_path / "bisect.db")
    tree = tmp_path / "src"
    commit_faults(tree, 0.0, "first", background=False)
    watched = {"corruption": 0.15, "wedging": 0.15, "throughput": 0.3, "p99_latency": None}
    one = {"production": {"hicache": "off"}}
    # time on the twin's clock more than on the shared CPU's: 10 ms a decoded token
    path = sweep_file(tmp_path, tree, hunt=False, thresholds=watched, variants=one,
                      sessions=16, rounds=3,
                      extra_flags=[*FAST, "--twin-decode-ms-per-token", "10"])
    code, first = run_sweep_cli(path, store_url, "--accept")
    assert code == 0 and first["accepted"], first
    # the new build decodes 30 ms a token where it took 10: output tokens/s fall to about a
    # third (the last flag wins, as in argparse)
    data = yaml.safe_load(path.read_text())
    data["pools"][0]["services"][0]["start"] += ["--twin-decode-ms-per-token", "30"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    code, second = run_sweep_cli(path, store_url)
    assert code == 1, second
    production = second["variants"][0]
    assert production["state"] == "regression" and production["regressed"] == ["throughput"]
    throughput = production["confirmation"][0]
    assert throughput["change"] > 0.3 and throughput["answer"] == "different"
    assert "throughput" in second["reason"]
    assert second["commits"]["baseline"] == second["commits"]["now"]  # the build is the same
    (setting,) = second["changed_settings"]  # but a flag is not
    assert setting["service"] == "sglang-p" and setting["now"]["start"][-1] == "30"
    report = CliRunner().invoke(app, ["sweep-report", "nightly", "--store", store_url,
                                      "--format", "md"])
    assert report.exit_code == 0, report.output
    assert "service sglang-p" in report.stdout and "REGRESSION" in report.stdout


def test_an_unchanged_build_raises_no_alert_run_after_run(ray_cluster: None,
                                                          tmp_path: Path) -> None:
    """5 runs of an unchanged build on twins with a 1% background of leaks: not one alert.
    How rarely over many runs (the rate, with its interval): bench/sweep_twins.py, BENCHMARKS
    "Sweeps on twins"."""
    tree = tmp_path / "src"
    commit_faults(tree, 0.0, "first")
    # corruption noise is what this asks about: the figures of a shared CPU are not watched
    watched = {"corruption": 0.1, "wedging": 0.1, "throughput": None, "p99_latency": None}
    path = sweep_file(tmp_path, tree, hunt=False, thresholds=watched,
                      variants={"production": {"hicache": "off"}}, sessions=60,
                      trials={"min": 2, "max": 4, "confirm": 2}, extra_flags=list(FAST))
    store = tmp_path / "bisect.db"
    code, first = run_sweep_cli(path, store, "--accept")
    assert code == 0, first
    statuses = []
    for _ in range(RUNS):
        code, run = run_sweep_cli(path, store)
        statuses.append((code, run["status"], run.get("reason")))
    assert all(status != "regression" for _, status, _ in statuses), statuses
    # clean, not merely unsure (a clean run ends inconclusive about 1 time in 100 in
    # bench/sweeps.py's simulation, none of 40 times in bench/sweep_twins.py); the reasons
    # say which metric was left unsure (once 2 of 5 in a whole suite at load 3.5, 0 of 20
    # alone right after)
    assert sum(code == 0 for code, _, _ in statuses) >= RUNS - 1, statuses
    with Store.open(str(store)) as db:
        assert len(Sweeps(db).runs("nightly")) == 1 + RUNS


def own_ray_environment() -> dict[str, str]:
    """This environment less the test run's Ray (its address and token): each orchestrator
    starts its own, as on its own machine."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
            "BISECT_TRIAGE": "builtin"}


def test_two_orchestrators_share_one_postgresql_store(postgres_url: str,
                                                      tmp_path: Path) -> None:
    """Two `bisect sweep` processes at once, each its own sweep on its own pool and node, on one
    PostgreSQL store: neither blocks the other, both runs are stored whole."""
    started = []
    for name in ("east", "west"):
        home = tmp_path / name
        tree = home / "src"
        commit_faults(tree, 0.0, "first", background=False)
        path = sweep_file(home, tree, hunt=False, variants={"production": {"hicache": "off"}},
                          sessions=8, trials={"min": 2, "max": 2, "confirm": 2},
                          extra_flags=list(FAST))
        data = yaml.safe_load(path.read_text())
        data["name"] = name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        started.append(subprocess.Popen(
            [str(Path(sys.executable).with_name("bisect")), "sweep", str(path), "--store",
             postgres_url, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=home, env=own_ray_environment()))
    outputs = [process.communicate(timeout=300) for process in started]
    for process, (stdout, stderr) in zip(started, outputs, strict=True):
        assert process.returncode == 0, stderr[-2000:]
        assert json.loads(stdout)["status"] == "clean"
    with Store.open(postgres_url) as db:
        sweeps = Sweeps(db)
        assert {s.name for s in sweeps.list_sweeps()} == {"east", "west"}
        for name in ("east", "west"):
            (run,) = sweeps.runs(name)
            assert run.status == "clean" and run.campaign_id is not None
            assert len(db.trials(run.campaign_id)) == 2
