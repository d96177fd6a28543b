"""The lab keeps its traffic inside: no probe of a lab address once its host is gone, and a probe
that can leave through the lab's bridge only, even if the bridge vanishes under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploy.lab import lab_down, lab_status, lab_up
from deploy.lab.registry import process_prefix
from orchestrator.cli import app
from tests.conftest import REPO
from tests.support import network

pytestmark = pytest.mark.real

needs_root = pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"),
                                reason="network namespaces need root")


@needs_root
def test_status_of_a_lab_that_is_down_sends_no_packet(tmp_path: Path) -> None:
    made = lab_up(tmp_path, hosts=2, prefix=process_prefix("blp"))
    with network.attempts() as up_probes:
        assert lab_status(tmp_path).state == "up"
    # Up, the probe goes to the lab's hosts only, each bound to the lab's bridge.
    assert {(a.host, a.port, a.device) for a in up_probes} == {
        (h.address, 22, made.bridge) for h in made.hosts}
    lab_down(tmp_path)
    with network.attempts() as down_probes:
        status = lab_status(tmp_path)
        shown = CliRunner().invoke(app, ["lab", "status", "--dir", str(tmp_path), "--json"])
        printed = CliRunner().invoke(app, ["lab", "status", "--dir", str(tmp_path)])
    assert down_probes == []  # not one connection attempt, allowed or not
    assert status.state == "down" and not any(h.reachable or h.namespace for h in status.hosts)
    assert shown.exit_code == 0, shown.output
    as_json = json.loads(shown.stdout)
    assert as_json["state"] == "down" and not any(h["reachable"] for h in as_json["hosts"])
    assert "port 22 ok" not in printed.stdout and "port 22 MISSING" in printed.stdout


def _ip(*args: str, namespace: str | None = None) -> str:
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def _received(namespace: str, device: str) -> int:
    [link] = json.loads(_ip("-s", "-j", "link", "show", device, namespace=namespace))
    return int(link["stats64"]["rx"]["packets"])


@pytest.fixture
def machine_with_an_uplink() -> Iterator[tuple[str, str]]:
    """A namespace standing in for this machine: a default route through a veth to a second
    namespace (the "network outside", whose received packets we count) and a lab bridge."""
    prefix = process_prefix("blu")
    machine, outside = f"{prefix}-m", f"{prefix}-o"
    try:
        for namespace in (machine, outside):
            _ip("netns", "add", namespace)
            for knob in ("all", "default"):  # no IPv6 chatter on the links: only our packets
                subprocess.run(["ip", "netns", "exec", namespace, "sysctl", "-qw",
                                f"net.ipv6.conf.{knob}.disable_ipv6=1"], check=True)
        _ip("link", "add", "up0", "type", "veth", "peer", "name", "gw0", "netns", outside,
            namespace=machine)
        _ip("addr", "add", "198.18.0.2/30", "dev", "up0", namespace=machine)
        _ip("addr", "add", "198.18.0.1/30", "dev", "gw0", namespace=outside)
        _ip("link", "set", "up0", "up", namespace=machine)
        _ip("link", "set", "gw0", "up", namespace=outside)
        _ip("route", "add", "default", "via", "198.18.0.1", namespace=machine)
        _ip("link", "add", "labbr", "type", "bridge", namespace=machine)
        _ip("addr", "add", "10.231.251.1/24", "dev", "labbr", namespace=machine)
        _ip("link", "set", "labbr", "up", namespace=machine)
        yield machine, outside
    finally:
        for namespace in (machine, outside):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)


# Inside the machine's namespace: a socket made before the bridge goes, connected after.
_RACE = """
import socket, subprocess, sys
from deploy.lab.probe import bound_socket
bound = sys.argv[1] == "bound"
sock = bound_socket("labbr", 0.5) if bound else socket.create_connection
subprocess.run(["ip", "link", "del", "labbr"], check=False, capture_output=True)
try:
    if bound:
        sock.connect(("10.231.251.7", 22))
    else:
        sock(("10.231.251.7", 22), timeout=0.5)
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""


def _race(machine: str, mode: str) -> str:
    done = subprocess.run(["ip", "netns", "exec", machine, sys.executable, "-c", _RACE, mode],
                          capture_output=True, text=True, cwd=REPO, check=True)
    return done.stdout.strip()


@needs_root
def test_a_probe_bound_to_the_bridge_never_takes_the_default_route(
        machine_with_an_uplink: tuple[str, str]) -> None:
    machine, outside = machine_with_an_uplink
    before = _received(outside, "gw0")
    assert _race(machine, "bound") != "connected"
    assert _received(outside, "gw0") == before  # the bridge vanished: nothing went out
    # The same connect unbound, as the lab's status probe used to make it, leaves through the
    # default route: the count above would have seen it.
    assert _race(machine, "plain") != "connected"
    assert _received(outside, "gw0") > before
