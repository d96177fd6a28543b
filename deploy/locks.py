"""Node locks: one campaign at a time on a node, across machines and drivers.

Two campaigns restarting the same SGLang services would each measure the other's variant. The
lock is a file in the node's workdir, created atomically on the node: the holder's record is
written to a private temporary file first and then hard-linked to the lock name (``ln`` fails if
the name exists), so the lock never exists without its whole record. A lock whose driver died
stays: across machines nobody can tell a dead driver from a slow one, so only an explicit
``break_lock`` naming the holder removes it. One case is told for sure: the same campaign,
resumed on the driver's own host, whose driver process and reaper are gone (after a
``kill -9``): that lock is stale and is taken over. Removal is compare-and-delete on the
record, so a break never removes a lock someone else took meanwhile.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from deploy import procs
from deploy.transports.base import Transport, TransportError
from deploy.workdir import ABSENT_RC, UNSAFE_RC, WORKDIR_SH, UnsafeWorkdir

LOCK_NAME = ".bisect.lock"
REAPER_WAIT_S = 120.0  # a dead driver's reaper stopping its services (10 s grace each)
UNLOCK_HINT = "bisect unlock CAMPAIGN.yaml {node} --holder {holder}"  # the command to run

# acquire: $1 workdir, $2 lock path, $3 record. Exit 0 taken; 1 held (prints the record);
# UNSAFE_RC: the workdir could be another user's (deploy/workdir.py), nothing written.
_ACQUIRE = WORKDIR_SH + r"""
bisect_dir "$1" make && bisect_file "$2" || exit
[ -d "$2" ] && { echo "$2 is a directory, not a lock file" >&2; exit 3; }
t="$2.$$.tmp"
printf '%s\n' "$3" > "$t" || exit 3
if ln -- "$t" "$2" 2>/dev/null; then rm -f -- "$t"; exit 0; fi
if [ ! -e "$2" ]; then
  # No hard links on this filesystem: O_EXCL creation (noclobber) is atomic too; a reader may
  # see it empty for an instant, which reads as "being written".
  rm -f -- "$t"
  if (set -C; printf '%s\n' "$3" > "$2") 2>/dev/null; then exit 0; fi
fi
rm -f -- "$t"; cat -- "$2" 2>/dev/null; exit 1
"""
# Each script checks the workdir first (deploy/workdir.py; no workdir: no lock, exit 2).
_LOCK_IN_WORKDIR = (f'bisect_dir "$(dirname -- "$1")" check && bisect_file "$1"; rc=$?\n'
                    f'[ $rc -eq 0 ] || {{ [ $rc -eq {ABSENT_RC} ] && exit 2; exit $rc; }}\n')
# compare-and-swap by holder, in one round trip: $1 lock path, $2 the holder's record prefix
# (see _prefix), $3 the new record ("" = delete). Prints the record found. Exit 0 swapped;
# 1 another holder; 2 no lock. ("$2"* in a case pattern: the prefix is literal, never a glob.)
_SWAP = WORKDIR_SH + _LOCK_IN_WORKDIR + r"""
[ -e "$1" ] || exit 2
c=$(cat -- "$1") || exit 3
printf '%s\n' "$c"
case $c in "$2"*) ;; *) exit 1 ;; esac
if [ -z "$3" ]; then rm -f -- "$1" || exit 3; exit 0; fi
t="$1.$$.tmp"; printf '%s\n' "$3" > "$t" && mv -f -- "$t" "$1"
"""
_READ = WORKDIR_SH + _LOCK_IN_WORKDIR + r"""
[ -e "$1" ] || exit 2; cat -- "$1" """


@dataclass(frozen=True)
class LockInfo:
    campaign_id: str
    pid: int  # the driver's process id, on its host
    host: str  # the driver's host name
    since: float  # epoch seconds, the driver's clock
    record: str = ""  # the lock file's text, exactly: what compare-and-delete compares
    reaper: int = 0  # the driver's reaper (orchestrator/executor/reaper.py), on the driver's host

    def holder_gone(self) -> bool:
        """True if this lock's driver is known dead: it ran on this host, its process is gone
        and so is its reaper (waited for: it may still be stopping services). This process's
        own lock counts as gone (taken again). Another host's driver cannot be told."""
        if self.host != socket.gethostname():
            return False
        if self.pid == os.getpid():
            return True
        if procs.alive(self.pid):
            return False
        return self.reaper <= 0 or procs.wait_gone(self.reaper, REAPER_WAIT_S)

    def describe(self) -> str:
        if not self.campaign_id:
            return "a campaign whose lock record is being written or is unreadable"
        when = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return (f"campaign {self.campaign_id} (driver pid {self.pid} on {self.host}, "
                f"since {when})")


class NodeLocked(RuntimeError):
    """The node is held by another campaign (or by a lock other than the one expected)."""

    def __init__(self, node: str, info: LockInfo, message: str | None = None) -> None:
        self.node, self.info = node, info
        self.holder, self.since = info.campaign_id, info.since
        hint = UNLOCK_HINT.format(node=shlex.quote(node), holder=shlex.quote(info.campaign_id))
        super().__init__(message or (
            f"node {node} is locked by {info.describe()}: a node runs one campaign at a time. "
            f"If that campaign's driver is gone, break the lock with `{hint}`"))


def lock_path(workdir: str) -> str:
    return f"{workdir.rstrip('/') or ''}/{LOCK_NAME}"


def _record(campaign_id: str, reaper: int = 0) -> str:
    # JSON: one line whatever the id holds (quotes, newlines, shell syntax); the campaign first,
    # so that _prefix identifies the holder from the text alone.
    return json.dumps({"campaign": campaign_id, "pid": os.getpid(),
                       "host": socket.gethostname(), "since": time.time(), "reaper": reaper})


def _prefix(campaign_id: str) -> str:
    """How every record of ``campaign_id`` begins: ``{"campaign": "ID", ``."""
    return json.dumps({"campaign": campaign_id})[:-1] + ", "


def _parse(record: str) -> LockInfo:
    text = record.rstrip("\n")
    try:
        data = json.loads(text)
        return LockInfo(str(data["campaign"]), int(data["pid"]), str(data["host"]),
                        float(data["since"]), text, int(data.get("reaper", 0)))
    except (ValueError, KeyError, TypeError):
        return LockInfo("", 0, "", 0.0, text)


def _sh(transport: Transport, script: str, *args: str) -> tuple[int, str]:
    result = transport.run(["sh", "-c", script, "sh", *args], timeout_s=30)
    if result.returncode == UNSAFE_RC:
        raise UnsafeWorkdir(transport.node, result.stderr)
    if result.returncode not in (0, 1, 2):
        raise TransportError(f"{transport.node}: lock file operation failed: "
                             f"{(result.stderr or result.stdout).strip()[-300:]}")
    return result.returncode, result.stdout


def read(transport: Transport, node: str, workdir: str) -> LockInfo | None:
    """The node's current lock, or None."""
    rc, out = _sh(transport, _READ, lock_path(workdir))
    return None if rc == 2 else _parse(out)


def acquire(transport: Transport, node: str, workdir: str, campaign_id: str, *,
            reclaim: bool = False, reaper: int = 0) -> None:
    """Take the node for ``campaign_id`` or raise NodeLocked naming the holder.

    ``reclaim``: a lock already held by this same campaign id whose driver is gone (killed,
    then ``resume``: ``LockInfo.holder_gone``) is taken over instead of refused. ``reaper``:
    the pid of this driver's reaper, kept in the record for the next one to wait for."""
    record = _record(campaign_id, reaper)
    rc, out = _sh(transport, _ACQUIRE, workdir, lock_path(workdir), record)
    if rc == 0:
        return
    held = _parse(out)
    if reclaim and held.campaign_id == campaign_id and held.holder_gone():
        rc, out = _sh(transport, _SWAP, lock_path(workdir), _prefix(campaign_id), record)
        if rc == 0:
            return
        if rc == 2:  # released meanwhile: take it afresh
            return acquire(transport, node, workdir, campaign_id, reaper=reaper)
        held = _parse(out)
    raise NodeLocked(node, held)


def _remove(transport: Transport, node: str, workdir: str, holder: str,
            refused: str) -> LockInfo | None:
    """Delete the lock if ``holder`` holds it; None if there was none; else NodeLocked."""
    rc, out = _sh(transport, _SWAP, lock_path(workdir), _prefix(holder), "")
    if rc == 2:
        return None
    info = _parse(out)
    if rc == 1:
        raise NodeLocked(node, info, f"node {node} is locked by {info.describe()}, not by "
                                     f"campaign {holder}: {refused}")
    return info


def release(transport: Transport, node: str, workdir: str, campaign_id: str) -> bool:
    """Release our lock: True if released, False if there was none. Raises NodeLocked if another
    campaign holds the node (never removes someone else's lock)."""
    return _remove(transport, node, workdir, campaign_id, "not released") is not None


def break_lock(transport: Transport, node: str, workdir: str,
               expected_holder: str) -> LockInfo | None:
    """Remove the lock of ``expected_holder`` (a dead driver's); returns what was removed, None
    if the node was not locked. Raises NodeLocked if someone else holds it: naming the holder is
    what keeps a break from removing a lock a live campaign has just taken."""
    return _remove(transport, node, workdir, expected_holder, "not broken")
