"""`bisect commits`: the first bad commit of a real git range, deployed commit by commit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.demo import twin_pool


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def history(tree: Path, commits: int, first_bad: int) -> list[str]:
    """A tree whose fault model turns bad at commit ``first_bad`` (0 is the good one)."""
    tree.mkdir()
    git(tree, "init", "-q", "-b", "main")
    git(tree, "config", "user.email", "t@example.invalid")
    git(tree, "config", "user.name", "t")
    shas = []
    for index in range(commits):
        probability = 0.5 if index >= first_bad else 0.0
        (tree / "faults.yaml").write_text(yaml.safe_dump({"rules": [{
            "name": "race", "when": {"flags": {"enable-hierarchical-cache": True}},
            "min_inflight": 1, "probability": probability, "effect": "leak"}]}))
        (tree / "CHANGES").write_text(f"change {index}\n")
        git(tree, "add", "-A")
        git(tree, "commit", "-qm", f"change {index}")
        shas.append(git(tree, "rev-parse", "HEAD"))
    return shas


def test_commits_finds_the_first_bad_commit(ray_cluster: None, tmp_path: Path) -> None:
    tree = tmp_path / "src"
    shas = history(tree, commits=12, first_bad=7)
    campaign = {
        "name": "which commit",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", tree / "faults.yaml", latency_ms=2)],
        "factors": [{"name": "hicache", "levels": {
            "off": {}, "on": {"flags": ["--enable-hierarchical-cache"]}}}],
        "workload": {"sessions": 24, "rounds": 2, "timeout_s": 20},
        "commits": {"tree": str(tree), "good": "main~11", "bad": "main",
                    "levels": {"hicache": "on"}},
    }
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(campaign))
    db = tmp_path / "bisect.db"
    result = CliRunner().invoke(app, ["commits", str(path), "--good", shas[0], "--bad", shas[-1],
                                      "--store", str(db), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [{"commit": shas[7][:12]}]
    assert verdict["cost"]["trials"] < 12  # fewer trials than commits
    assert git(tree, "rev-parse", "HEAD") == shas[-1]  # the tree is left as found
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD") == "main"


def test_a_range_that_does_not_exist_is_bad_input(tmp_path: Path) -> None:
    tree = tmp_path / "src"
    history(tree, commits=2, first_bad=1)
    campaign = {
        "name": "no such range",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", tree / "faults.yaml")],
        "commits": {"tree": str(tree), "good": "main", "bad": "no-such-ref"},
    }
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(campaign))
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(tmp_path / "x.db")])
    assert result.exit_code == 2, result.output
    assert "no-such-ref" in result.stderr and "Traceback" not in result.output
