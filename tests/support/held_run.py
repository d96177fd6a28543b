"""Run by test_interrupted_run.py in a child pytest, never by the suite (no test_ prefix).

Its one test takes the real fixtures that start things outside the test process (the SSH lab,
the systemd lab host, a twin, the PostgreSQL server), writes what they started to the file
$BISECT_HELD names (atomically: its appearing is the event the parent waits for), then waits to
be stopped by a signal, and swallows the KeyboardInterrupt it raises; the next test must never
start."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from deploy.lab import Lab, systemd_host
from deploy.lab.registry import REGISTRY
from deploy.lab.sshd import start_time
from tests.conftest import TwinFactory
from tests.postgres_fixture import PostgresServer

# run as a child pytest by tests/test_interrupted_run.py, under the same tiers (conftest)
pytestmark = pytest.mark.real


def _process(pid: int) -> dict[str, Any]:
    return {"pid": pid, "start": start_time(pid)}


def _children_running(module: str) -> list[int]:
    """This process's children whose command line runs ``module``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and module.encode() in argv:
            found.append(int(stat.parent.name))
    return found


def _lab(lab: Lab) -> dict[str, Any]:
    processes = [_process(pid) for host in lab.hosts for pid in (host.sshd_pid, host.init_pid)
                 if pid is not None]
    return {
        "prefix": lab.prefix,
        "registry": str(REGISTRY / f"{lab.prefix}.json"),
        # by inode: a process that kept a namespace alive after its name went is found too
        "namespaces": {h.namespace: os.stat(f"/run/netns/{h.namespace}").st_ino
                       for h in lab.hosts},
        "processes": processes,
        "cgroups": [systemd_host.cgroup_of(h) for h in lab.hosts] if lab.systemd else [],
    }


def test_held_until_stopped(lab: Lab, systemd_lab: Lab, systemd_node: object,
                            twin: TwinFactory, postgres_server: PostgresServer) -> None:
    twin()
    postmaster = int((postgres_server.root / "data" / "postmaster.pid").read_text().split()[0])
    held = {
        "pytest": _process(os.getpid()),
        "reapers": [_process(pid) for pid in _children_running("tests.support.reaper")],
        "labs": [_lab(lab), _lab(systemd_lab)],
        "twins": [_process(pid) for pid in _children_running("experiments.twin")],
        "postgres": {**_process(postmaster), "root": str(postgres_server.root)},
        "lab_directories": [lab.directory, systemd_lab.directory],
    }
    path = Path(os.environ["BISECT_HELD"])
    path.with_suffix(".tmp").write_text(json.dumps(held))
    path.with_suffix(".tmp").rename(path)
    # The parent stops it within seconds. Its KeyboardInterrupt swallowed, as code under test
    # may (click's CliRunner): the run stops all the same.
    with contextlib.suppress(KeyboardInterrupt):
        time.sleep(120)


def test_never_reached() -> None:
    """After a signal, pytest runs no further test: this one says so if it ever starts."""
    Path(os.environ["BISECT_HELD"]).with_suffix(".reached").write_text("reached")
    time.sleep(120)
