"""Every lab on this machine, so that labs built concurrently (a CI run, a dev session, two test
runs) stay out of each other's way and labs whose owner died do not pile up.

``/run`` is a tmpfs: the registry is forgotten at reboot, exactly when namespaces and daemons go.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.lab.model import load_lab
from deploy.lab.sshd import is_ours, start_time

REGISTRY = Path("/run/bisect-labs")


@contextmanager
def locked() -> Iterator[None]:
    """One lab change at a time on this machine: choosing a free subnet and taking it is atomic."""
    REGISTRY.mkdir(mode=0o755, parents=True, exist_ok=True)
    with open(REGISTRY / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def register(prefix: str, directory: str, owner_pid: int | None) -> None:
    entry = {"directory": directory, "owner_pid": owner_pid,
             "owner_start": start_time(owner_pid) if owner_pid else None}
    (REGISTRY / f"{prefix}.json").write_text(json.dumps(entry) + "\n", encoding="utf-8")


def unregister(prefix: str) -> None:
    (REGISTRY / f"{prefix}.json").unlink(missing_ok=True)


def orphans() -> Iterator[tuple[str, str]]:
    """(prefix, directory) of labs nobody can use any more: their owner process has exited, or
    their directory no longer describes them (a test run's temporary directory, removed)."""
    for path in sorted(REGISTRY.glob("*.json")):
        prefix = path.stem
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            directory = str(entry["directory"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        try:
            lab = load_lab(directory)
        except Exception:  # an unreadable lab.json describes nothing we could tear down by it
            lab = None
        owner = entry.get("owner_pid")
        owner_gone = owner is not None and not is_ours(owner, entry.get("owner_start"))
        if owner_gone or lab is None or lab.prefix != prefix:
            yield prefix, directory


def process_prefix(base: str) -> str:
    """``base`` plus this process's pid in base 36 (fixed width, so no prefix extends another):
    concurrent processes never share names, and a dead run's lab is an orphan."""
    digits, pid = "", os.getpid()
    while pid:
        pid, rest = divmod(pid, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[rest] + digits
    return base + digits.rjust(5, "0")
