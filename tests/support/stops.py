"""SIGTERM (a CI timeout) and SIGINT end a test run cleanly: every fixture's teardown runs.

Python's default for SIGTERM ends the process at once and runs no finalizer: a lab (network
namespaces, sshd daemons, a systemd container), the run's PostgreSQL server and its twins ran
on. So a signal does two things: it tells pytest to stop after the test in hand
(``session.shouldstop``, which nothing in a test can swallow), and it raises KeyboardInterrupt
there, to cut a long test short (code under test may catch that one: a CLI that reports
"interrupted", click's ``CliRunner``; the run stops all the same). pytest then runs every
finalizer. A signal that comes once the run's own teardown has begun is ignored, so that the
teardown it would cut short (a lab's takes seconds) finishes. SIGKILL still ends a run at once:
then tests/support/reaper.py stops its twins and tears its labs down.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

import pytest

_state: dict[str, object] = {"finishing": False, "session": None}


def _stop(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if _state["finishing"]:
        print(f"\n{name}: already stopping, the teardown finishes first", file=sys.stderr,
              flush=True)
        return
    session = _state["session"]
    if isinstance(session, pytest.Session):
        session.shouldstop = f"stopped by {name}"
    raise KeyboardInterrupt(f"stopped by {name}")


def install() -> None:
    """From the main thread (Python runs signal handlers there), before the first fixture."""
    for each in (signal.SIGTERM, signal.SIGINT):
        signal.signal(each, _stop)


def reclaim() -> None:
    """Take the signals back from code that set its own handler (ray.init sets SIGTERM's)."""
    if not owns_the_signals():
        install()


def owns_the_signals() -> bool:
    return all(signal.getsignal(each) is _stop for each in (signal.SIGTERM, signal.SIGINT))


def watch(session: pytest.Session) -> None:
    """The session a signal stops."""
    _state["session"] = session


def finishing() -> None:
    """The run's own teardown has begun: a signal now would only cut it short."""
    _state["finishing"] = True
