"""Levels that change files on the node: git refs and patches, through a whole campaign.

The twin reads its fault model from a file of a git tree: checking out another commit or
applying a patch changes how it corrupts sessions, as a code change does on a real node."""

from __future__ import annotations

import difflib
import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from db.store import Store
from deploy.changes.patch import FilePatch
from deploy.transports.local import LocalTransport
from experiments.campaign import Campaign
from orchestrator.core.verdict import Status
from orchestrator.demo import twin_pool
from orchestrator.executor.driver import run_campaign
from orchestrator.stored import create_campaign

pytestmark = pytest.mark.real


def model(probability: float) -> str:
    return yaml.safe_dump({"rules": [{
        "name": "race", "when": {"flags": {"enable-hierarchical-cache": True}},
        "min_inflight": 1, "probability": probability, "effect": "leak"}]})


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def source_tree(tmp_path: Path) -> tuple[Path, str, str]:
    tree = tmp_path / "src"
    tree.mkdir()
    git(tree, "init", "-q", "-b", "main")
    git(tree, "config", "user.email", "t@example.invalid")
    git(tree, "config", "user.name", "t")
    (tree / "faults.yaml").write_text(model(0.0))
    git(tree, "add", "faults.yaml")
    git(tree, "commit", "-qm", "good")
    good = git(tree, "rev-parse", "HEAD")
    (tree / "faults.yaml").write_text(model(0.5))
    git(tree, "commit", "-qam", "the regression")
    return tree, good, git(tree, "rev-parse", "HEAD")


def campaign_of(tmp_path: Path, tree: Path, factors: list[dict[str, Any]],
                good: dict[str, str], bad: dict[str, str]) -> Campaign:
    return Campaign.model_validate({
        "name": "source changes",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", tree / "faults.yaml", latency_ms=2)],
        "factors": [*factors, {"name": "hicache", "levels": {
            "off": {}, "on": {"flags": ["--enable-hierarchical-cache"]}}}],
        "workload": {"sessions": 24, "rounds": 2, "timeout_s": 20},
        "known_good": good, "known_bad": bad,
    })


def run(tmp_path: Path, campaign: Campaign, said: list[str] | None = None) -> dict[str, Any]:
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "test")
        progress = said.append if said is not None else (lambda _: None)
        return run_campaign(store, campaign_id, progress=progress).to_json()


def test_git_refs_find_the_commit_and_the_tree_is_left_as_found(ray_cluster: None,
                                                                  tmp_path: Path) -> None:
    tree, good, bad = source_tree(tmp_path)
    (tree / "__pycache__").mkdir()  # stale bytecode must not survive a checkout
    (tree / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"stale")
    git(tree, "checkout", "-q", "main")
    factors = [{"name": "build", "levels": {
        "good": {"git": {"tree": str(tree), "ref": good}},
        "bad": {"git": {"tree": str(tree), "ref": bad}}}}]
    known = {"build": "good", "hicache": "on"}, {"build": "bad", "hicache": "on"}
    verdict = run(tmp_path, campaign_of(tmp_path, tree, factors, *known))
    assert verdict["status"] == Status.CULPRIT
    assert [c["factors"] for c in verdict["culprits"]] == [{"build": "bad", "hicache": "on"}]
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD") == "main"  # the branch, restored
    assert git(tree, "rev-parse", "HEAD") == bad
    assert git(tree, "status", "--porcelain") == ""
    assert not (tree / "__pycache__").exists()


def test_a_patch_that_fixes_it_is_named_and_reverted_byte_for_byte(ray_cluster: None,
                                                                    tmp_path: Path) -> None:
    tree, _, _ = source_tree(tmp_path)
    before = hashlib.sha256((tree / "faults.yaml").read_bytes()).hexdigest()
    fix = "".join(difflib.unified_diff(model(0.5).splitlines(keepends=True),
                                       model(0.0).splitlines(keepends=True),
                                       "a/faults.yaml", "b/faults.yaml"))
    factors = [{"name": "fix", "levels": {
        "none": {}, "applied": {"patch": [{"root": str(tree), "diff": fix}]}}}]
    good, bad = {"fix": "applied", "hicache": "on"}, {"fix": "none", "hicache": "on"}
    # A driver killed mid-campaign left the patch applied: the next run must undo it first.
    FilePatch(fix, str(tree), str(tmp_path / "services")).apply(LocalTransport("here"))
    assert hashlib.sha256((tree / "faults.yaml").read_bytes()).hexdigest() != before
    said: list[str] = []
    verdict = run(tmp_path, campaign_of(tmp_path, tree, factors, good, bad), said)
    assert any("undid what an interrupted run left" in line for line in said)
    assert verdict["status"] == Status.CULPRIT
    assert [c["factors"] for c in verdict["culprits"]] == [{"fix": "none", "hicache": "on"}]
    after = hashlib.sha256((tree / "faults.yaml").read_bytes()).hexdigest()
    assert after == before
