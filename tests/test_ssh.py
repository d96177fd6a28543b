"""The SSH transport against real sshd daemons in network namespaces (the ``lab`` fixture):
quoting, services over SSH, host-key policies, auth and reachability errors, ProxyJump through an
ssh_config alias, reconnection after a drop, timeouts. Plus the Node model's SSH fields."""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from deploy.health import wait_healthy
from deploy.lab import Lab, restart_sshd
from deploy.lab.sshd import public_key, write_keypair
from deploy.services.base import ServiceConfig
from deploy.services.process import ProcessServiceManager
from deploy.transports.base import TransportError
from deploy.transports.factory import Transports, transport_for
from deploy.transports.local import LocalTransport
from deploy.transports.ssh import SSHTransport
from deploy.transports.ssh_config import HostKeyPolicy, SSHTarget
from experiments.campaign import Node

NASTY = [
    "'; touch {dir}/PWNED_q; '",
    "$(touch {dir}/PWNED_d)",
    "`touch {dir}/PWNED_b`",
    "a\nb; touch {dir}/PWNED_n\n",
    "two words \"double\" 'single' \\back $HOME * ~ %s",
    "--flag=; rm -rf {dir}/keep &",
]


def source_of(transport: SSHTransport) -> tuple[str, str]:
    """The client address and port the node sees for this transport's connection."""
    words = transport.run(["sh", "-c", "echo $SSH_CONNECTION"]).check().stdout.split()
    return words[0], words[1]


@pytest.mark.real
def test_exec_returns_stdout_stderr_and_exit_status(lab: Lab) -> None:
    with_ssh = SSHTransport(lab.target(1))
    try:
        result = with_ssh.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
        assert (result.returncode, result.stdout, result.stderr) == (7, "out\n", "err\n")
        assert with_ssh.run(["hostname", "-I"]).check().stdout.split() == [lab.host(1).address]
        big = with_ssh.run(["head", "-c", "300000", "/dev/zero"]).check().stdout
        assert len(big) == 300000  # more than one channel window: flow control works
    finally:
        with_ssh.close()


@pytest.mark.real
def test_values_arrive_verbatim_and_nothing_runs(lab: Lab, tmp_path: Path) -> None:
    transport = SSHTransport(lab.target(1))
    try:
        for template in NASTY:
            value = template.format(dir=tmp_path)
            assert transport.run(["printf", "%s", value]).check().stdout == value
            script = transport.run(["sh", "-c", 'printf %s "$1"', "sh", value]).check().stdout
            assert script == value
        (tmp_path / "keep").mkdir(exist_ok=True)
        assert not list(tmp_path.glob("PWNED*")) and (tmp_path / "keep").is_dir()
    finally:
        transport.close()


@pytest.mark.real
def test_service_over_ssh_runs_in_the_host_and_is_reachable(lab: Lab, tmp_path: Path) -> None:
    host = lab.host(1)
    (tmp_path / "index.txt").write_text("served from the lab\n")
    manager = ProcessServiceManager(SSHTransport(lab.target(1)), f"{host.workdir}/http")
    port = 18080  # the namespace has its own ports: no clash with this machine's
    nasty = NASTY[0].format(dir=tmp_path)
    config = ServiceConfig.of(
        "http", ["python3", "-m", "http.server", "--bind", host.address, str(port),
                 "--directory", str(tmp_path)], {"BISECT_VALUE": nasty})
    started = manager.start(config)
    try:
        url = f"http://{host.address}:{port}"
        wait_healthy(f"{url}/index.txt", 15, alive=lambda: manager.is_running("http"))
        with urllib.request.urlopen(f"{url}/index.txt", timeout=5) as response:
            assert response.read() == b"served from the lab\n"
        # It runs inside the host's namespace, with the environment exactly as given.
        netns = os.readlink(f"/proc/{started.pid}/ns/net")
        assert netns == f"net:[{os.stat(f'/run/netns/{host.namespace}').st_ino}]"
        environ = Path(f"/proc/{started.pid}/environ").read_bytes().split(b"\0")
        assert f"BISECT_VALUE={nasty}".encode() in environ
    finally:
        manager.stop("http")
    assert not manager.is_running("http")
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{host.address}:{port}/", timeout=2)
    assert not list(tmp_path.glob("PWNED*"))
    manager.transport.close()


@pytest.mark.real
def test_unknown_host_key_is_refused_under_strict(lab: Lab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    transport = SSHTransport(lab.target(1, known_hosts=str(known), node="gpu-a"))
    with pytest.raises(TransportError, match=r"^gpu-a: host key of .* is unknown") as caught:
        transport.run(["true"])
    assert "accept_new" in str(caught.value) and known.read_text() == ""


@pytest.mark.real
def test_accept_new_records_the_key_then_strict_accepts_it(lab: Lab, tmp_path: Path) -> None:
    known = tmp_path / "sub" / "known_hosts"  # missing, like a fresh ~/.ssh
    first = SSHTransport(lab.target(2, known_hosts=str(known), host_key_policy="accept_new"))
    assert first.run(["echo", "hi"]).check().stdout == "hi\n"
    first.close()
    address = lab.host(2).address
    assert known.read_text().split()[0] == address
    assert " ".join(known.read_text().split()[1:3]) == public_key(lab.host(2).host_key)
    second = SSHTransport(lab.target(2, known_hosts=str(known)))
    assert second.run(["true"]).ok
    second.close()


@pytest.mark.real
@pytest.mark.parametrize("policy", ["strict", "accept_new"])
def test_changed_host_key_is_always_refused(lab: Lab, tmp_path: Path,
                                            policy: HostKeyPolicy) -> None:
    # Host 2's address with host 1's (real) key: to the client, host 2's key has changed.
    known = tmp_path / "known_hosts"
    known.write_text(f"{lab.host(2).address} {public_key(lab.host(1).host_key)}\n")
    transport = SSHTransport(
        lab.target(2, known_hosts=str(known), node="decode-0", host_key_policy=policy))
    with pytest.raises(TransportError, match=r"^decode-0: HOST KEY CHANGED for .*refused"):
        transport.run(["true"])
    assert len(known.read_text().splitlines()) == 1


@pytest.mark.real
def test_wrong_key_is_refused(lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # no agent keys to fall back on
    write_keypair(str(tmp_path / "stranger"), "stranger")
    empty_config = tmp_path / "ssh_config"
    empty_config.write_text("")
    host = lab.host(1)
    target = SSHTarget(node="gpu-b", host=host.address, user=lab.user,
                       identity_files=(str(tmp_path / "stranger"),),
                       ssh_config=str(empty_config), known_hosts=lab.known_hosts)
    with pytest.raises(TransportError, match=r"^gpu-b: authentication refused by root@"):
        SSHTransport(target).run(["true"])
    missing = replace(target, identity_files=(str(tmp_path / "missing"),))
    with pytest.raises(TransportError, match=r"^gpu-b: cannot read key file .*missing"):
        SSHTransport(missing).run(["true"])


@pytest.mark.real
def test_unreachable_address_fails_fast(lab: Lab) -> None:
    nobody = lab.subnet.rsplit(".", 1)[0] + ".250"  # on the lab network, but no host there
    transport = SSHTransport(SSHTarget(node="gone", host=nobody, known_hosts=lab.known_hosts,
                                       connect_timeout_s=1.0))
    started = time.monotonic()
    with pytest.raises(TransportError, match=rf"^gone: cannot reach .*{nobody}:22"):
        transport.run(["true"])
    assert time.monotonic() - started < 5
    closed_port = SSHTransport(lab.target(1, port=2222, node="closed"))
    with pytest.raises(TransportError, match=r"^closed: cannot reach .*refused"):
        closed_port.run(["true"])


@pytest.mark.real
def test_proxyjump_alias_goes_through_the_jump_host(lab: Lab, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        Path(lab.ssh_config).read_text()
        + f"\nHost behind\n    HostName {lab.host(2).address}\n    ProxyJump lab-1\n"
        f"    User {lab.user}\n    IdentityFile {lab.client_key}\n"
    )
    transport = SSHTransport(SSHTarget(node="behind", host="behind", ssh_config=str(config),
                                       known_hosts=lab.known_hosts))
    try:
        client, _ = source_of(transport)
        assert client == lab.host(1).address  # host 2 saw the connection come from host 1
        assert transport.run(["hostname", "-I"]).check().stdout.split() == [lab.host(2).address]
    finally:
        transport.close()
    direct = SSHTransport(lab.target(2))
    assert source_of(direct)[0] == lab.bridge_address
    direct.close()


@pytest.mark.real
def test_dropped_connection_is_reestablished(lab: Lab) -> None:
    transport = SSHTransport(lab.target(2))
    try:
        before = source_of(transport)
        assert source_of(transport) == before  # one connection, reused
        restart_sshd(lab.directory, 2)  # every connection to host 2 is cut
        after = source_of(transport)
        assert after != before
        # A connection cut while a command runs: an error now, a fresh connection next time.
        errors: list[BaseException] = []

        def long_command() -> None:
            try:
                transport.run(["sleep", "20"], timeout_s=30)
            except TransportError as exc:
                errors.append(exc)

        worker = threading.Thread(target=long_command)
        worker.start()
        time.sleep(0.5)
        restart_sshd(lab.directory, 2)
        worker.join(timeout=10)
        assert not worker.is_alive()
        assert errors and "connection lost while running sleep" in str(errors[0])
        assert transport.run(["true"]).ok
    finally:
        transport.close()


@pytest.mark.real
def test_command_timeout_leaves_the_connection_usable(lab: Lab) -> None:
    transport = SSHTransport(lab.target(1, node="slow"))
    try:
        started = time.monotonic()
        with pytest.raises(TransportError, match=r"^slow: sleep timed out after 0.5s"):
            transport.run(["sleep", "60"], timeout_s=0.5)
        # cut short, not waited out: a bound far from both, so that load cannot tip it
        assert time.monotonic() - started < 30
        assert transport.run(["echo", "still here"]).check().stdout == "still here\n"
    finally:
        transport.close()


@pytest.mark.pure
def test_node_model_ssh_fields() -> None:
    node = Node.model_validate({"name": "gpu-a", "transport": "ssh", "host": "gpu-a.lab",
                                "workdir": "/var/tmp/bisect"})
    assert (node.port, node.host_key_policy, node.connect_timeout_s) == (None, "strict", 10.0)
    with pytest.raises(ValidationError) as missing:
        Node.model_validate({"name": "b", "transport": "ssh", "workdir": "/w"})
    assert [e["loc"] for e in missing.value.errors()] == [("host",)]
    assert "required when transport is ssh" in missing.value.errors()[0]["msg"]
    with pytest.raises(ValidationError, match="add `transport: ssh`"):
        Node.model_validate({"name": "c", "host": "x", "workdir": "/w"})
    with pytest.raises(ValidationError):
        Node.model_validate({"name": "d", "transport": "ssh", "host": "x", "workdir": "/w",
                             "host_key_policy": "yes"})


@pytest.mark.real
def test_transport_for_nodes(lab: Lab) -> None:
    local = Node.model_validate({"name": "here", "workdir": "/tmp"})
    remote = Node.model_validate(lab.node(1))
    assert isinstance(transport_for(local), LocalTransport)
    transports = Transports([local, remote])
    try:
        assert transports["lab-1"] is transports["lab-1"]  # one connection per node
        assert isinstance(transports["lab-1"], SSHTransport)
        assert transports["lab-1"].run(["hostname", "-I"]).check().stdout.split() == [
            lab.host(1).address]
        assert transports["here"].run(["true"]).ok
    finally:
        transports.close()
