"""The lab fixtures: real SSH hosts (sshd in network namespaces) for the whole test run, and one
lab host that is a container with systemd as PID 1 (``systemd_lab``, reached as
``systemd_node``) shared by the tests of systemd units and of schedules.

conftest imports them (``from tests.lab_fixture import lab, systemd_lab, systemd_node``). One lab
of each kind per run, torn down at the end; a lab left behind by a killed run is torn down by the
next ``lab_up`` on this machine, and at once by the run's reaper (tests/support/reaper.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.lab import Lab, lab_down, lab_up
from deploy.lab.registry import process_prefix
from deploy.transports.ssh import SSHTransport
from tests.support import workers
from tests.support.reaper import reaper


def needs_root(reason: str) -> None:
    """Fail under CI (it runs as root: a skip there would hide a broken lab), skip elsewhere."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def _built(directory: Path, base: str, hosts: int, systemd: bool) -> Iterator[Lab]:
    # Names unique to this process (test runs may overlap on one machine: CI, a dev session,
    # xdist workers); owned by it, so a run that is killed has its lab reaped by the next one,
    # and at once by its reaper (told before anything exists: a kill halfway through lab_up too).
    prefix = process_prefix(base)
    reaper().send(lab=str(directory), prefix=prefix)
    built = lab_up(directory, hosts=hosts, systemd=systemd, prefix=prefix, owner_pid=os.getpid())
    try:
        yield built
    finally:
        lab_down(directory)
    reaper().send(lab_down=str(directory))  # torn down: nothing left for the reaper


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    needs_root("the SSH lab needs root: network namespaces, a bridge, sshd")
    workers.only_once(tmp_path_factory, "lab")
    yield from _built(tmp_path_factory.mktemp("lab"), "blt", hosts=2, systemd=False)


@pytest.fixture(scope="session")
def systemd_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One host, systemd 252 as its PID 1, for the tests that need a real systemd
    (test_systemd.py, test_schedule_systemd.py): each stops what it started."""
    needs_root("a systemd lab host needs root")
    workers.only_once(tmp_path_factory, "systemd_lab")
    yield from _built(tmp_path_factory.mktemp("sdlab"), "bsd", hosts=1, systemd=True)


@pytest.fixture(scope="session")
def systemd_node(systemd_lab: Lab) -> Iterator[SSHTransport]:
    """The systemd lab host over real SSH."""
    transport = SSHTransport(systemd_lab.target(1))
    yield transport
    transport.close()
