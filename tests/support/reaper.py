"""A test run's reaper: a small process that outlives a killed test run and stops what it started.

SIGTERM and SIGINT end a run cleanly (conftest makes them a KeyboardInterrupt, so every fixture's
teardown runs). SIGKILL runs nothing, and what the fixtures start is made to outlive its starter:
a lab's sshd daemons and systemd containers are detached on purpose, and the twins are
processes of their own. The reaper is the driver's idea (orchestrator/executor/reaper.py): started
before the first of them, in a session of its own (a kill of the run's process group does not
reach it), it reads the run's messages on a pipe until end of file, which comes when the run
exits, however it exits; then it stops the twins and tears down the labs it was told of and not
told are gone. A run that tears them down itself says so, and the reaper has nothing left to do.

Messages, one JSON object a line: ``{"lab": DIRECTORY, "prefix": PREFIX}``, ``{"lab_down":
DIRECTORY}``, ``{"process": PID, "start": TICKS}``, ``{"process_gone": PID}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from deploy.lab import lab_down
from deploy.lab.sshd import start_time

__all__ = ["Reaper", "reaper", "start_time"]
REPO = Path(__file__).resolve().parents[2]


class Reaper:
    """The run's side: one reaper per test process, started when first needed."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.reaper"], cwd=REPO, stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def send(self, **message: Any) -> None:
        pipe: IO[bytes] | None = self.process.stdin
        if pipe is None or pipe.closed:
            return
        with contextlib.suppress(BrokenPipeError):
            pipe.write(json.dumps(message).encode() + b"\n")
            pipe.flush()


_REAPERS: dict[int, Reaper] = {}  # by the pid of the run (a forked child needs its own)


def reaper() -> Reaper:
    found = _REAPERS.get(os.getpid())
    if found is None or found.process.poll() is not None:
        found = _REAPERS[os.getpid()] = Reaper()
    return found


def _stop(processes: dict[int, int]) -> None:
    """TERM the processes that are still the ones we were told of, then KILL what is left."""
    for sig, grace_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        alive = [pid for pid, start in processes.items() if start_time(pid) == start]
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = [pid for pid in alive if start_time(pid) == processes[pid]]


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # only the end of the pipe ends it
        signal.signal(sig, signal.SIG_IGN)
    labs: dict[str, str] = {}
    processes: dict[int, int] = {}
    for line in sys.stdin.buffer:  # until the run exits, however it exits
        with contextlib.suppress(ValueError, TypeError, KeyError):
            message = json.loads(line)
            if "lab" in message:
                labs[str(message["lab"])] = str(message["prefix"])
            if "lab_down" in message:
                labs.pop(str(message["lab_down"]), None)
            if "process" in message:
                processes[int(message["process"])] = int(message["start"])
            if "process_gone" in message:
                processes.pop(int(message["process_gone"]), None)
    _stop(processes)
    for directory, prefix in labs.items():
        with contextlib.suppress(Exception):  # one that fails: tear down the others
            lab_down(directory, prefix=prefix)


if __name__ == "__main__":
    main()
