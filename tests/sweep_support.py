"""Sweeps on twins for the sweep tests: a git source tree whose fault model turns bad at a
commit, a sweep file over it, a helper that runs `bisect sweep` as a user does, and
``real_sweep``: three real runs of one sweep in one store, made once per test session for the
tests that read them (test_sweep_run.py, and the report of test_sweep_report.py)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.demo import twin_pool

# per-session fault draws at the twins: a 1% background (any variant), the race with HiCache
BACKGROUND = {"name": "background", "probability": 0.01, "effect": "leak", "markup": "dsml"}
# a commit subject that would run script or a template if a report did not escape it
HOSTILE_SUBJECT = "reuse the host pool <script>window.PWNED=1</script> ]]> {{ range(7) }} | *x*"


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
    # healthy as soon as it listens (the health wait is tested elsewhere): a sweep test restarts
    # its twin a dozen times (the last flag wins, as in argparse)
    pool["services"][0]["start"] += ["--twin-startup-delay", "0", *(extra_flags or [])]
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
    assert result.stdout.strip(), f"exit {result.exit_code}, no JSON: {result.stderr[-3000:]}"
    return result.exit_code, json.loads(result.stdout)


@dataclass(frozen=True)
class RealSweep:
    """Three runs of `bisect sweep` on twins, in one store: ``first`` with ``--accept`` (no
    baseline yet), ``second`` clean against it, ``third`` after three new commits (the second,
    ``bad``, brings the race back; the third, ``head``, has a hostile subject), run with
    ``-o page --accept``. Each run's exit code and JSON document as the command gave them."""

    home: Path  # the sweep file, its source tree and services
    tree: Path
    store: Path
    page: Path  # the third run's report
    good: str  # the commit of runs 1 and 2
    bad: str
    head: str
    codes: tuple[int, int, int]
    first: dict[str, Any]
    second: dict[str, Any]
    third: dict[str, Any]


def make_real_sweep(home: Path) -> RealSweep:
    tree = home / "src"
    good = commit_faults(tree, 0.0, "the fixed pool sizing")
    path, store = sweep_file(home, tree), home / "bisect.db"
    first_code, first = run_sweep_cli(path, store, "--accept")
    second_code, second = run_sweep_cli(path, store)
    commit_faults(tree, 0.0, "refactor the scheduler")
    bad = commit_faults(tree, 0.6, "reuse the host pool across requests")
    head = commit_faults(tree, 0.6, HOSTILE_SUBJECT)
    page = home / "reports" / "nightly.html"
    page.parent.mkdir()
    # --accept of a run that finds a regression is refused (without --force): this one run
    # proves that too, instead of a fourth run (its trials and its hunt) of the same build
    third_code, third = run_sweep_cli(path, store, "-o", str(page), "--accept")
    return RealSweep(home, tree, store, page, good, bad, head,
                     (first_code, second_code, third_code), first, second, third)


_REAL: list[RealSweep] = []


@pytest.fixture(scope="session", name="real_sweep")
def real_sweep_fixture(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> RealSweep:
    """Made once per test session (each run starts a pool actor and twins: seconds), however
    many modules import it; read-only for the tests that take it."""
    if not _REAL:
        with pytest.MonkeyPatch.context() as patch:  # as ``builtin_triage``, for the session
            patch.setenv("BISECT_TRIAGE", "builtin")
            _REAL.append(make_real_sweep(tmp_path_factory.mktemp("real-sweep")))
    return _REAL[0]
