"""The reaper kills its own driver's Ray and no other. Two drivers started from one script (or
one test run) share a process group, and the one that ended first used to kill the Ray the
other had started after it, and with its raylet that driver (seen as a test worker "not
properly terminated" under xdist). Stand-ins play Ray's processes: a raylet (its driver's
token file path in its environment), an agent under it (its environment overwritten, as Ray's
agents' reads once they rename themselves), and an agent whose raylet died with its driver."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy import procs
from orchestrator.executor.reaper import _kill_ray, _ray_processes

pytestmark = pytest.mark.real

PACKAGE = "/nonexistent/ray-package-of-this-test"  # in a stand-in's argv: "Ray's by path"
SLEEP = "import time; time.sleep(120)"
# A raylet: its agent starts under it without the token's path, and the raylet prints its pid.
RAYLET = ("import os, subprocess, sys, time; env = dict(os.environ); "
          "env.pop('RAY_AUTH_TOKEN_PATH'); "
          f"agent = subprocess.Popen([sys.executable, '-c', {SLEEP!r}, {PACKAGE!r}], env=env); "
          "print(agent.pid, flush=True); time.sleep(120)")


class Ray:
    """A driver's stand-in Ray: a raylet with its token file's path, an agent under it."""

    def __init__(self, token: Path, group: int) -> None:
        self.marker = f"RAY_AUTH_TOKEN_PATH={token}"
        self.raylet = subprocess.Popen([sys.executable, "-c", RAYLET, PACKAGE],
                                       stdout=subprocess.PIPE, text=True, process_group=group,
                                       env={**os.environ, "RAY_AUTH_TOKEN_PATH": str(token)})
        assert self.raylet.stdout is not None
        self.agent = int(self.raylet.stdout.readline())

    def stop(self) -> None:
        for pid in (self.agent, self.raylet.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        self.raylet.wait()


@dataclass
class Group:
    """The stand-ins' own process group (a sleeping leader's), as a driver's group: the test
    worker's own holds what earlier tests left, real Ray agents among them, which the rules
    rightly find too."""

    leader: subprocess.Popen[bytes]

    @property
    def id(self) -> int:
        return self.leader.pid


@pytest.fixture
def rays(tmp_path: Path) -> Iterator[tuple[Group, Ray, Ray, subprocess.Popen[bytes]]]:
    """Two drivers' Rays in one process group, and an agent of a third whose raylet is gone
    (no token file's path in its environment, its parent no Ray process)."""
    group = Group(subprocess.Popen([sys.executable, "-c", SLEEP], process_group=0))
    mine, theirs = Ray(tmp_path / "token-mine", group.id), Ray(tmp_path / "token-theirs", group.id)
    orphan = subprocess.Popen([sys.executable, "-c", SLEEP, PACKAGE], process_group=group.id,
                              env={k: v for k, v in os.environ.items()
                                   if k != "RAY_AUTH_TOKEN_PATH"})
    yield group, mine, theirs, orphan
    for process in (orphan, group.leader):
        process.kill()
        process.wait()
    mine.stop()
    theirs.stop()


def test_only_the_drivers_own_ray_is_found_and_killed(
        rays: tuple[Group, Ray, Ray, subprocess.Popen[bytes]]) -> None:
    leader, mine, theirs, orphan = rays
    group, after = leader.id, procs.start_time(leader.id)
    assert after is not None  # the leader runs
    assert {os.getpgid(pid) for pid in (mine.agent, theirs.agent, orphan.pid)} == {group}
    found = _ray_processes(group, after, PACKAGE.encode(), mine.marker.encode())
    # its raylet, the agent under it, and an agent left by a Ray that died in this group
    assert found == sorted([mine.raylet.pid, mine.agent, orphan.pid])
    # a token path that only begins like this driver's is another driver's
    assert _ray_processes(group, after, PACKAGE.encode(),
                          mine.marker.removesuffix("mine").encode()) == [orphan.pid]
    _kill_ray(group, after, PACKAGE, mine.marker)
    assert mine.raylet.wait(10) == -9 and orphan.wait(10) == -9
    assert procs.wait_gone(mine.agent, 10)
    assert theirs.raylet.poll() is None  # the other driver's Ray runs on, its agent too
    assert _ray_processes(group, after, PACKAGE.encode(), theirs.marker.encode()) == sorted(
        [theirs.raylet.pid, theirs.agent])
