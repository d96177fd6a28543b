"""Two pools that run from one git tree on one host cannot take turns checking commits out there:
a build sweep's control (the baseline's commit) or a campaign's git level checked out for one
pool changes the files under the other pool's running server. Nothing serialises the two pools'
checkouts, so the file is refused at load: exit 2 from the CLI, a message naming both pools,
the host, the tree and what to do, no traceback, nothing stored or started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app

pytestmark = pytest.mark.pure

TREE = "/srv/sglang"


def pool(name: str, node: str, port: int) -> dict[str, Any]:
    return {"name": name, "endpoint": f"http://127.0.0.1:{port}", "services": [{
        "name": f"{name}-server", "node": node, "start": "python -m sglang.launch_server",
        "health_url": f"http://127.0.0.1:{port}/health"}]}


def ssh(name: str, host: str) -> dict[str, Any]:
    return {"name": name, "transport": "ssh", "host": host, "workdir": f"/var/tmp/{name}"}


def sweep(nodes: list[dict[str, Any]], pools: list[dict[str, Any]],
          **source: Any) -> dict[str, Any]:
    return {"name": "nightly", "nodes": nodes, "pools": pools,
            "factors": [{"name": "hicache", "levels": {
                "off": None, "on": {"flags": "--enable-hierarchical-cache"}}}],
            "variants": {"production": {"hicache": "off"}},
            "source": {"tree": TREE, **source}}


def written(tmp_path: Path, data: dict[str, Any], name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_sweep_whose_pools_share_its_tree_on_one_host_is_refused(tmp_path: Path) -> None:
    path = written(tmp_path, sweep([{"name": "gpu-a", "workdir": str(tmp_path / "services")}],
                                   [pool("left", "gpu-a", 30000), pool("right", "gpu-a", 30001)]))
    store = tmp_path / "bisect.db"
    result = CliRunner().invoke(app, ["sweep", str(path), "--store", str(store)])
    assert result.exit_code == 2, result.output
    message = result.stderr
    assert f"{path}:{line_of(path, 'tree: ' + TREE)}: source.tree: " in message, message
    assert "pools 'left' and 'right' both run services from the tree /srv/sglang" in message
    assert "on this machine (local transport) (node 'gpu-a')" in message
    assert "the baseline's commit (a control of a build that moved)" in message
    assert f"git -C {TREE} worktree add {TREE}-right HEAD" in message  # what to do
    assert "Traceback" not in result.output and result.stdout == ""
    assert not store.exists() and not (tmp_path / "services").exists()  # nothing half-done


def test_two_names_of_one_host_are_one_host(tmp_path: Path) -> None:
    nodes = [ssh("gpu-a", "10.0.0.5"), ssh("gpu-a-too", "10.0.0.5")]
    path = written(tmp_path, sweep(nodes, [pool("left", "gpu-a", 30000),
                                           pool("right", "gpu-a-too", 30001)]))
    result = CliRunner().invoke(app, ["sweep", str(path), "--check"])
    assert result.exit_code == 2, result.output
    assert "on host 10.0.0.5 (nodes 'gpu-a' and 'gpu-a-too')" in result.stderr


@pytest.mark.parametrize("case", ["two hosts", "one pool from the tree"])
def test_pools_on_their_own_hosts_or_trees_are_accepted(tmp_path: Path, case: str) -> None:
    if case == "two hosts":
        data = sweep([ssh("gpu-a", "10.0.0.5"), ssh("gpu-b", "10.0.0.6")],
                     [pool("left", "gpu-a", 30000), pool("right", "gpu-b", 30001)])
    else:  # the other pool's server does not run from the tree
        data = sweep([{"name": "gpu-a", "workdir": "/var/tmp/bisect"}],
                     [pool("left", "gpu-a", 30000), pool("right", "gpu-a", 30001)],
                     services=["left-server"])
    result = CliRunner().invoke(app, ["sweep", str(written(tmp_path, data)), "--check"])
    assert result.exit_code == 0, result.output
    assert "2 pool(s)" in result.output


def test_a_campaigns_git_level_shared_by_two_pools_is_refused(tmp_path: Path) -> None:
    data = {"name": "builds", "nodes": [{"name": "gpu-a", "workdir": str(tmp_path / "svc")}],
            "pools": [pool("left", "gpu-a", 30000), pool("right", "gpu-a", 30001)],
            "factors": [{"name": "build", "levels": {
                "current": None, "old": {"git": {"tree": TREE, "ref": "v0.4.0"}}}}],
            "known_good": {"build": "current"}, "known_bad": {"build": "old"}}
    path = written(tmp_path, data, "campaign.yaml")
    store = tmp_path / "bisect.db"
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(store)])
    assert result.exit_code == 2, result.output
    assert f"{path}:{line_of(path, 'tree: ' + TREE)}: factors[0].levels.old.git.tree: " in (
        result.stderr), result.stderr
    assert "pools 'left' and 'right' both run services from the tree /srv/sglang" in (
        result.stderr)
    assert "a trial of another commit" in result.stderr
    assert "Traceback" not in result.output
    assert not store.exists() and not (tmp_path / "svc").exists()
