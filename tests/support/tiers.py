"""The two tiers of tests, and the guard that keeps a ``pure`` test pure.

Every test carries exactly one of two markers (``pytestmark = pytest.mark.pure`` at a module's
top, or on a test or class where a module mixes):

- ``pure``: plain values in, values out. It starts no process and opens no socket (so no twin,
  Ray, sshd, systemd, browser or PostgreSQL); temporary files and SQLite files are allowed, and so
  is a socket pair inside the process (an asyncio event loop's self-pipe).
- ``real``: everything else.

``untiered`` names the tests that carry neither or both (conftest fails the collection on them).
``only_real`` lets ``-m pure`` leave unimported the modules marked real at their top: all their
tests are real (one marked pure there would carry both, which a run of every test refuses).
``guard`` is what conftest's autouse fixture installs for a pure test: from the test's setup
(its fixtures of any scope included: conftest has it set up first) to the teardown of its own
function-scoped fixtures, opening a socket or starting a process raises ``NotPure`` naming the
test, and the attempt is recorded, so that a test which swallows the error fails all the same.
Threads that were running before the test started (a real test's server, a Ray thread) are let
be; threads the test starts are watched as the test itself is. A socket a library opens while
it is being imported (urllib3 tries one for IPv6) is the library's, not the test's: let be.

It sits beside tests/support/network.py's guard, which sees the connects of every test, and
refuses those that would leave the machine: a pure test's connect is refused here first.
"""

from __future__ import annotations

import _posixsubprocess
import os
import re
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

TIERS = ("pure", "real")
REPO = Path(__file__).resolve().parents[2]
SETUP_FIRST = "pure_stays_pure"  # conftest's guard fixture, set up before the others


class NotPure(RuntimeError):
    """A test marked pure opened a socket or started a process."""


REAL_MODULE = re.compile(r"^pytestmark = pytest\.mark\.real$", re.MULTILINE)


def only_real(path: Path, markexpr: str) -> bool:
    """A test module that ``-m pure`` need not import: marked real at its top. Importing them
    (the real tier's 54 modules) took about 4 of the 12 s that importing every test module took
    here, where each is compiled and its asserts rewritten on every run (no bytecode kept)."""
    return (markexpr == "pure" and path.suffix == ".py" and path.name.startswith("test_")
            and REAL_MODULE.search(path.read_text(encoding="utf-8")) is not None)


def tiers_of(item: pytest.Item) -> list[str]:
    return sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})


def untiered(items: Iterable[pytest.Item]) -> list[str]:
    """A line for each test that carries neither marker or both."""
    wrong = []
    for item in items:
        tiers = tiers_of(item)
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: {' and '.join(tiers) or 'neither pure nor real'}")
    return wrong


def set_up_first(items: Iterable[pytest.Item]) -> None:
    """The guard fixture first in each pure test's setup, before its fixtures of a wider scope
    (pytest sets up the wider ones first otherwise): whatever a pure test sets up is guarded."""
    for item in items:
        names = getattr(item, "fixturenames", None)
        if tiers_of(item) == ["pure"] and names is not None and SETUP_FIRST in names:
            names.remove(SETUP_FIRST)
            names.insert(0, SETUP_FIRST)


class Purity:
    """What a pure test tried; ``check`` raises on the test's threads."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.before = set(threading.enumerate()) - {threading.current_thread()}
        self.attempts: list[str] = []

    def check(self, what: str, *, importing_ok: bool = False) -> None:
        if threading.current_thread() in self.before:
            return  # a thread of an earlier test's
        if importing_ok and _importing():
            return  # a library's probe as it is imported (urllib3's for IPv6), not the test's
        what = f"{what} at {_caller()}"
        self.attempts.append(what)
        raise NotPure(f"{self.nodeid} is marked pure but {what}: mark it real "
                      "(tests/support/tiers.py)")


def _importing() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _caller() -> str:
    """The innermost line of this repository's code (not the guard's) that led here."""
    frames = [f for f in traceback.extract_stack() if f.filename != __file__]
    ours = [f for f in frames if f.filename.startswith(f"{REPO}/")
            and "/.venv/" not in f.filename]
    frame = (ours or frames)[-1]
    name = frame.filename.removeprefix(f"{REPO}/")
    return f"{name}:{frame.lineno}"


def _wrap(purity: Purity, original: Callable[..., Any], what: str) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        purity.check(what)
        return original(*args, **kwargs)

    return guarded


def guard(patch: pytest.MonkeyPatch, purity: Purity) -> None:
    """No socket, no process from here until ``patch`` is undone."""
    socket_init = socket.socket.__init__

    def init(sock: socket.socket, family: int = -1, type: int = -1, proto: int = -1,
             fileno: int | None = None) -> None:
        if fileno is None:  # a new socket; one around a file descriptor (socketpair) is let be
            purity.check("opened a socket", importing_ok=True)
        socket_init(sock, family, type, proto, fileno)

    def connecting(original: Callable[..., Any], verb: str) -> Callable[..., Any]:
        def guarded(sock: socket.socket, address: Any) -> Any:
            purity.check(f"{verb} a socket ({address!r})", importing_ok=True)
            return original(sock, address)

        return guarded

    patch.setattr(socket.socket, "__init__", init)
    patch.setattr(socket.socket, "connect", connecting(socket.socket.connect, "connected"))
    patch.setattr(socket.socket, "connect_ex", connecting(socket.socket.connect_ex, "connected"))
    patch.setattr(socket.socket, "bind", connecting(socket.socket.bind, "bound"))

    popen_init = subprocess.Popen.__init__

    def popen(proc: subprocess.Popen[Any], args: Any, *more: Any, **kwargs: Any) -> None:
        purity.check(f"started a process ({args!r})")
        popen_init(proc, args, *more, **kwargs)

    patch.setattr(subprocess.Popen, "__init__", popen)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            patch.setattr(os, name, _wrap(purity, getattr(os, name), f"called os.{name}"))
    patch.setattr(_posixsubprocess, "fork_exec",
                  _wrap(purity, _posixsubprocess.fork_exec, "started a process (fork_exec)"))
