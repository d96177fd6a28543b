"""Nothing in a campaign file runs as a command (issue 11, hole 1).

Hostile NAMES and VALUES for environment variables, arguments, programs, git refs and hooks go
through the real deploy layer: the process manager on this machine and over real SSH into a lab
host, the preflight, the hooks and git changes, the systemd manager in a systemd lab host, and
``bisect validate``. Each one is either refused with a clear error before anything runs, or
reaches the process byte for byte; the marker file the hostile words would create never appears.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploy.changes.base import ChangeError
from deploy.changes.gitref import GitRef, check_refs, resolve_range
from deploy.changes.hooks import Hook, run_hook
from deploy.changes.patch import FilePatch
from deploy.lab import Lab, lab_down, lab_up
from deploy.lab.registry import process_prefix
from deploy.lab.units import install_unit, service_unit
from deploy.preflight import NodeCheck, ServiceCheck, preflight
from deploy.render import LevelSettings, render_service
from deploy.services.base import ServiceConfig
from deploy.services.process import ProcessServiceManager
from deploy.services.systemd import UNIT_DIR, SystemdServiceManager
from deploy.transports.base import Transport, TransportError
from deploy.transports.local import LocalTransport
from deploy.transports.ssh import SSHTransport
from deploy.transports.ssh_config import SSHTarget
from experiments.campaign import CampaignError
from experiments.campaign_load import load_campaign
from orchestrator.cli import app

# {m}: the marker file; a word that runs as a command creates it.
HOSTILE_NAMES = [
    "-Ssh -c 'touch {m}' x",  # GNU env: -S splits the rest into a command line and runs it
    "--split-string=sh -c 'touch {m}'", "-S touch {m}", "-i", "-u PATH", "--", "-", "-0",
    "-C/", "A-B", "1ABC", "A B", "A=B", "", "X;touch {m}", "$(touch {m})", "`touch {m}`",
    "ÄB", "A\nB", "A\0B",
]
HOSTILE_WORDS = [
    "-Ssh -c 'touch {m}' x", "--split-string=sh -c 'touch {m}'", "-S", "-i", "--", "-", "-u",
    "--help", "A=B", "=", "'; touch {m}; '", "$(touch {m})", "`touch {m}`",
    "a\nb; touch {m}", "two  words", "\\back $HOME * ~ %s %h $$", "ünïcode ☃", "", "\t",
    "\x1b[31m red",
]
# Commands whose first words GNU env would have read as its own options (with no variables
# before them), each then running `touch {m}`.
OPTION_COMMANDS = [["-Ssh -c 'touch {m}' x"], ["--split-string", "sh -c 'touch {m}'"],
                   ["-S", "touch {m}"], ["-i", "touch", "{m}"], ["-u", "X", "touch", "{m}"]]

# A service that reports its raw command line, environment and umask, then waits to be stopped.
REPORTER = """\
import json, os, time
def raw(path):
    with open(path, "rb") as handle:
        return handle.read().hex()
mask = os.umask(0); os.umask(mask)
print(json.dumps({"cmdline": raw("/proc/self/cmdline"), "environ": raw("/proc/self/environ"),
                  "umask": mask}), flush=True)
print("ready", flush=True)
time.sleep(600)
"""


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def filled(templates: list[str], marker: Path) -> list[str]:
    return [template.replace("{m}", str(marker)) for template in templates]


@dataclass
class Node:
    """Where the services run: this machine, or a lab host over SSH (same filesystem)."""

    transport: Transport
    workdir: Path  # not yet created: bisect creates it
    marker: Path
    reporter: Path


@pytest.fixture(params=["local", "ssh"])
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Node]:
    transport: Transport
    if request.param == "local":
        transport = LocalTransport("here")
        workdir = tmp_path / "work" / "services"
    else:
        lab: Lab = request.getfixturevalue("lab")
        transport = SSHTransport(lab.target(1))
        workdir = Path(lab.host(1).workdir) / f"hostile-{tmp_path.name}" / "services"
    reporter = tmp_path / "reporter.py"
    reporter.write_text(REPORTER)
    made = Node(transport, workdir, tmp_path / "PWNED", reporter)
    yield made
    manager = ProcessServiceManager(transport, str(workdir))
    for pid_file in workdir.glob("*.pid") if workdir.exists() else []:
        manager.stop(pid_file.name.removesuffix(".pid"))
    transport.close()
    subprocess.run(["rm", "-rf", "--", str(workdir.parent)], check=False)


def report(manager: ProcessServiceManager, name: str) -> dict[str, object]:
    wait_for(lambda: "ready" in manager.read_log(name), f"{name} to report")
    parsed: dict[str, object] = json.loads(manager.read_log(name).splitlines()[0])
    return parsed


def wait_exited(manager: ProcessServiceManager, name: str) -> None:
    wait_for(lambda: not manager.is_running(name), f"{name} to exit")


def environ(hex_text: object) -> dict[bytes, bytes]:
    entries = bytes.fromhex(str(hex_text)).split(b"\0")
    return dict(entry.split(b"=", 1) for entry in entries if b"=" in entry)


@pytest.mark.real
def test_hostile_env_names_are_refused_before_anything_runs(node: Node) -> None:
    manager = ProcessServiceManager(node.transport, str(node.workdir))
    argv = [sys.executable, str(node.reporter)]
    for name in filled(HOSTILE_NAMES, node.marker):
        with pytest.raises(ValueError, match="not an environment variable name") as refused:
            manager.start(ServiceConfig.of("svc", argv, {name: "1", "GOOD": "1"}))
        assert refused.value.args[0].startswith("service svc: ")
        with pytest.raises(ValueError, match="not an environment variable name"):
            render_service("svc", argv, {}, [LevelSettings("f", "l", env={name: "1"})])
    # A program with '=' would be read by `env` as one more variable: refused too.
    with pytest.raises(ValueError, match="contains '='"):
        manager.start(ServiceConfig.of("svc", ["A=1", *argv], {}))
    assert not node.workdir.exists()  # nothing ran: not even the workdir was made
    assert not node.marker.exists()


@pytest.mark.real
def test_option_like_words_reach_the_service_byte_for_byte(node: Node) -> None:
    manager = ProcessServiceManager(node.transport, str(node.workdir))
    words = filled(HOSTILE_WORDS, node.marker)
    env = {f"HOSTILE_{i}": word for i, word in enumerate(words)}
    config = ServiceConfig.of("svc", [sys.executable, str(node.reporter), *words], env)
    manager.start(config)
    seen = report(manager, "svc")
    assert bytes.fromhex(str(seen["cmdline"])).split(b"\0")[:-1] == [
        arg.encode() for arg in config.argv]
    got = environ(seen["environ"])
    assert {key: got.get(key.encode()) for key in env} == {
        key: value.encode() for key, value in env.items()}
    # A program that looks like an option of env's is a program: it is not found, nothing runs.
    for index, command in enumerate(OPTION_COMMANDS):
        name = f"opt{index}"
        manager.start(ServiceConfig.of(name, filled(command, node.marker), {}))
        wait_exited(manager, name)
        assert "No such file or directory" in manager.read_log(name), manager.read_log(name)
    assert not node.marker.exists()


@pytest.mark.real
def test_what_bisect_writes_on_a_node_is_owner_only(node: Node, tmp_path: Path) -> None:
    manager = ProcessServiceManager(node.transport, str(node.workdir))
    manager.start(ServiceConfig.of("svc", [sys.executable, str(node.reporter)], {}))
    seen = report(manager, "svc")
    assert stat.S_IMODE(node.workdir.stat().st_mode) == 0o700
    for path in (manager.pid_file("svc"), manager.log_file("svc")):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    # The service itself keeps the node's umask: its own files are its business.
    node_umask = node.transport.run(["sh", "-c", "umask"]).check().stdout.strip()
    assert seen["umask"] == int(node_umask, 8)
    # A patch's backups and a git checkout's record are bisect's too; a file the patch
    # creates is the tree's, made under the node's umask.
    root = tmp_path / "root"
    root.mkdir()
    (root / "config.py").write_text("SECRET = 1\n")
    diff = ("--- a/config.py\n+++ b/config.py\n@@ -1 +1 @@\n-SECRET = 1\n+SECRET = 2\n"
            "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+x = 1\n")
    changes = node.workdir / "changes"
    FilePatch(diff, str(root), str(changes)).apply(node.transport)
    assert stat.S_IMODE((changes / "bisect-variants").stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "new.py").stat().st_mode) == 0o666 & ~int(node_umask, 8)
    tree = git_tree(tmp_path / "src")
    ref = GitRef(str(tree), "HEAD~1", str(changes))
    ref.apply(node.transport)
    assert stat.S_IMODE(os.stat(ref.record).st_mode) == 0o600
    ref.revert(node.transport)


@pytest.mark.real
def test_preflight_never_runs_a_name_and_passes_values_exactly(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    dump = tmp_path / "help-env.json"
    helper = (sys.executable, "-c", "import json, os; print('--port'); "
              f"open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))")
    for name in filled(HOSTILE_NAMES, marker):
        with pytest.raises(ValueError, match="not an environment variable name"):
            ServiceCheck("svc", helper, str(tmp_path / "work"), env=((name, "1"),))
    with pytest.raises(ValueError, match="contains '='"):
        ServiceCheck("svc", ("A=1", *helper), str(tmp_path / "work"))
    env = tuple(sorted((f"HOSTILE_{i}", word) for i, word
                       in enumerate(filled(HOSTILE_WORDS, marker))))
    checked = preflight([NodeCheck("here", LocalTransport("here"), (
        ServiceCheck("svc", helper, str(tmp_path / "work"), env=env),))])
    assert checked.ok, checked.problems
    assert {key: json.loads(dump.read_text()).get(key) for key, _ in env} == dict(env)
    assert not marker.exists()


@pytest.mark.real
def test_hooks_run_exactly_as_written(node: Node) -> None:
    words = filled(HOSTILE_WORDS, node.marker)
    printed = run_hook(node.transport, Hook((sys.executable, "-c",
                                             "import sys; print(repr(sys.argv[1:]))", *words)))
    assert printed.stdout_tail == repr(words)
    for command in OPTION_COMMANDS:
        with pytest.raises(ChangeError, match="command not found"):
            run_hook(node.transport, Hook(tuple(filled(command, node.marker))))
    for name in filled(HOSTILE_NAMES, node.marker):
        with pytest.raises(ValueError):
            Hook(("true",), env={name: "1"})
    # A NUL would cut the word short (over SSH, silently, on the node); a lone surrogate
    # cannot be encoded: refused by the hook, and by the transport itself, before anything runs.
    for word, why in (("a\0; touch m", "NUL byte"), ("\ud800", "surrogate")):
        with pytest.raises(ValueError, match=why):
            Hook(("printf", "%s", word))
        with pytest.raises(ValueError, match=f"^{node.transport.node}: .*{why}"):
            node.transport.run(["printf", "%s", word])
    assert not node.marker.exists()


def git_tree(path: Path) -> Path:
    path.mkdir()
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "one"],
                 ["commit", "-q", "--allow-empty", "-m", "two"]):
        subprocess.run(["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t",
                        *args], check=True, capture_output=True)
    return path


OPTION_REFS = ["--upload-pack=touch {m}", "-c", "--output={m}", "-", "-h", "main\n-c x=y",
               "main touch {m}"]


def minimal_campaign(tmp_path: Path, **node: str) -> dict[str, object]:
    service = {"name": "s", "node": "n", "start": "sleep 60",
               "health_url": "http://127.0.0.1:30000/health"}
    return {"name": "hostile", "nodes": [{"name": "n", "workdir": str(tmp_path / "work"), **node}],
            "pools": [{"name": "p", "endpoint": "http://127.0.0.1:30000", "services": [service]}]}


@pytest.mark.real
def test_git_refs_that_look_like_options_are_refused_by_validation(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    refs = filled(OPTION_REFS, marker)
    campaign = minimal_campaign(tmp_path)
    levels = {f"l{i}": {"git": {"tree": "/src", "ref": ref}} for i, ref in enumerate(refs)}
    by_level = tmp_path / "levels.yaml"
    by_level.write_text(json.dumps({**campaign, "factors": [{"name": "f", "levels": levels}]}))
    with pytest.raises(CampaignError) as refused:
        load_campaign(by_level)
    lines = str(refused.value).splitlines()
    assert [line.split(": ", 2)[1] for line in lines] == [
        f"factors[0].levels.l{i}.git.ref" for i in range(len(refs))]
    assert all(line.startswith(f"{by_level}:") for line in lines)
    by_range = tmp_path / "range.yaml"
    by_range.write_text(json.dumps({**campaign, "commits": {
        "tree": "/src", "good": refs[0], "bad": refs[1]}}))
    with pytest.raises(CampaignError, match=r"commits\.good: the git ref '--upload-pack=.*"
                                            r"begins with '-'.*\n.*commits\.bad: the git ref '-c'"):
        load_campaign(by_range)
    # In the deploy layer the refs are passed after `--end-of-options` (test_gitref.py);
    # a NUL would cut one short (over SSH, silently): refused before git runs.
    tree = str(git_tree(tmp_path / "src"))
    transport = LocalTransport("here")
    for call in (lambda: GitRef(tree, "main\0--output=x", str(tmp_path / "work")),
                 lambda: resolve_range(transport, tree, "HEAD~1", "HEAD\0"),
                 lambda: check_refs(transport, tree, ["HEAD", "\0-c"])):
        with pytest.raises(ValueError, match="NUL byte"):
            call()
    assert not marker.exists()


@pytest.mark.pure
def test_an_ssh_host_never_becomes_words_of_a_proxy_command(tmp_path: Path) -> None:
    """A common ssh config puts the host among a command's words: `ssh -W %h:%p bastion`.
    (No traffic: the trailing `ProxyCommand=false` is the connection unless the host's words
    come first, as the injected option would on the old code: it ran `touch` instead.)"""
    marker = tmp_path / "PWNED"
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  ProxyCommand ssh -F /dev/null -W %h:%p -o ProxyCommand=false "
                      "bastion\n")
    hostile = [f"x:22 -oProxyCommand=touch${{IFS}}{marker};# y", "-oProxyCommand=x", "a;b", "a`b`"]
    for host in hostile:
        target = SSHTarget(node="gpu-x", host=host, ssh_config=str(config),
                           known_hosts=str(tmp_path / "known_hosts"), connect_timeout_s=5)
        transport = SSHTransport(target)
        with pytest.raises(TransportError, match=r"^gpu-x: the host .* refused before connect"):
            transport.run(["true"])
        transport.close()
    user = SSHTransport(SSHTarget(node="gpu-x", host="127.0.0.1", user="-oX",
                                  ssh_config=str(config)))
    with pytest.raises(TransportError, match=r"^gpu-x: the user '-oX' begins with '-'"):
        user.run(["true"])
    path = tmp_path / "campaign.yaml"
    path.write_text(json.dumps(minimal_campaign(tmp_path, transport="ssh", host=hostile[0],
                                                user="root; x")))
    with pytest.raises(CampaignError, match=r"(?s)nodes\[0\]\.host: the host .*"
                                            r"nodes\[0\]\.user: the user 'root; x'"):
        load_campaign(path)
    assert not marker.exists()


CAMPAIGN = """\
name: hostile
nodes:
  - {{name: n, workdir: {workdir}}}
pools:
  - name: p
    endpoint: http://127.0.0.1:30000
    services:
      - name: s
        node: n
        start: sleep 60
        health_url: http://127.0.0.1:30000/health
        env:
          "-Ssh -c 'touch {marker}' x": "1"
      - name: t
        node: n
        start: A=1 sleep 60
        manager: systemd
        unit: ../../etc/passwd
        health_url: http://127.0.0.1:30001/health
factors:
  - name: f
    levels:
      a: {{env: {{"--split-string=sh -c 'touch {marker}'": "1", GOOD: "-S x"}}}}
      b:
        git: {{tree: /src, ref: "--upload-pack=touch {marker}"}}
"""


@pytest.mark.pure
def test_validate_names_file_line_and_field_of_every_hostile_word(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    path = tmp_path / "campaign.yaml"
    path.write_text(CAMPAIGN.format(workdir=tmp_path / "work", marker=marker))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line.removeprefix("error: ") for line in result.output.splitlines()]
    lines = [line for line in lines if line.startswith(str(path))]
    assert [line.split(": ", 2)[:2] for line in lines] == [
        [f"{path}:13", f"pools[0].services[0].env.-Ssh -c 'touch {marker}' x"],
        [f"{path}:16", "pools[0].services[1].start[0]"],
        [f"{path}:18", "pools[0].services[1].unit"],
        [f"{path}:23", f"factors[0].levels.a.env.--split-string=sh -c 'touch {marker}'"],
        [f"{path}:25", "factors[0].levels.b.git.ref"],
    ], result.output
    assert "not an environment variable name" in lines[0] and "contains '='" in lines[1]
    assert "begins with '-'" in lines[4] and "Traceback" not in result.output
    assert not marker.exists() and not (tmp_path / "work").exists()


# -- the systemd manager, in a lab host with systemd as PID 1 (slower: one test) --

@pytest.fixture(scope="module")
def systemd_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHTransport]:
    if os.geteuid() != 0:
        reason = "a systemd lab host needs root"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("sdhostile")
    built = lab_up(directory, hosts=1, systemd=True, prefix=process_prefix("blh"),
                   owner_pid=os.getpid())
    transport = SSHTransport(built.target(1))
    try:
        yield transport
    finally:
        transport.close()
        lab_down(directory)


@pytest.mark.real
def test_systemd_refuses_names_and_passes_words_exactly(systemd_node: SSHTransport,
                                                        tmp_path: Path) -> None:
    marker = Path("/tmp/PWNED_hostile")  # the host's own /tmp (a tmpfs of its container)
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    install_unit(systemd_node, "hostile.service", service_unit(sleeper, description="hostile"))
    manager = SystemdServiceManager(systemd_node)
    try:
        for name in filled(HOSTILE_NAMES, marker):
            with pytest.raises(ValueError, match="not an environment variable name"):
                manager.start(ServiceConfig.of("hostile", sleeper, {name: "1"}))
        dropins = f"{UNIT_DIR}/hostile.service.d"
        assert systemd_node.run(["test", "-e", dropins]).returncode == 1  # nothing written
        words = [w for w in filled(HOSTILE_WORDS, marker) if w not in ("\t", "\x1b[31m red")]
        env = {f"HOSTILE_{i}": word for i, word in enumerate(words)}
        config = ServiceConfig.of("hostile", [*sleeper, *words], env)
        started = manager.start(config)
        argv, seen = manager.process(started.pid)
        assert argv == list(config.argv)
        assert {key: seen.get(key) for key in env} == env
    finally:
        manager.stop("hostile")
        manager.remove_dropin("hostile")
    found = systemd_node.run(["sh", "-c", f"test -e {marker} && echo found || true"]).check()
    assert found.stdout == "" and not marker.exists()
