"""Preflight against real nodes: the lab's SSH hosts (one with the twin as its build, one
address where nothing answers, one port where sshd does not listen) and this machine. Every
problem comes back from one call; nothing on a node changes."""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from deploy.lab import Lab
from deploy.preflight import (
    HelpCache,
    LevelFlags,
    NodeCheck,
    ServiceCheck,
    flag_names,
    help_argv,
    preflight,
)
from deploy.services.base import ServiceConfig
from deploy.services.process import ProcessServiceManager
from deploy.transports.base import CommandResult
from deploy.transports.local import LocalTransport
from deploy.transports.ssh import SSHTransport
from deploy.transports.ssh_config import SSHTarget

TWIN = (sys.executable, "-m", "experiments.twin", "--port", "30000", "--tool-call-parser",
        "deepseekv32")
LEVELS = (
    LevelFlags("hicache", "off", ()),
    LevelFlags("hicache", "on", ("--enable-hierarchical-cache", "--hicache-ratio", "2")),
    LevelFlags("graphs", "eager", ("--disable-cuda-graph",)),
    LevelFlags("graphs", "broken", ("--no-such-flag=3", "--hicache-size", "8")),
)


class CountingTransport(LocalTransport):
    """This machine, counting the commands it runs (to see the --help cache work)."""

    def __init__(self, node: str) -> None:
        super().__init__(node)
        self.commands: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], *, timeout_s: float = 60.0) -> CommandResult:
        self.commands.append(tuple(argv))
        return super().run(argv, timeout_s=timeout_s)


@pytest.mark.real
def test_every_problem_of_every_node_in_one_call(lab: Lab, tmp_path: Path) -> None:
    workdir = f"{lab.host(1).workdir}/preflight-{tmp_path.name}"
    nobody = lab.subnet.rsplit(".", 1)[0] + ".250"  # on the lab network, no host there
    ssh = SSHTransport(lab.target(1))
    nodes = [
        NodeCheck("gpu-a", ssh, (
            ServiceCheck("prefill", TWIN, workdir, LEVELS),
            ServiceCheck("router", ("/opt/sglang/bin/router", "--pd"), workdir),
            ServiceCheck("decode", ("sglang-not-installed", "--port", "1"), workdir),
        )),
        NodeCheck("gpu-gone", SSHTransport(SSHTarget(
            node="gpu-gone", host=nobody, known_hosts=lab.known_hosts, connect_timeout_s=1.0)),
            (ServiceCheck("sglang", TWIN, "/tmp"),)),
        NodeCheck("gpu-closed", SSHTransport(lab.target(2, port=2222, node="gpu-closed")),
                  (ServiceCheck("sglang", TWIN, "/tmp"),)),
    ]
    try:
        result = preflight(nodes)
    finally:
        for node in nodes:
            node.transport.close()
    assert [(p.node, p.service, p.kind) for p in result.problems] == [
        ("gpu-a", "router", "executable"),
        ("gpu-a", "decode", "executable"),
        ("gpu-a", "prefill", "flag"),
        ("gpu-gone", None, "unreachable"),
        ("gpu-closed", None, "unreachable"),
    ]
    shown = f"{sys.executable} -m experiments.twin --help"
    messages = [p.message for p in result.problems]
    assert messages[0] == ("gpu-a: the start command of router, '/opt/sglang/bin/router', is "
                           "not an executable file there (nor found on the PATH of its shell)")
    assert messages[2] == (f"gpu-a: factor graphs, level broken passes --no-such-flag to "
                           f"prefill, which `{shown}` there does not list (the flag names of "
                           f"that build)")
    assert messages[3].startswith(f"gpu-gone: cannot reach root@{nobody}:22")
    assert messages[4].startswith("gpu-closed: cannot reach") and "refused" in messages[4]
    # --enable-hierarchical-cache, --hicache-ratio, --hicache-size, --disable-cuda-graph and the
    # start command's own flags are all in the twin's --help: none of them is reported.
    assert not any("--hicache" in m or "--enable" in m or "--port" in m for m in messages)
    assert set(result.snapshots) == {"gpu-a"}
    assert not result.ok


def _exec_done(pid: int, cmdline: bytes, timeout_s: float = 30.0) -> None:
    """Wait until the started pid runs its program: it is `setsid` (then `env`) until their
    execs, which a loaded machine may delay past the snapshot (seen beside a second test run).
    A service the snapshot meets in use has been running far longer."""
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}/cmdline").read_bytes() != cmdline:
        assert time.monotonic() < deadline, Path(f"/proc/{pid}/cmdline").read_bytes()
        time.sleep(0.02)


@pytest.mark.real
def test_snapshot_records_running_services_and_the_files_to_touch(tmp_path: Path) -> None:
    transport = LocalTransport("gpu-a")
    workdir = str(tmp_path / "work")
    manager = ProcessServiceManager(transport, workdir)
    config = tmp_path / "sglang.env"
    config.write_bytes(b"BF16_INDEX_K=0\n\x00\xff binary too\n")
    config.chmod(0o640)
    pwned = tmp_path / "PWNED"
    hostile = f"{tmp_path}/'; touch {pwned}; '$(touch {pwned})"
    running = manager.start(ServiceConfig.of("decode", ["sleep", "60"], {}))
    _exec_done(running.pid, b"sleep\x0060\x00")
    try:
        result = preflight([NodeCheck(
            "gpu-a", transport,
            (ServiceCheck("decode", TWIN, workdir), ServiceCheck("prefill", TWIN, workdir)),
            files=(str(config), hostile, str(tmp_path)), min_free_bytes=1 << 60)])
    finally:
        manager.stop("decode")
    snapshot = result.snapshots["gpu-a"]
    decode, prefill = snapshot.services
    assert decode.running and decode.pid == running.pid
    assert decode.cmdline == ("sleep", "60") and decode.pid_file == f"{workdir}/decode.pid"
    assert (prefill.pid, prefill.running, prefill.cmdline) == (None, False, None)
    kept, absent, directory = snapshot.files
    assert directory.exists and directory.content is None
    assert kept.content == config.read_bytes() and kept.mode == 0o640
    assert kept.sha256 == hashlib.sha256(config.read_bytes()).hexdigest()
    assert (absent.path, absent.exists, absent.content) == (hostile, False, None)
    assert not pwned.exists()
    assert [(p.kind, p.message) for p in result.problems if p.kind != "disk"] == [
        ("file", f"gpu-a: {tmp_path} is not a regular file: the campaign cannot write it")]
    disk = [p.message for p in result.problems if p.kind == "disk"]
    assert len(disk) == 1 and disk[0].startswith("gpu-a: only ")
    assert disk[0].endswith(f"GiB free in {workdir}, the campaign needs 1073741824.00 GiB for "
                            f"logs")


@pytest.mark.real
def test_help_runs_once_per_node_and_build_and_failures_are_named(tmp_path: Path) -> None:
    transport = CountingTransport("gpu-a")
    services = (ServiceCheck("prefill", TWIN, str(tmp_path), LEVELS[:2]),
                ServiceCheck("decode", TWIN, str(tmp_path), LEVELS[2:3]))
    cache = HelpCache()
    for _ in range(2):
        assert preflight([NodeCheck("gpu-a", transport, services)], cache=cache).ok
    helps = [c for c in transport.commands if c[-1] == "--help"]
    assert helps == [("env", "--", sys.executable, "-m", "experiments.twin", "--help")]
    preflight([NodeCheck("gpu-a", transport, services, build="abc123")], cache=cache)
    assert len([c for c in transport.commands if c[-1] == "--help"]) == 2  # a new build

    broken = ServiceCheck("router", ("sh", "-c", 'echo "bad build: $A" >&2; exit 2', "--pd"),
                          str(tmp_path), env=(("A", "1"),))
    problems = preflight([NodeCheck("gpu-b", LocalTransport("gpu-b"), (broken,))]).problems
    assert [(p.kind, p.message) for p in problems] == [
        ("help", "gpu-b: cannot list the flags of its build: `sh -c 'echo \"bad build: $A\" "
                 ">&2; exit 2' --help` exited 2: bad build: 1")]


@pytest.mark.pure
def test_help_command_and_flag_names() -> None:
    assert help_argv(ServiceCheck("s", TWIN, "/w")) == TWIN[:3]
    assert help_argv(ServiceCheck("s", ("sglang", "serve", "--x"), "/w")) == ("sglang", "serve")
    assert help_argv(ServiceCheck("s", TWIN, "/w", help_argv=("a", "b"))) == ("a", "b")
    assert flag_names(["--a", "1", "--b=2", "-c", "--", "-1", "--c-d_e"]) == [
        "--a", "--b", "--c-d_e"]


@pytest.mark.real
@pytest.mark.parametrize("bad", [".", ""])
def test_a_workdir_that_does_not_exist_yet_is_measured_on_its_parent(bad: str,
                                                                     tmp_path: Path) -> None:
    workdir = str(tmp_path / "not" / "yet") + bad
    result = preflight([NodeCheck("gpu-a", LocalTransport("gpu-a"),
                                  (ServiceCheck("decode", TWIN, workdir),))])
    assert result.ok, result.problems
    assert not (tmp_path / "not").exists()  # preflight creates nothing
