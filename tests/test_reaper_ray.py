"""The reaper kills its own driver's Ray and no other: two drivers started from one script (or
one test run) share a process group, and the one that ends first used to kill the Ray the other
had started after it, ending that driver with its raylet (seen as a test worker "not properly
terminated" under xdist)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy import procs
from orchestrator.executor.reaper import _kill_ray, _ray_processes

pytestmark = pytest.mark.real

PACKAGE = "/nonexistent/ray-package-of-this-test"  # in a stand-in's argv: "Ray's by path"


@pytest.fixture
def two_rays(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """Stand-ins for the processes of two drivers' Rays, in this test's process group, each
    with its driver's token file path in its environment."""
    started = [subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", PACKAGE],
        env={**os.environ, "RAY_AUTH_TOKEN_PATH": str(tmp_path / f"token-{name}")})
        for name in ("mine", "theirs")]
    yield started[0], started[1]
    for each in started:
        each.kill()
        each.wait()


def test_only_the_drivers_own_ray_is_found_and_killed(
        two_rays: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
        tmp_path: Path) -> None:
    mine, theirs = two_rays
    assert os.getpgid(mine.pid) == os.getpgid(theirs.pid) == os.getpgid(0)  # one group
    after = procs.start_time(os.getpid())
    marker = f"RAY_AUTH_TOKEN_PATH={tmp_path / 'token-mine'}"
    assert _ray_processes(after, PACKAGE.encode(), marker.encode()) == [mine.pid]
    # a token path that only begins like this driver's is another driver's
    assert _ray_processes(after, PACKAGE.encode(), marker.removesuffix("mine").encode()) == []
    _kill_ray(after, PACKAGE, marker)
    assert mine.wait(10) == -9
    assert theirs.poll() is None  # the other driver's Ray runs on
