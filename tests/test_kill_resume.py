"""SIGKILL of the driver at fixed points, then `bisect resume`: nothing left running after the
kill (the reaper), and the resume ends as an uninterrupted run would (bench/kill_points.py does
the same at many random points)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy import locks, procs
from deploy.lab import Lab
from deploy.locks import NodeLocked
from deploy.services.base import ServiceConfig
from deploy.services.process import ProcessServiceManager
from deploy.transports.factory import transport_for
from deploy.transports.local import LocalTransport
from experiments.campaign import Campaign
from orchestrator.lab_campaign import lab_campaign
from tests.conftest import REPO
from tests.support.kill_points import (
    CULPRIT,
    Bench,
    kill,
    no_leftovers,
    problems_after_resume,
    wait_until,
)

pytestmark = pytest.mark.real


def _before_the_first_trial(bench: Bench) -> bool:  # locks held, preflight or Ray starting
    return (bench.services / ".bisect.lock").exists() and not bench.trials()


def _mid_stress(bench: Bench) -> bool:
    return bench.phase() == "stress"


def _restarting_a_later_trial(bench: Bench) -> bool:  # after a trial that finished
    states = bench.trials()
    return (any(status == "done" for _, status in states) and states[-1][1] == "running"
            and bench.phase() in ("deploy", "restart, proof"))


# In the order one campaign passes them: the run is killed at the first, each resume at the
# next, and the last resume runs to the end (one campaign, four drivers, where a campaign a
# point took six: a resume that is killed and resumed again is part of what is tested).
POINTS = [("before the first trial", _before_the_first_trial), ("mid-stress", _mid_stress),
          ("restarting a later trial", _restarting_a_later_trial)]


def test_sigkill_at_each_point_then_resume(tmp_path: Path) -> None:
    bench = Bench.make(tmp_path, sessions=12)
    try:
        killed_at: list[tuple[int, str]] = []  # every kill's trials, as they were
        campaign_id = ""
        for name, point in POINTS:
            driver = bench.resuming(campaign_id) if campaign_id else bench.run()
            killed_at += _kill_at(bench, driver, name, point, {seq for seq, _ in killed_at})
            [campaign_id] = bench.campaign_ids()
        resumed, resume_pid = bench.resume(campaign_id)
        assert problems_after_resume(bench, killed_at, resumed, CULPRIT) == []
        assert no_leftovers(bench.marker, resume_pid) == []
    finally:
        bench.close()


def _kill_at(bench: Bench, driver: subprocess.Popen[bytes], name: str,
             point: Callable[[Bench], bool], seen: set[int]) -> list[tuple[int, str]]:
    """Kill ``driver`` once ``point`` holds in a trial of its own (not one an earlier kill left
    running: ``seen``); the trials then. The reaper: no twin, Ray agent or worker of the dead
    driver runs on."""
    def reached() -> bool:
        states = bench.trials()
        return (not states or states[-1][0] not in seen) and point(bench)

    try:
        reached_it = wait_until(reached, driver, timeout_s=120)
        assert reached_it, (f"{name}: " + driver.communicate()[1].decode()[-2000:]
                         if driver.poll() is not None else f"{name}: never reached")
    finally:
        kill(driver)
    killed_at = bench.trials()
    assert no_leftovers(bench.marker, driver.pid) == [], name
    return killed_at


def test_a_lock_is_taken_over_only_once_its_driver_and_reaper_are_gone(tmp_path: Path) -> None:
    transport, workdir = LocalTransport("here"), str(tmp_path)
    driver, reaper = subprocess.Popen(["sleep", "600"]), subprocess.Popen(["sleep", "600"])
    try:
        record = {"campaign": "c1", "pid": driver.pid, "host": socket.gethostname(),
                  "since": time.time(), "reaper": reaper.pid}
        Path(locks.lock_path(workdir)).write_text(json.dumps(record) + "\n")
        with pytest.raises(NodeLocked):  # its driver runs: a second driver of c1 is refused
            locks.acquire(transport, "here", workdir, "c1", reclaim=True)
        with pytest.raises(NodeLocked):  # another campaign, whatever the state of c1's driver
            locks.acquire(transport, "here", workdir, "c2", reclaim=True)
        driver.kill()
        driver.wait()
        # Driver gone, reaper still stopping services: waited for, then the lock is taken.
        waiter = threading.Timer(0.5, reaper.kill)
        waiter.start()
        locks.acquire(transport, "here", workdir, "c1", reclaim=True)
        waiter.join()
    finally:
        for sleeper in (driver, reaper):
            sleeper.kill()
            sleeper.wait()
    held = locks.read(transport, "here", workdir)
    assert held is not None and (held.campaign_id, held.pid) == ("c1", os.getpid())
    # Held on another host: nobody here can tell its driver is dead; `bisect unlock` can.
    Path(locks.lock_path(workdir)).write_text(json.dumps({**record, "host": "elsewhere"}) + "\n")
    with pytest.raises(NodeLocked, match="bisect unlock"):
        locks.acquire(transport, "here", workdir, "c1", reclaim=True)


# A driver that starts a reaper, writes its pid, and waits to be killed.
_DRIVER = """
import sys, time
from experiments.campaign import Campaign
from orchestrator.executor.reaper import Reaper
reaper = Reaper(Campaign.model_validate_json(sys.stdin.read()))
print(reaper.pid, flush=True)
time.sleep(600)
"""


def test_the_reaper_of_a_killed_driver_stops_its_services_on_ssh_nodes(
        lab: Lab, tmp_path: Path) -> None:
    campaign = Campaign.model_validate(lab_campaign(lab, tmp_path / "faults.yaml"))
    service = campaign.pools[0].services[0]
    node = next(n for n in campaign.nodes if n.name == service.node)
    transport = transport_for(node)
    manager = ProcessServiceManager(transport, node.workdir)
    try:
        manager.start(ServiceConfig.of(service.name, ["sleep", "600"], {}))
        assert manager.is_running(service.name)
        driver = subprocess.Popen([sys.executable, "-c", _DRIVER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, cwd=REPO, text=True)
        assert driver.stdin is not None and driver.stdout is not None
        driver.stdin.write(campaign.model_dump_json())
        driver.stdin.close()
        reaper_pid = int(driver.stdout.readline())
        assert manager.is_running(service.name)  # the reaper waits while its driver lives
        kill(driver)
        assert procs.wait_gone(reaper_pid, 60)
        assert not manager.is_running(service.name)  # stopped over SSH, no resume needed
    finally:
        manager.stop(service.name)
        transport.close()
