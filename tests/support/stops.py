"""SIGTERM (a CI timeout) and SIGINT end a test run cleanly: every fixture's teardown runs.

Python's default for SIGTERM ends the process at once and runs no finalizer: a lab (network
namespaces, sshd daemons, a systemd container), the run's PostgreSQL server and its twins ran
on. pytest runs every finalizer after a KeyboardInterrupt, as after a Ctrl-C: the first SIGTERM
or SIGINT raises one. Later ones, and any that comes once the run's own teardown has begun, are
ignored, so that the teardown they would cut short (a lab's takes seconds) finishes. SIGKILL
still ends a run at once: then tests/support/reaper.py stops its twins and tears its labs down.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

_state = {"stopping": False}


def _ignore(signum: int, frame: FrameType | None) -> None:
    print(f"\n{signal.Signals(signum).name}: already stopping, the teardown finishes first",
          file=sys.stderr, flush=True)


def _stop(signum: int, frame: FrameType | None) -> None:
    if _state["stopping"]:
        _ignore(signum, frame)
        return
    _state["stopping"] = True
    # a handler, not SIG_IGN: what the teardown starts gets the default dispositions back
    for each in (signal.SIGTERM, signal.SIGINT):
        signal.signal(each, _ignore)
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def install() -> None:
    """From the main thread (Python runs signal handlers there), before the first fixture."""
    for each in (signal.SIGTERM, signal.SIGINT):
        signal.signal(each, _stop)


def finishing() -> None:
    """The run's own teardown has begun: a signal now would only cut it short."""
    _state["stopping"] = True
