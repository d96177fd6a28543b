"""Node locks on this machine and over SSH into the lab: one campaign per node, the holder
named, release and break only by name, hostile ids inert, and acquisition atomic under a race."""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy import locks
from deploy.locks import NodeLocked
from deploy.transports.base import Transport
from deploy.transports.local import LocalTransport
from deploy.transports.ssh import SSHTransport

pytestmark = pytest.mark.real

HOSTILE = [
    "'; touch {dir}/PWNED_q; '",
    "$(touch {dir}/PWNED_d)",
    "`touch {dir}/PWNED_b`",
    'a\nb"; touch {dir}/PWNED_n\n',
    "--flag=; rm -rf {dir}/keep & \\ \" * ~ %s",
]


@dataclass
class Node:
    transport: Transport
    workdir: str


@pytest.fixture(params=["local", "ssh"])
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Node]:
    transport: Transport
    if request.param == "ssh":
        lab = request.getfixturevalue("lab")
        transport = SSHTransport(lab.target(1))
        workdir = f"{lab.host(1).workdir}/locks-{tmp_path.name}/it's \"here\""
    else:
        transport, workdir = LocalTransport("local"), f"{tmp_path}/work dir/it's"
    yield Node(transport, workdir)
    transport.close()


def test_second_campaign_is_refused_with_the_holder_named(node: Node) -> None:
    t, w = node.transport, node.workdir
    assert locks.read(t, "gpu-a", w) is None
    before = time.time()
    locks.acquire(t, "gpu-a", w, "20250101-120000-ab12")
    held = locks.read(t, "gpu-a", w)
    assert held is not None and held.campaign_id == "20250101-120000-ab12"
    assert before <= held.since <= time.time() and held.pid > 0 and held.host
    with pytest.raises(NodeLocked) as caught:
        locks.acquire(t, "gpu-a", w, "20250102-090000-cd34")
    refused = caught.value
    assert (refused.node, refused.holder, refused.since) == ("gpu-a", held.campaign_id,
                                                             held.since)
    assert str(refused).startswith(
        f"node gpu-a is locked by campaign 20250101-120000-ab12 (driver pid {held.pid} on "
        f"{held.host}, since ")
    assert str(refused).endswith("a node runs one campaign at a time. If that campaign's "
                                 "driver is gone, break the lock with `bisect unlock "
                                 "CAMPAIGN.yaml gpu-a --holder 20250101-120000-ab12`")
    # The same campaign is refused too (a lock outlives its driver) unless it reclaims it.
    with pytest.raises(NodeLocked):
        locks.acquire(t, "gpu-a", w, "20250101-120000-ab12")
    locks.acquire(t, "gpu-a", w, "20250101-120000-ab12", reclaim=True)
    reclaimed = locks.read(t, "gpu-a", w)
    assert reclaimed is not None and reclaimed.since >= held.since


def test_release_then_acquire_and_release_only_by_the_holder(node: Node) -> None:
    t, w = node.transport, node.workdir
    assert locks.release(t, "gpu-a", w, "first") is False  # nothing to release
    locks.acquire(t, "gpu-a", w, "first")
    with pytest.raises(NodeLocked, match=r"locked by campaign first .*, not by campaign second: "
                                         r"not released"):
        locks.release(t, "gpu-a", w, "second")
    assert locks.release(t, "gpu-a", w, "first") is True
    assert locks.read(t, "gpu-a", w) is None
    locks.acquire(t, "gpu-a", w, "second")
    info = locks.read(t, "gpu-a", w)
    assert info is not None and info.campaign_id == "second"
    locks.release(t, "gpu-a", w, "second")


def test_break_removes_only_the_named_holders_lock(node: Node) -> None:
    t, w = node.transport, node.workdir
    assert locks.break_lock(t, "gpu-a", w, "dead") is None
    locks.acquire(t, "gpu-a", w, "dead")
    with pytest.raises(NodeLocked, match=r"locked by campaign dead .*, not by campaign alive: "
                                         r"not broken"):
        locks.break_lock(t, "gpu-a", w, "alive")
    broken = locks.break_lock(t, "gpu-a", w, "dead")
    assert broken is not None and broken.campaign_id == "dead"
    locks.acquire(t, "gpu-a", w, "alive")
    locks.release(t, "gpu-a", w, "alive")


def test_hostile_campaign_ids_stay_data(node: Node, tmp_path: Path) -> None:
    t, w = node.transport, node.workdir
    (tmp_path / "keep").mkdir()
    for template in HOSTILE:
        campaign = template.format(dir=tmp_path)
        locks.acquire(t, "gpu-a", w, campaign)
        with pytest.raises(NodeLocked) as caught:
            locks.acquire(t, "gpu-a", w, "other")
        assert caught.value.holder == campaign
        assert f"--holder {shlex.quote(campaign)}`" in str(caught.value)
        broken = locks.break_lock(t, "gpu-a", w, campaign)
        assert broken == caught.value.info and broken.campaign_id == campaign
    assert locks.read(t, "gpu-a", w) is None
    assert not list(tmp_path.glob("PWNED*")) and (tmp_path / "keep").is_dir()


def test_racing_campaigns_get_exactly_one_winner(tmp_path: Path) -> None:
    transport, workdir = LocalTransport("gpu-a"), str(tmp_path)
    winners: list[str] = []
    losers: list[str] = []
    start = threading.Barrier(8)

    def contend(campaign: str) -> None:
        start.wait()
        try:
            locks.acquire(transport, "gpu-a", workdir, campaign)
            winners.append(campaign)
        except NodeLocked as exc:
            losers.append(exc.holder)

    threads = [threading.Thread(target=contend, args=(f"c{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1 and losers == [winners[0]] * 7  # every loser names the winner
    assert [p.name for p in tmp_path.iterdir()] == [locks.LOCK_NAME]  # no temporary left
