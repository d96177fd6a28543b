"""Faults on the way to the nodes: SSH through a fault proxy, and `tc` on the lab's veths.

The node is a lab host (a real sshd in a network namespace); its SSH connection goes through a
loopback fault proxy whose upstream is the host's address, or the host's veth gets a queueing
discipline. A fault that heals is an infrastructure failure of one trial, retried by the driver;
a node that stays unreachable fails the campaign with a message (exit 1), and once it is back
`bisect resume` takes the node again, finishes and leaves it as it was found.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.store import Store
from deploy.lab import Lab
from deploy.locks import LOCK_NAME
from deploy.transports.base import TransportError
from deploy.transports.factory import ssh_target
from deploy.transports.ssh import SSHTransport
from orchestrator.cli import app
from orchestrator.executor.driver import INFRA_ERROR, RunFailed, run_campaign
from tests.support.fault_campaigns import (
    TrialBench,
    corrupt_in,
    outcomes,
)
from tests.support.fault_proxy import FaultProxy, Toxic
from tests.support.lab_faults import both, lab_spec, proxied_node, start, when

pytestmark = pytest.mark.real



@pytest.fixture
def ssh_proxy(lab: Lab) -> Iterator[FaultProxy]:
    with FaultProxy((lab.host(1).address, 22), seed=2) as proxy:
        yield proxy


def run(db: Path, campaign_id: str, on: Callable[[str], None]) -> None:
    with Store.open(str(db)) as store:
        run_campaign(store, campaign_id, progress=on)


def host_is_clean(lab: Lab) -> None:
    workdir = Path(lab.host(1).workdir)
    assert not list(workdir.glob("*.pid")) and not (workdir / LOCK_NAME).exists()


def test_a_connection_dropped_mid_trial_is_an_infrastructure_failure_retried(
        lab: Lab, ssh_proxy: FaultProxy, tmp_path: Path, ray_cluster: None) -> None:
    db = tmp_path / "bisect.db"
    campaign_id = start(lab_spec(lab, tmp_path, proxied_node(lab, ssh_proxy, tmp_path)), db)
    # The node goes away while trial 1 runs and is back once the driver has seen the failure.
    run(db, campaign_id, both(when("trial 1 on", ssh_proxy.down),
                              when("FAILED", ssh_proxy.up)))
    with Store.open(str(db)) as store:
        trials = store.trials(campaign_id, status=None)
        failed = [t for t in trials if t.status == "failed"]
        done = [t for t in trials if t.status == "done"]
        assert len(failed) == 1 and (failed[0].error or "").startswith(INFRA_ERROR)
        assert failed[0].counts == {}  # nothing of the broken trial is evidence
        assert len(done) == 2 and all(t.counts == {"ok": 6} for t in done)
        assert store.get_campaign(campaign_id).status == "done"
        assert store.held_locks(campaign_id) == []
    assert ssh_proxy.stats.reset >= 1
    host_is_clean(lab)


def test_a_node_that_stays_unreachable_fails_the_run_and_is_restorable_after(
        lab: Lab, ssh_proxy: FaultProxy, tmp_path: Path, ray_cluster: None) -> None:
    db = tmp_path / "bisect.db"
    campaign_id = start(lab_spec(lab, tmp_path, proxied_node(lab, ssh_proxy, tmp_path)), db)
    with pytest.raises(RunFailed) as failed:
        run(db, campaign_id, when("trial 1 on", ssh_proxy.down))
    message = str(failed.value)
    assert "infrastructure failures" in message and f"bisect resume {campaign_id}" in message
    with Store.open(str(db)) as store:
        trials = store.trials(campaign_id, status=None)
        assert trials and all(t.status == "failed" and (t.error or "").startswith(INFRA_ERROR)
                              for t in trials)
        assert store.get_campaign(campaign_id).status == "failed"
    ssh_proxy.up()  # the heal: the node is back; the campaign goes on where it stopped
    resumed = CliRunner().invoke(app, ["resume", campaign_id, "--store", str(db), "--json"])
    assert resumed.exit_code in (0, 3), resumed.output  # a verdict (1 repeat: inconclusive)
    assert json.loads(resumed.stdout)["cost"]["trials"] == 2
    with Store.open(str(db)) as store:
        assert corrupt_in(store.trials(campaign_id)) == 0
        assert store.held_locks(campaign_id) == []
    host_is_clean(lab)


def test_a_command_that_hangs_on_the_way_times_out(lab: Lab, ssh_proxy: FaultProxy,
                                                   tmp_path: Path) -> None:
    from experiments.campaign import Node

    node = Node.model_validate(proxied_node(lab, ssh_proxy, tmp_path))
    transport = SSHTransport(ssh_target(node), backoff_s=(0.1,))
    try:
        assert transport.run(["echo", "up"]).stdout == "up\n"
        # The node's replies held back: the command fails (it never hangs) as a TransportError,
        # the infrastructure failure the driver retries.
        with ssh_proxy.toxic(Toxic("timeout", timeout_ms=0)), pytest.raises(TransportError):
            transport.run(["echo", "held"], timeout_s=2)
        assert transport.run(["echo", "healed"]).stdout == "healed\n"
    finally:
        transport.close()


def tc(lab: Lab, *args: str) -> None:
    host = lab.host(1)
    subprocess.run(lab.netns_exec(1, "tc", "qdisc", *args[:1], "dev", host.veth_ns, *args[1:]),
                   check=True, capture_output=True, timeout=30)


@pytest.fixture
def shaped(lab: Lab) -> Iterator[None]:
    """The lab host's veth throttled to 256 kbit/s with a short queue (tbf): every reply of its
    sshd and twin is slowed, and bursts beyond the queue are dropped and sent again by TCP.
    (netem's delay and loss need the sch_netem module, which this kernel lacks.)"""
    tc(lab, "add", "root", "tbf", "rate", "256kbit", "burst", "8kb", "latency", "50ms")
    try:
        yield
    finally:
        tc(lab, "del", "root")


def test_a_throttled_lossy_link_to_the_node_changes_no_outcome(
        lab: Lab, shaped: None, tmp_path: Path) -> None:
    bench = TrialBench(lab_spec(lab, tmp_path, lab.node(1, connect_timeout_s=5)), "pool-1")
    try:
        report = bench.run({"page": "p1"})  # deploy over SSH, stress, logs read back over SSH
        assert report.error is None and outcomes(report) == ["ok"] * 6
        assert any(row.kind == "startup" for row in report.logs)
    finally:
        bench.shutdown()
    host_is_clean(lab)


def test_a_node_whose_link_is_down_fails_the_run_with_a_message(lab: Lab, tmp_path: Path) -> None:
    host = lab.host(1)
    spec = lab_spec(lab, tmp_path, lab.node(1, connect_timeout_s=2))
    path = tmp_path / "campaign.yaml"
    path.write_text(json.dumps(spec))
    subprocess.run(lab.netns_exec(1, "ip", "link", "set", host.veth_ns, "down"), check=True)
    try:
        result = subprocess.run(
            [str(Path(sys.executable).parent / "bisect"), "run", str(path),
             "--store", str(tmp_path / "bisect.db")],
            capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run(lab.netns_exec(1, "ip", "link", "set", host.veth_ns, "up"), check=True)
    assert result.returncode == 1, result.stderr
    assert host.name in result.stderr and "Traceback" not in result.stderr
    host_is_clean(lab)
