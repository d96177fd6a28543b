"""Each trial records each node's facts (a step named ``facts``, its service the node): host, GPU
model and driver, server version and build, the commit of the node's git tree. Read on the node
through its transport, over both transports (a whole campaign over SSH: test_ssh_campaign.py);
what a node lacks is None and the trial succeeds; no value reaches a shell unquoted."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from db.store import Store
from deploy.facts import gpus, node_facts, server_facts
from deploy.lab import Lab
from deploy.transports.local import LocalTransport
from deploy.transports.ssh import SSHTransport
from experiments.campaign import Campaign
from experiments.twin.server import VERSION
from orchestrator.demo import twin_pool
from orchestrator.executor.driver import run_campaign
from orchestrator.stored import create_campaign
from tests.changes_support import HOSTILE, make_repo, pwned

FACT_KEYS = {"host", "gpu", "driver", "server_version", "server_build", "commit"}
HOST = socket.gethostname()  # lab hosts are this machine in network namespaces: same UTS name
# The fake answers only the query bisect makes, so its arguments must arrive exactly.
FAKE_SMI = """#!/bin/sh
[ "$*" = "--query-gpu=name,driver_version --format=csv,noheader" ] || {
  echo "unexpected arguments: $*" >&2; exit 2; }
printf 'NVIDIA H200, 570.86.15\\nNVIDIA H200, 570.86.15\\n'
"""
FAKE_GPU, FAKE_DRIVER = "2 x NVIDIA H200", "570.86.15"
LOCAL_GPU = shutil.which("nvidia-smi") is not None  # none here nor in CI: the GPU is not here


@contextlib.contextmanager
def fake_gpu(lab: Lab, which: int, directory: Path) -> Iterator[None]:
    """A fake ``nvidia-smi`` on lab host ``which``'s PATH and on no other: the GPU is the one
    part of a node this machine lacks. Lab hosts share this machine's files, so the fake goes on
    a bind mount over /usr/local/sbin (first on sshd's PATH for root) in the mount namespace of
    that host's sshd alone: ``ip netns exec`` gave it its own, and the mount does not
    propagate back (the test's own machine, and other test runs, never see it)."""
    pid = lab.host(which).sshd_pid
    assert pid is not None and os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink(
        "/proc/self/ns/mnt")
    shown = directory / "gpu-bin"
    shown.mkdir()
    for entry in Path("/usr/local/sbin").iterdir():  # hide nothing the host had there
        (shown / entry.name).symlink_to(entry)
    smi = shown / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    inside = ["nsenter", "-t", str(pid), "-m"]
    subprocess.run([*inside, "mount", "--bind", str(shown), "/usr/local/sbin"], check=True)
    try:
        yield
    finally:
        subprocess.run([*inside, "umount", "/usr/local/sbin"], check=True)


def hostile_tree(directory: Path) -> Path:
    """A git tree whose path would run something if any layer let a shell parse it."""
    tree = directory / "src" / ("tree " + " ".join(h.format(dir=directory) for h in HOSTILE))
    tree.mkdir(parents=True)
    return tree


def facts_of(store: Store, campaign_id: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """(levels, {node: facts details}) of every trial."""
    steps = store.campaign_steps(campaign_id)
    rows = []
    for trial in store.trials(campaign_id, status=None):
        assert trial.status == "done", trial.error
        facts = [s for s in steps[trial.id] if s.name == "facts"]
        assert all(s.outcome == "ok" and set(s.details) >= FACT_KEYS for s in facts)
        rows.append((trial.levels, {str(s.service): s.details for s in facts}))
    return rows


@pytest.mark.pure
def test_the_answers_are_read_as_servers_and_nvidia_smi_give_them() -> None:
    assert server_facts({"version": "0.5.3", "tp_size": 8}) == ("0.5.3", None)
    assert server_facts({"version": "1.2", "build": "cu128 abc"}) == ("1.2", "cu128 abc")
    router = {"prefill": [{"url": "x", "error": "down"}, {"version": "0.5.3"}], "decode": []}
    assert server_facts(router) == ("0.5.3", None)
    assert server_facts(["not", "a", "dict"]) == server_facts({"version": 3}) == (None, None)
    assert gpus("NVIDIA H200, 570.86.15\nNVIDIA H200, 570.86.15\nNVIDIA L4, 570.86.15\n") == (
        "2 x NVIDIA H200 + NVIDIA L4", "570.86.15")
    assert gpus("No devices were found\n") == (None, None)


@pytest.mark.real
def test_facts_are_read_on_the_node_and_no_value_reaches_a_shell(lab: Lab,
                                                                 tmp_path: Path) -> None:
    tree = hostile_tree(tmp_path)
    head = make_repo(tree)[-1]
    missing = tmp_path / "no tree '; touch PWNED_m; '"
    ssh = SSHTransport(lab.target(1))
    try:
        with fake_gpu(lab, 1, tmp_path):
            remote = node_facts(ssh, tree=str(tree))
            absent = node_facts(ssh, tree=str(missing))
        bare = node_facts(ssh)  # the mount is gone: no nvidia-smi, no tree
        unsendable = node_facts(ssh, tree="/a\0b")
    finally:
        ssh.close()
    local = node_facts(LocalTransport("here"), tree=str(tree))
    assert (remote.host, remote.gpu, remote.driver) == (HOST, FAKE_GPU, FAKE_DRIVER)
    assert remote.commit == local.commit == head and remote.tree == str(tree)
    assert not remote.problems and local.host == HOST and (local.gpu is not None) == LOCAL_GPU
    assert absent.commit is None and absent.gpu == FAKE_GPU
    assert "cannot read the commit" in absent.problems[0] and "No such file" in absent.problems[0]
    assert (bare.gpu, bare.driver, bare.commit, bare.tree, bare.problems) == (
        None, None, None, None, ())
    # a NUL cannot be sent: the node's other facts still come
    assert unsendable.host == HOST and unsendable.commit is unsendable.tree is None
    assert "NUL" in unsendable.problems[0]
    assert not pwned(tmp_path) and not list(Path.cwd().glob("PWNED*"))


@pytest.mark.real
def test_a_local_campaign_records_each_trials_facts(ray_cluster: None, tmp_path: Path) -> None:
    tree = tmp_path / "src"
    old, new, _ = make_repo(tree)
    faults = tmp_path / "faults.yaml"
    faults.write_text("rules: []\n")
    campaign = Campaign.model_validate({
        "name": "facts",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", faults, latency_ms=1)],
        "factors": [{"name": "code", "levels": {"old": {"git": {"tree": str(tree), "ref": old}},
                                                "new": {"git": {"tree": str(tree), "ref": new}}}}],
        "workload": {"sessions": 2, "rounds": 1, "timeout_s": 10},
        "strategy": {"kind": "factorial", "repeats": 1},
    })
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "test")
        run_campaign(store, campaign_id)
        trials = facts_of(store, campaign_id)
    assert len(trials) == 2
    for levels, nodes in trials:
        facts = nodes["here"]
        assert facts["commit"] == (old if levels["code"] == "old" else new)  # the variant's
        assert (facts["host"], facts["server_version"], facts["server_build"]) == (
            HOST, VERSION, None)
        assert facts["tree"] == str(tree) and (facts["gpu"] is not None) == LOCAL_GPU
        assert facts["problems"] == []
