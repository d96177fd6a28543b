"""The ``lab`` fixture: real SSH hosts (sshd in network namespaces) for the whole test run.

conftest imports it (``from tests.lab_fixture import lab``). One lab per run, torn down at the
end; a lab left behind by a killed run is torn down by the next ``lab_up`` on this machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from deploy.lab import Lab, lab_down, lab_up
from deploy.lab.registry import process_prefix


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if os.geteuid() != 0:
        reason = "the SSH lab needs root: network namespaces, a bridge, sshd"
        if os.environ.get("CI"):
            pytest.fail(reason)  # CI runs as root: a skip there would hide a broken lab
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("lab")
    # Names unique to this process (test runs may overlap on one machine: CI, a dev session,
    # xdist workers); owned by it, so a run that is killed has its lab reaped by the next one.
    built = lab_up(directory, hosts=2, prefix=process_prefix("blt"), owner_pid=os.getpid())
    try:
        yield built
    finally:
        lab_down(directory)
