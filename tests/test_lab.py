"""The lab itself: its layout and reachability, and that tearing it down (whole, half-built, or
stale from a run that died) leaves no namespace, interface or process behind."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.lab import Lab, LabError, lab_down, lab_status, lab_up
from deploy.lab import lab as lab_module
from deploy.lab.net import owned
from deploy.lab.registry import process_prefix
from deploy.services.base import ServiceConfig
from deploy.services.process import ProcessServiceManager
from deploy.transports.ssh import SSHTransport

pytestmark = pytest.mark.real

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root")


def leftovers(prefix: str, directory: Path) -> dict[str, list[str]]:
    """Everything of a lab that could survive it: namespaces, links, live processes."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if state != "Z" and str(directory) in cmdline:
            live.append(cmdline)
    stale_namespaces, stale_links = owned(prefix)
    return {"namespaces": stale_namespaces, "links": stale_links, "processes": live}


class HostMachine(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"host machine")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def bridge_server(lab: Lab) -> Iterator[str]:
    """An HTTP server on this machine's lab address, like a twin running outside the hosts."""
    server = http.server.ThreadingHTTPServer((lab.bridge_address, 0), HostMachine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{lab.bridge_address}:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_lab_layout_and_reachability(lab: Lab, bridge_server: str) -> None:
    described = json.loads(Path(lab.directory, "lab.json").read_text())
    assert described["state"] == "up" and len(described["hosts"]) == 2
    status = lab_status(lab.directory)
    assert status.state == "up" and all(h.reachable and h.sshd for h in status.hosts)
    for path in (lab.client_key, lab.known_hosts, lab.ssh_config):
        assert Path(path).is_file()
    one = SSHTransport(lab.target(1))
    try:
        fetch = ["python3", "-c", "import sys, urllib.request as u; "
                 "sys.stdout.write(u.urlopen(sys.argv[1], timeout=5).read().decode())"]
        assert one.run([*fetch, bridge_server]).check().stdout == "host machine"
        probe = ["python3", "-c", "import socket, sys; "
                 "socket.create_connection((sys.argv[1], 22), timeout=3).close()"]
        assert one.run([*probe, lab.host(2).address]).ok  # hosts reach each other
        # Only the lab network: no default route out of a host.
        routes = one.run(["ip", "-4", "route"]).check().stdout
        assert "default" not in routes and lab.subnet in routes
    finally:
        one.close()


@needs_root
def test_lab_down_leaves_nothing(tmp_path: Path) -> None:
    prefix = process_prefix("blw")
    made = lab_up(tmp_path, hosts=1, prefix=prefix)
    # A service started over SSH keeps running after the session: lab_down must end it too.
    manager = ProcessServiceManager(SSHTransport(made.target(1)), made.host(1).workdir)
    manager.start(ServiceConfig.of("sleeper", ["sleep", "300"], {"MARK": str(tmp_path)}))
    manager.transport.close()
    assert leftovers(prefix, tmp_path)["namespaces"] == [f"{prefix}-1"]
    lab_down(tmp_path)
    assert leftovers(prefix, tmp_path) == {"namespaces": [], "links": [], "processes": []}
    assert not any(sleep_marked(tmp_path))
    assert lab_status(tmp_path).state == "down"
    lab_down(tmp_path)  # idempotent
    assert json.loads((tmp_path / "lab.json").read_text())["state"] == "down"


def sleep_marked(directory: Path) -> Iterator[int]:
    """Live processes whose environment carries MARK=directory (the sleeper above)."""
    mark = f"MARK={directory}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in environ.read_bytes().split(b"\0"):
                state = (environ.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    yield int(environ.parent.name)
        except OSError:
            continue


@needs_root
def test_half_built_lab_is_torn_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = process_prefix("blx")
    real_start = lab_module.start_sshd
    calls: list[str] = []

    def start_then_fail(lab: Lab, host: object) -> object:
        calls.append("start")
        if len(calls) == 2:  # host 1 is up and running, host 2 fails
            raise LabError("injected failure")
        return real_start(lab, host)  # type: ignore[arg-type]

    monkeypatch.setattr(lab_module, "start_sshd", start_then_fail)
    with pytest.raises(LabError, match="injected failure"):
        lab_up(tmp_path, hosts=2, prefix=prefix)
    assert leftovers(prefix, tmp_path) == {"namespaces": [], "links": [], "processes": []}


@needs_root
def test_stale_lab_of_the_same_prefix_is_replaced(tmp_path: Path) -> None:
    prefix = process_prefix("bly")
    lab_up(tmp_path / "old", hosts=1, prefix=prefix)  # its builder "died": never torn down
    new = lab_up(tmp_path / "new", hosts=1, prefix=prefix)
    try:
        assert leftovers(prefix, tmp_path / "old")["processes"] == []
        assert lab_status(new.directory).state == "up"
        assert SSHTransport(new.target(1)).run(["true"]).ok
    finally:
        lab_down(tmp_path / "new")
    assert leftovers(prefix, tmp_path) == {"namespaces": [], "links": [], "processes": []}


@needs_root
def test_lab_of_a_dead_owner_is_reaped_by_the_next_lab_up(tmp_path: Path) -> None:
    owner = subprocess.Popen(["sleep", "60"])
    orphan_prefix = process_prefix("blz")
    lab_up(tmp_path / "orphan", hosts=1, prefix=orphan_prefix, owner_pid=owner.pid)
    next_prefix = process_prefix("blv")
    lab_up(tmp_path / "next", hosts=1, prefix=next_prefix)  # the owner is alive: left alone
    assert leftovers(orphan_prefix, tmp_path / "orphan")["namespaces"] == [f"{orphan_prefix}-1"]
    owner.kill()
    owner.wait()
    lab_up(tmp_path / "next", hosts=1, prefix=next_prefix)
    try:
        assert leftovers(orphan_prefix, tmp_path / "orphan") == {
            "namespaces": [], "links": [], "processes": []}
    finally:
        lab_down(tmp_path / "next")


@needs_root
def test_lab_needs_root(tmp_path: Path) -> None:
    """As an ordinary user, a sentence saying so (fork + setuid: this venv is root's own)."""
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        code = 5
        try:
            os.setgid(65534)
            os.setuid(65534)
            lab_up(tmp_path / "lab")
            code = 0
        except LabError as exc:
            code = 3 if str(exc).startswith("`lab up` needs root") else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 3
    assert not (tmp_path / "lab").exists()
