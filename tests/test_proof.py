"""Proof of load against real processes started by the process manager, on this machine and over
SSH into the lab: a fresh start is proven; a wrong env value, a wrong argv, a missing marker and
stale code (files and git moved under a running process) are each named precisely."""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.proof import Proof, node_clock, prove_loaded
from deploy.services.base import ServiceConfig
from deploy.services.process import ProcessServiceManager
from deploy.transports.base import Transport
from deploy.transports.local import LocalTransport
from deploy.transports.ssh import SSHTransport

pytestmark = pytest.mark.real

HELPER_V1 = 'VERSION = "v1"\n'
HELPER_V2 = 'VERSION = "v2"\n'
SERVICE = """\
import os, sys, time
import helper  # the code a deploy changes: sys.path[0] is this script's directory
print(f"loaded helper={helper.VERSION} hicache={os.environ.get('HICACHE')}", flush=True)
time.sleep(120)
"""


@dataclass
class Node:
    transport: Transport
    manager: ProcessServiceManager
    tree: Path  # a git tree holding the service's code


def git(tree: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(params=["local", "ssh"])
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Node]:
    tree = tmp_path / "code"
    tree.mkdir()
    (tree / "helper.py").write_text(HELPER_V1)
    (tree / "service.py").write_text(SERVICE)
    git(tree, "init", "-q")
    git(tree, "add", ".")
    git(tree, "commit", "-qm", "v1")
    transport: Transport
    if request.param == "ssh":
        lab = request.getfixturevalue("lab")
        transport = SSHTransport(lab.target(1))
        workdir = f"{lab.host(1).workdir}/proof-{tmp_path.name}"
    else:
        transport, workdir = LocalTransport("local"), str(tmp_path / "work")
    manager = ProcessServiceManager(transport, workdir)
    yield Node(transport, manager, tree)
    manager.stop("svc")
    transport.close()


def config(node: Node, hicache: str = "1", *extra: str) -> ServiceConfig:
    return ServiceConfig.of("svc", [sys.executable, str(node.tree / "service.py"), *extra],
                            {"HICACHE": hicache, "PYTHONDONTWRITEBYTECODE": "1"})


def start(node: Node, cfg: ServiceConfig) -> tuple[int, str]:
    """Start through the manager; return the pid and this start's log once the service spoke."""
    started = node.manager.start(cfg)
    deadline = time.monotonic() + 10
    while "loaded" not in (log := node.manager.read_log("svc", started.log_offset)):
        assert time.monotonic() < deadline, f"the service did not start: {log!r}"
        time.sleep(0.02)
    return started.pid, log


def prove(node: Node, pid: int, cfg: ServiceConfig, deployed_at: float, log: str,
          markers: tuple[str, ...] = ("helper=v1", "hicache=1"), **kwargs: object) -> Proof:
    files = {str(node.tree / "helper.py"): sha(node.tree / "helper.py")}
    head = git(node.tree, "rev-parse", "HEAD")
    options: dict[str, object] = {"files": files, "git": (str(node.tree), head), **kwargs}
    return prove_loaded(node.transport, pid, cfg, deployed_at_epoch=deployed_at, log_text=log,
                        markers=markers, **options)  # type: ignore[arg-type]


def test_a_freshly_started_service_is_proven(node: Node) -> None:
    cfg = config(node, "1", "--role", "two words")
    deployed_at = node_clock(node.transport)
    pid, log = start(node, cfg)
    proof = prove(node, pid, cfg, deployed_at, log)
    assert proof.ok, proof.problems
    # The manager's pid is the service itself: `setsid env ... python` exec'd all the way down.
    assert proof.checks["argv"] == list(cfg.argv)
    assert proof.checks["env"] == {"HICACHE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    assert proof.checks["started_at"] >= deployed_at - 1.0  # btime is whole seconds
    assert proof.checks["markers"] == {"helper=v1": True, "hicache=1": True}
    assert proof.checks["git"]["head"] == git(node.tree, "rev-parse", "HEAD")
    assert "PATH" not in proof.checks["env"]  # only what the variant sets: environs hold secrets


def test_wrong_env_argv_and_missing_marker_are_each_named(node: Node) -> None:
    running = config(node, "0", "--tp", "8")
    deployed_at = node_clock(node.transport)
    pid, log = start(node, running)
    variant = ServiceConfig.of(
        "svc", [sys.executable, str(node.tree / "service.py"), "--tp", "8",
                "--enable-hierarchical-cache"],
        {"HICACHE": "1", "BF16_INDEX_K": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    proof = prove(node, pid, variant, deployed_at, log)
    assert not proof.ok
    assert proof.problems == [
        f"the command line differs from the variant's (missing '--enable-hierarchical-cache'): "
        f"the process runs {sys.executable} {node.tree}/service.py --tp 8",
        "env BF16_INDEX_K is not set in the process, the variant sets '1'",
        "env HICACHE is '0', the variant sets '1'",
        "marker 'hicache=1' not in this start's log",
    ]
    reordered = ServiceConfig.of("svc", [sys.executable, "--tp", str(node.tree / "service.py"),
                                         "8"], dict(running.env))
    # A bare command name may be exec'd by its full path (systemd does): the same command.
    bare = ServiceConfig.of("svc", [Path(sys.executable).name, *running.argv[1:]],
                            dict(running.env))
    assert prove(node, pid, bare, deployed_at, log, markers=()).ok
    assert prove(node, pid, reordered, deployed_at, log, markers=()).problems == [
        f"the process has the variant's arguments in another order: "
        f"{sys.executable} {node.tree}/service.py --tp 8"]
    forbidden = prove(node, pid, running, deployed_at, log, markers=(),
                      absent_markers=("hicache=0",))
    assert forbidden.problems == [
        "marker 'hicache=0' is in this start's log, the variant says it must not be"]


def test_stale_code_under_a_running_process_is_caught(node: Node) -> None:
    """The investigation's blind spot: new code on disk, the old process still answering."""
    cfg = config(node)
    pid, log = start(node, cfg)
    time.sleep(2.1)  # past the start time's 1 s uncertainty and the reflog's whole seconds
    deployed_at = node_clock(node.transport)  # the deploy: new code, and no restart
    (node.tree / "helper.py").write_text(HELPER_V2)
    git(node.tree, "commit", "-qam", "v2")
    proof = prove(node, pid, cfg, deployed_at, log, markers=("hicache=1",))
    assert not proof.ok
    head = git(node.tree, "rev-parse", "HEAD")[:12]
    helper = node.tree / "helper.py"
    assert [re.sub(r"about \d s", "about N s", p) for p in proof.problems] == [
        "the process started about N s before the deploy: it was not restarted",
        f"{helper} changed about N s after the process started: the running code predates it "
        f"(not restarted since the change)",
        f"git tree {node.tree} moved to {head} about N s after the process started: the "
        f"running code predates it (not restarted since the change)",
    ]
    # The deploy did not land at all: the node's file and commit are not the variant's.
    wanted = hashlib.sha256(b'VERSION = "v3"\n').hexdigest()
    missed = prove_loaded(node.transport, pid, cfg, deployed_at_epoch=deployed_at,
                          log_text=log, markers=(), files={str(helper): wanted},
                          git=(str(node.tree), "0123456789ab"))
    assert f"{helper} has sha256 {sha(helper)[:12]}…, the variant expects {wanted[:12]}…: the " \
           f"file on the node is not the deployed one" in missed.problems
    assert f"git tree {node.tree} is at {head}, the variant expects 0123456789ab" \
        in missed.problems
    helper.write_text("# an edit nobody committed\n" + HELPER_V2)
    dirty = prove(node, pid, cfg, deployed_at, log, markers=(), files={})
    assert f"git tree {node.tree} has uncommitted changes to tracked files: helper.py" \
        in dirty.problems
    # ... unless the variant patched that file on purpose: then its hash is what is checked.
    patched = prove(node, pid, cfg, deployed_at, log, markers=())
    assert not any("uncommitted" in p for p in patched.problems)
    git(node.tree, "checkout", "-q", "helper.py")
    # A restart after the deploy loads the new code, and the same checks now pass.
    deployed_at = node_clock(node.transport)
    pid, log = start(node, cfg)
    proof = prove(node, pid, cfg, deployed_at, log, markers=("helper=v2",))
    assert proof.ok, proof.problems


def test_a_dead_pid_proves_nothing(node: Node) -> None:
    cfg = config(node)
    deployed_at = node_clock(node.transport)
    pid, log = start(node, cfg)
    node.manager.stop("svc")
    proof = prove(node, pid, cfg, deployed_at, log)
    assert not proof.ok and proof.checks["alive"] is False
    assert proof.problems[0].startswith(f"process {pid} ")  # exited, or a zombie nobody reaped
    assert proof.problems[0].endswith(": nothing to prove")


def test_a_script_with_a_shebang_is_its_own_argv(tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/sh\necho loaded\nexec 3>&-; while :; do sleep 1; done\n")
    script.chmod(0o755)
    transport = LocalTransport("local")
    manager = ProcessServiceManager(transport, str(tmp_path / "work"))
    cfg = ServiceConfig.of("svc", [str(script), "--port", "1"], {})
    deployed_at = node_clock(transport)
    started = manager.start(cfg)
    try:
        time.sleep(0.2)
        proof = prove_loaded(transport, started.pid, cfg, deployed_at_epoch=deployed_at,
                             log_text=manager.read_log("svc"), markers=("loaded",))
        assert proof.ok, proof.problems
        assert proof.checks["argv"] == ["/bin/sh", str(script), "--port", "1"]
    finally:
        manager.stop("svc")


def test_a_launcher_that_spawns_the_server_has_its_child_proven(node: Node,
                                                                 tmp_path: Path) -> None:
    """As ``conda run`` does: the launcher stays, the server is its child; the child is proven
    (its argv, environment and start), and the proof says which process it was."""
    script = tmp_path / "run.sh"
    server = [sys.executable, str(node.tree / "service.py")]
    script.write_text(f'#!/bin/sh\n{shlex.join(server)} "$@"\n')  # no exec: a child
    script.chmod(0o755)
    cfg = ServiceConfig.of("svc", [str(script), "--role", "two words"],
                           {"HICACHE": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    deployed_at = node_clock(node.transport)
    pid, log = start(node, cfg)
    proof = prove(node, pid, cfg, deployed_at, log, start_words=1)
    assert proof.ok, proof.problems
    proved = proof.checks["proved"]
    assert proved["pid"] != pid and proof.checks["pid"] == pid
    assert proved["argv"] == [*server, "--role", "two words"] == proof.checks["argv"]
    assert (proved["how"], proved["launcher"]) == ("launcher", [str(script)])
    assert proof.checks["env"]["HICACHE"] == "1"
    # the same launcher given a flag its server lacks: the child is described, the flag named
    dropped = ServiceConfig.of("svc", [*cfg.argv, "--tp", "8"], dict(cfg.env))
    proof = prove(node, pid, dropped, deployed_at, log, start_words=2)
    assert proof.problems == [
        f"the command line differs from the variant's (missing '--tp 8'): process "
        f"{proved['pid']} (started under {pid}) runs {shlex.join(proved['argv'])}"]


def test_a_shell_c_launcher_passes_the_variant_on_after_its_name(node: Node) -> None:
    """`sh -c '… exec server "$@"' NAME ARGS`, as a venv activation is written: proven, the
    launcher named; without NAME the shell takes the first flag for its $0, and says so."""
    server = shlex.join([sys.executable, str(node.tree / "service.py")])
    launcher = ["/bin/sh", "-c", f'cd / && exec {server} "$@"', "svc"]
    cfg = ServiceConfig.of("svc", [*launcher, "--role", "two words"],
                           {"HICACHE": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    deployed_at = node_clock(node.transport)
    pid, log = start(node, cfg)
    proof = prove(node, pid, cfg, deployed_at, log, start_words=len(launcher))
    assert proof.ok, proof.problems
    assert proof.checks["proved"]["pid"] == pid  # exec'd: the started process is the server
    assert proof.checks["proved"]["launcher"] == launcher
    nameless = ServiceConfig.of("svc", [*launcher[:3], "--role", "two words"], dict(cfg.env))
    deployed_at = node_clock(node.transport)
    pid, log = start(node, nameless)
    proof = prove(node, pid, nameless, deployed_at, log, start_words=3)
    assert proof.problems == [
        f"the command line differs from the variant's (missing '--role two words'): the process "
        f"runs {server} 'two words' (`sh -c SCRIPT` takes the word after SCRIPT as its $0: "
        f"'--role' is lost; put a name for $0 after the script)"]
    # its arguments written in the script: read from the words it execs
    plain = ServiceConfig.of("svc", ["/bin/sh", "-c", f"cd / && exec {server} --role solo"],
                             dict(cfg.env))
    deployed_at = node_clock(node.transport)
    pid, log = start(node, plain)
    proof = prove(node, pid, plain, deployed_at, log, start_words=3)
    assert proof.ok, proof.problems
    assert proof.checks["proved"]["argv"] == [*shlex.split(server), "--role", "solo"]


def test_what_a_launcher_adds_after_the_variant_s_flags_or_a_stale_flag_is_named(
        node: Node, tmp_path: Path) -> None:
    server = [sys.executable, str(node.tree / "service.py")]
    script = tmp_path / "run.sh"
    env = {"HICACHE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    cfg = ServiceConfig.of("svc", [str(script), "--tp", "8"], env)
    for tail, problem in [
        ("--tp 4", "the command line differs from the variant's ('--tp' is '4' in the process, "
                   "the variant passes '8')"),  # a later value undoes the variant's
        ("--quiet", "the variant's flags are not the last arguments of the command line"),
    ]:
        script.write_text(f'#!/bin/sh\nexec {shlex.join(server)} "$@" {tail}\n')
        script.chmod(0o755)
        deployed_at = node_clock(node.transport)
        pid, log = start(node, cfg)
        proof = prove(node, pid, cfg, deployed_at, log, start_words=1)
        assert proof.problems == [
            f"{problem}: the process runs {shlex.join([*server, '--tp', '8', *tail.split()])}"]
    # the command itself with a flag the variant no longer passes (a stale start)
    stale = ServiceConfig.of("svc", [*server, "--old", "--tp", "8"], env)
    deployed_at = node_clock(node.transport)
    pid, log = start(node, stale)
    variant = ServiceConfig.of("svc", [*server, "--tp", "8"], env)
    proof = prove(node, pid, variant, deployed_at, log, start_words=2)
    assert proof.problems == [f"the command line differs from the variant's (unexpected '--old'): "
                              f"the process runs {shlex.join(stale.argv)}"]
