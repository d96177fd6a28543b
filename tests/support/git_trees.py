"""Git trees for the tests of `bisect commits` and of changes that are commits: ``git`` in a
tree, a new empty tree, and a `commits` campaign over a tree whose commits carry a fault model."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from orchestrator.demo import twin_pool


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def new_tree(tree: Path) -> None:
    """An empty git tree whose commits are made by ``t``."""
    tree.mkdir()
    git(tree, "init", "-q", "-b", "main")
    git(tree, "config", "user.email", "t@example.invalid")
    git(tree, "config", "user.name", "t")


# The build step: fails, with its reason, in a commit that carries the file BROKEN.
BUILD = ["sh", "-c", "if [ -e BROKEN ]; then echo 'BROKEN: this commit does not build'; "
         "exit 1; fi"]


def commits_campaign(tmp_path: Path, tree: Path) -> Path:
    pool = twin_pool("p", "here", tree / "faults.yaml", latency_ms=2)
    # healthy as soon as it listens (the health wait is tested elsewhere): the search restarts
    # its twin at each commit it deploys (the last flag wins, as in argparse)
    pool["services"][0]["start"] += ["--twin-startup-delay", "0"]
    campaign: dict[str, Any] = {
        "name": "which commit",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [pool],
        "factors": [{"name": "hicache", "levels": {
            "off": {}, "on": {"flags": ["--enable-hierarchical-cache"]}}}],
        "workload": {"sessions": 24, "rounds": 2, "timeout_s": 20},
        "commits": {"tree": str(tree), "good": "main~11", "bad": "main",
                    "levels": {"hicache": "on"}, "build": BUILD},
    }
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(campaign))
    return path
