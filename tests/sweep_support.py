"""Sweeps on twins for the sweep tests: a git source tree whose fault model turns bad at a
commit, a sweep file over it, and a helper that runs `bisect sweep` as a user does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.demo import twin_pool

# per-session fault draws at the twins: a 1% background (any variant), the race with HiCache
BACKGROUND = {"name": "background", "probability": 0.01, "effect": "leak", "markup": "dsml"}


@pytest.fixture(autouse=True)
def builtin_triage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leaks judged by the built-in parser (autouse where imported): these tests judge sweeps,
    not triage, and each run's new pool actor would import SGLang's detectors anew (seconds a
    run). The driver's setting travels to its actors (``load_generators.driver_settings``)."""
    monkeypatch.setenv("BISECT_TRIAGE", "builtin")


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def commit_faults(tree: Path, race: float, subject: str, background: bool = True) -> str:
    """Commit a fault model with the race at probability ``race``; its sha."""
    if not (tree / ".git").exists():
        tree.mkdir(parents=True, exist_ok=True)
        git(tree, "init", "-q", "-b", "main")
        git(tree, "config", "user.email", "t@example.invalid")
        git(tree, "config", "user.name", "t")
    rules = [{"name": "race", "when": {"flags": {"enable-hierarchical-cache": True}},
              "min_inflight": 1, "probability": race, "effect": "leak", "markup": "dsml"}]
    (tree / "faults.yaml").write_text(yaml.safe_dump(
        {"rules": [*([BACKGROUND] if background else []), *rules]}))
    (tree / "CHANGES").write_text(f"{subject}\n")
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", subject)
    return git(tree, "rev-parse", "HEAD")


def sweep_file(tmp_path: Path, tree: Path, *, hunt: bool = True, sessions: int = 24,
               thresholds: dict[str, Any] | None = None,
               variants: dict[str, dict[str, str]] | None = None,
               trials: dict[str, int] | None = None, latency_ms: float = 2, rounds: int = 1,
               extra_flags: list[str] | None = None) -> Path:
    pool = twin_pool("p", "here", tree / "faults.yaml", latency_ms=latency_ms)
    pool["services"][0]["start"] += extra_flags or []
    data: dict[str, Any] = {
        "name": "nightly",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [pool],
        "factors": [{"name": "hicache", "levels": {
            "off": None, "on": {"flags": ["--enable-hierarchical-cache"]}}}],
        "variants": variants or {"production": {"hicache": "off"},
                                 "hicache-on": {"hicache": "on"}},
        "workload": {"sessions": sessions, "rounds": rounds, "timeout_s": 20},
        "source": {"tree": str(tree)},
        "thresholds": thresholds or {"corruption": 0.15, "wedging": 0.15,
                                     "throughput": None, "p99_latency": None},
        "trials": trials or {"min": 3, "max": 6, "confirm": 2},
        **({"hunt": {"max_trials": 30}} if hunt else {}),
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_sweep_cli(path: Path, store: Path | str, *args: str) -> tuple[int, dict[str, Any]]:
    """`bisect sweep PATH --store STORE --json ARGS`: its exit code and its JSON document."""
    result = CliRunner().invoke(app, ["sweep", str(path), "--store", str(store), "--json",
                                      *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result.exit_code, json.loads(result.stdout)
