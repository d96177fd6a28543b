"""A root run trusts no workdir it did not make, and signals no process it did not start
(issue 26, item 1).

The attack, as found: under a world-writable, sticky directory (the README's old default was
``/var/tmp/bisect``) another user creates the workdir first, with a pid file naming an unrelated
process and a log file that is a symbolic link to a root-owned file. The root run then killed
that process's group, made the link's target 0600 and appended the service log to it. Here the
other user is ``nobody`` (uid 65534), the process manager runs as root on this machine and over
real SSH into a lab host, and through ``bisect run``.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from db.store import Store
from deploy import locks, procs
from deploy.lab import Lab
from deploy.services.base import ServiceConfig
from deploy.services.process import ProcessServiceManager
from deploy.transports.base import Transport
from deploy.transports.local import LocalTransport
from deploy.transports.ssh import SSHTransport
from deploy.workdir import UnsafeWorkdir
from orchestrator.cli import app
from orchestrator.demo import twin_pool

pytestmark = pytest.mark.real

OTHER = 65534  # nobody: any local user who is not bisect's
PRECIOUS = b"root's own file\n"
SERVICE = ServiceConfig.of("svc", ["sleep", "300"], {})


@dataclass
class Scene:
    transport: Transport
    base: Path  # a directory like /var/tmp: root's, world-writable, sticky
    victim: subprocess.Popen[bytes]  # an unrelated process, leading its own group
    target: Path  # a root-owned file, 0644


@pytest.fixture(params=["local", "ssh"])
def scene(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Scene]:
    if os.geteuid() != 0:
        pytest.fail("these tests plant files as another user: they need root")
    transport: Transport
    if request.param == "local":
        transport, root = LocalTransport("here"), tmp_path
    else:  # a lab host shares this filesystem: the same files, reached over SSH
        lab: Lab = request.getfixturevalue("lab")
        transport = SSHTransport(lab.target(1))
        root = Path(lab.host(1).workdir) / f"planted-{tmp_path.name}"
        root.mkdir(mode=0o700)
    try:
        with staged(transport, root, tmp_path) as made:
            yield made
    finally:
        transport.close()


@contextmanager
def staged(transport: Transport, root: Path, tmp_path: Path) -> Iterator[Scene]:
    """A /var/tmp under ``root``, a root-owned file, an unrelated process; all gone after."""
    base = root / "var-tmp"
    base.mkdir()
    base.chmod(0o1777)
    target = tmp_path / "shadow"
    target.write_bytes(PRECIOUS)
    target.chmod(0o644)
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        yield Scene(transport, base, victim, target)
    finally:
        victim.kill()
        victim.wait()
        subprocess.run(["rm", "-rf", "--", str(base)], check=False)


def pid_record(pid: int, token: str = "0" * 32) -> str:
    """What an attacker can write: the victim's pid and its real start time (readable by anyone
    in /proc), with a token of their own."""
    return f"{pid} {procs.start_time(pid)} {token}\n"


def planted(scene: Scene) -> Path:
    """The workdir as the other user leaves it: theirs, a pid file naming the victim, the log a
    link to the root-owned file."""
    work = scene.base / "bisect"
    work.mkdir()
    (work / "svc.pid").write_text(pid_record(scene.victim.pid))
    (work / "svc.log").symlink_to(scene.target)
    for path in (work, work / "svc.pid"):
        os.chown(path, OTHER, OTHER)
    os.lchown(work / "svc.log", OTHER, OTHER)
    return work


def assert_untouched(scene: Scene) -> None:
    assert procs.alive(scene.victim.pid), "bisect signalled a process it did not start"
    assert scene.target.read_bytes() == PRECIOUS
    assert stat.S_IMODE(scene.target.stat().st_mode) == 0o644


def test_a_workdir_another_user_made_is_refused_and_nothing_is_signalled(scene: Scene) -> None:
    work = planted(scene)
    manager = ProcessServiceManager(scene.transport, str(work))
    for action in (lambda: manager.start(SERVICE), lambda: manager.stop("svc"),
                   lambda: manager.stop_leftover("svc"), lambda: manager.is_running("svc"),
                   lambda: manager.read_log("svc"),
                   lambda: locks.acquire(scene.transport, "n", str(work), "c1"),
                   lambda: locks.read(scene.transport, "n", str(work)),
                   lambda: locks.break_lock(scene.transport, "n", str(work), "c1")):
        with pytest.raises(UnsafeWorkdir, match=re.escape(f"{work} is owned by uid {OTHER}")):
            action()
    assert_untouched(scene)
    assert sorted(p.name for p in work.iterdir()) == ["svc.log", "svc.pid"]  # nothing written


@pytest.mark.parametrize("shape", ["world-writable", "group-writable", "link", "link-above",
                                   "parent-other-user", "parent-writable", "dotdot"])
def test_a_path_another_user_could_change_is_refused(scene: Scene, shape: str) -> None:
    real = scene.base / "real"
    real.mkdir(mode=0o700)
    work = real / "bisect"
    if shape in ("world-writable", "group-writable"):
        work.mkdir()
        work.chmod(0o777 if shape == "world-writable" else 0o770)
        expected = "is writable by other users"
    elif shape == "link":  # the workdir itself a link to a directory of root's
        work.mkdir(mode=0o700)
        work = scene.base / "link"
        work.symlink_to(real / "bisect")
        expected = "is a symbolic link"
    elif shape == "link-above":
        (scene.base / "up").symlink_to(real)
        work = scene.base / "up" / "bisect"
        expected = "is a symbolic link"
    elif shape == "parent-other-user":
        os.chown(real, OTHER, OTHER)
        expected = f"{real} is owned by uid {OTHER}, who could replace"
    elif shape == "parent-writable":
        real.chmod(0o777)
        expected = f"{real} is writable by other users and not sticky"
    else:
        work = real / ".." / "real" / "bisect"
        expected = "'..' in the path"
    if work.is_dir():  # where it can be: a pid file naming the victim
        (work / "svc.pid").write_text(pid_record(scene.victim.pid))
    manager = ProcessServiceManager(scene.transport, str(work))
    for action in (lambda: manager.start(SERVICE), lambda: manager.stop("svc"),
                   lambda: locks.acquire(scene.transport, "n", str(work), "c1")):
        with pytest.raises(UnsafeWorkdir, match=re.escape(expected)):
            action()
    assert_untouched(scene)
    assert not (real / "bisect").exists() or not any(
        p.name.endswith(".log") for p in (real / "bisect").iterdir())


def test_a_link_or_a_foreign_file_in_a_safe_workdir_is_never_opened(scene: Scene) -> None:
    work = scene.base / "bisect"
    work.mkdir(mode=0o700)
    manager = ProcessServiceManager(scene.transport, str(work))
    (work / "svc.log").symlink_to(scene.target)
    with pytest.raises(UnsafeWorkdir, match=r"svc\.log is a symbolic link"):
        manager.start(SERVICE)
    (work / "svc.log").unlink()
    (work / "svc.log").write_text("")
    os.chown(work / "svc.log", OTHER, OTHER)
    with pytest.raises(UnsafeWorkdir, match=r"svc\.log is owned by another user"):
        manager.start(SERVICE)
    assert_untouched(scene)


def test_a_pid_file_that_does_not_prove_the_process_is_bisects_signals_nothing(
        scene: Scene) -> None:
    """In a workdir of bisect's own, a pid file naming another process (a reused pid after a
    reboot; one written by an older bisect; a forged start time and token) is dropped, and
    nothing is signalled."""
    work = scene.base / "bisect"
    work.mkdir(mode=0o700)
    manager = ProcessServiceManager(scene.transport, str(work))
    victim = scene.victim.pid
    for record in (f"{victim}\n", pid_record(victim), f"{victim} 1 {'0' * 32}\n", "garbage\n",
                   f"1 {procs.start_time(1)} {'0' * 32}\n"):
        (work / "svc.pid").write_text(record)
        assert not manager.is_running("svc") and manager.pid("svc") is None
        manager.stop("svc")
        assert not (work / "svc.pid").exists(), record
    assert_untouched(scene)


def test_bisect_makes_its_workdir_owner_only_and_stops_what_it_started(scene: Scene) -> None:
    work = scene.base / "new" / "bisect"  # neither exists: both made 0700
    manager = ProcessServiceManager(scene.transport, str(work))
    started = manager.start(SERVICE)
    try:
        for path in (work.parent, work):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700 and path.stat().st_uid == 0
        for name in ("svc.pid", "svc.log"):
            assert stat.S_IMODE((work / name).stat().st_mode) == 0o600
        assert manager.pid("svc") == started.pid
        # The token is in the service's environment: how its group is told from any other.
        token = (work / "svc.pid").read_text().split()[2]
        environ = Path(f"/proc/{started.pid}/environ").read_bytes().split(b"\0")
        assert f"BISECT_SERVICE_TOKEN={token}".encode() in environ
    finally:
        manager.stop("svc")
    assert procs.wait_gone(started.pid, 5) and not (work / "svc.pid").exists()
    assert_untouched(scene)


def test_bisect_run_on_a_planted_workdir_is_refused_with_exit_2(tmp_path: Path) -> None:
    with staged(LocalTransport("here"), tmp_path, tmp_path) as scene:
        work = planted(scene)
        faults = tmp_path / "faults.yaml"
        faults.write_text("rules: []\n")
        spec = {
            "name": "planted",
            "nodes": [{"name": "here", "workdir": str(work)}],
            "pools": [twin_pool("p", "here", faults, latency_ms=1)],
            "factors": [{"name": "f", "levels": {"a": {}, "b": {}}}],
            "workload": {"sessions": 4, "rounds": 1, "timeout_s": 10},
            "strategy": {"kind": "factorial", "repeats": 1},
        }
        path = tmp_path / "campaign.yaml"
        path.write_text(yaml.safe_dump(spec))
        db = tmp_path / "bisect.db"
        result = CliRunner().invoke(app, ["run", str(path), "--store", str(db)])
        assert result.exit_code == 2, result.output
        assert f"here: unsafe workdir: {work} is owned by uid {OTHER}" in result.stderr
        assert "Traceback" not in result.output
        with Store.open(str(db)) as store:
            assert [c.status for c in store.list_campaigns()] == ["refused"]
        assert_untouched(scene)


def test_a_relative_workdir_is_taken_from_the_physical_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user whose shell's current directory runs through a link (its logical $PWD) still gets
    a relative workdir: resolved from the physical directory, which has no link on its path."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path / "link")
    monkeypatch.setenv("PWD", str(tmp_path / "link"))  # as a shell leaves it
    manager = ProcessServiceManager(LocalTransport("here"), "bisect-demo/services")
    started = manager.start(SERVICE)
    try:
        assert (real / "bisect-demo" / "services" / "svc.pid").is_file()
        assert manager.pid("svc") == started.pid
    finally:
        manager.stop("svc")
    assert procs.wait_gone(started.pid, 5)
