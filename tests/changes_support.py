"""What the change tests share: the node fixture (this machine, and a lab host over SSH), a small
git repository of a Python package, file checksums, and asking a node whether a change's
expectation holds there."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.changes.base import Expected
from deploy.lab import Lab
from deploy.transports.base import Transport
from deploy.transports.local import LocalTransport
from deploy.transports.ssh import SSHTransport

# The nodes are this machine: its interpreter by absolute path starts in a fraction of the time
# the login PATH's pyenv shim takes (and each SSH command already pays ~0.3 s for root's .bashrc).
PYTHON = sys.executable
PY = shlex.quote(PYTHON)

# Values that would run something if any layer let a shell parse them; {dir} is the test's own
# directory, so a PWNED file there proves it.
HOSTILE = ["'; touch {dir}/PWNED_q; '", "$(touch {dir}/PWNED_d)", "`touch {dir}/PWNED_b`"]

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1",
}


@pytest.fixture(scope="module")
def ssh_node(lab: Lab) -> Iterator[Transport]:
    transport = SSHTransport(lab.target(1))  # one connection for the module: connects cost
    yield transport
    transport.close()


@pytest.fixture
def local_node() -> Transport:
    """For behaviour the transport cannot change (the node fixture proves both carry it)."""
    return LocalTransport("local-node")


@pytest.fixture(params=["local", "ssh"])
def node(request: pytest.FixtureRequest) -> Transport:
    """The same node code over both transports. Lab hosts share this machine's filesystem (only
    the network is namespaced), so a test's files are the node's files."""
    if request.param == "local":
        return LocalTransport("local-node")
    transport: Transport = request.getfixturevalue("ssh_node")
    return transport


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env=env, check=True)
    return done.stdout.strip()


def make_repo(repo: Path) -> list[str]:
    """A package whose module prints its VALUE, one commit per value 1, 2, 3 on branch main;
    build output goes to the ignored directory out/. Returns the shas, oldest first."""
    (repo / "pkg").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text("out/\n")
    (repo / "pkg" / "__init__.py").write_text("")
    shas = []
    for value in (1, 2, 3):
        (repo / "pkg" / "value.py").write_text(
            f"VALUE = {value}\n\nif __name__ == '__main__':\n    print(VALUE)\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"value {value}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def compile_caches(repo: Path) -> list[Path]:
    """Stale bytecode as a real run leaves it: __pycache__ from an import, plus a stray .pyc."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    subprocess.run([PYTHON, "-c", "import pkg.value"], cwd=repo, check=True, env=env)
    (repo / "stray.pyc").write_bytes(b"old")
    caches = [repo / "pkg" / "__pycache__", repo / "stray.pyc"]
    assert all(path.exists() for path in caches)
    return caches


def run_value(repo: Path) -> str:
    done = subprocess.run([PYTHON, "-B", "-m", "pkg.value"], cwd=repo, capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pwned(directory: Path) -> list[Path]:
    """Files the hostile values would create (directories named after them do not count)."""
    return sorted(path for path in directory.iterdir() if path.name.startswith("PWNED"))


def mismatches(transport: Transport, expected: Expected) -> list[str]:
    """What the node shows that a change's expectation (``Applied.expected``) does not say,
    asked through the transport as the proof of load asks: each file's sha256 and the tree's
    HEAD. Empty: the change is in effect."""
    problems = []
    for path, want in expected.files.items():
        done = transport.run(["sha256sum", "--", path])
        got = done.stdout.split()[0] if done.ok else "-"
        if got != want:
            problems.append(f"{path} has sha256 {got}, not {want}")
    if expected.git is not None:
        tree, commit = expected.git
        head = transport.run(["git", "-C", tree, "rev-parse", "HEAD"]).stdout.strip()
        if head != commit:
            problems.append(f"{tree} is at {head}, not {commit}")
    return problems
