"""Processes of this machine, as /proc tells them: alive or gone, and when they started.

A killed process stays a zombie until its parent reaps it: ``kill -0`` still succeeds on it, so
"alive" here means a process that is not a zombie. ``start_time`` tells a process from a later
one that reuses its pid.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first, then the parent;
    proc(5) numbers them from 3 where this list starts at 0); None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """True if ``pid`` is a live process (a zombie is dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's, but there
    fields = stat_fields(pid)
    if fields is None:
        return not Path("/proc/self/stat").exists()  # no /proc: kill -0 is all we know
    return fields[0] not in ("Z", "X")


def start_time(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (None if gone)."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Wait until ``pid`` is no longer alive; True if it is gone within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    try:
        descriptor = os.pidfd_open(pid)
    except (OSError, AttributeError):  # gone already, or no pidfd here: poll /proc
        descriptor = -1
    try:
        while alive(pid):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if descriptor >= 0:  # readable when the process ends: an event, not a guess
                poller = select.poll()
                poller.register(descriptor, select.POLLIN)
                poller.poll(min(left, 1.0) * 1000)
            else:
                time.sleep(min(left, 0.05))
        return True
    finally:
        if descriptor >= 0:
            with contextlib.suppress(OSError):
                os.close(descriptor)
