"""`bisect doctor ID`: is this campaign's store sound, are its nodes free, and what to do if not.

The store part reads rows only (``Store.health``). The node part (``nodes=True``) reads each
node's lock file over the campaign's own transports, and tells a live driver from a dead one when
the driver ran on this machine (its pid and host are in the lock record).
"""

from __future__ import annotations

import shlex
import socket
from dataclasses import asdict, dataclass
from typing import Any, Literal

from db.integrity import StoreHealth
from db.store import Store
from deploy import procs
from deploy.locks import LockInfo
from deploy.locks import read as read_lock
from deploy.transports.base import TransportError
from deploy.transports.factory import transport_for
from experiments.campaign import Campaign

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    severity: Severity  # error: the store or a node needs a hand; warning: resume mends it
    kind: str
    message: str
    advice: str = ""


@dataclass(frozen=True)
class Diagnosis:
    campaign_id: str
    status: str
    trials: int
    findings: tuple[Finding, ...]

    @property
    def healthy(self) -> bool:
        return not any(f.severity in ("error", "warning") for f in self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {"campaign": self.campaign_id, "status": self.status, "trials": self.trials,
                "healthy": self.healthy, "findings": [asdict(f) for f in self.findings]}


def _trials(seqs: tuple[int, ...], were: str = "were") -> str:
    """'trial 3 was' / 'trials 3, 4 were'."""
    if len(seqs) == 1:
        return f"trial {seqs[0]} {'was' if were == 'were' else 'is'}"
    return f"trials {', '.join(str(seq) for seq in seqs)} {were}"


def _store_findings(health: StoreHealth, resume: str, driver_alive: bool) -> list[Finding]:
    found = []
    if health.damage:
        found.append(Finding("error", "damaged", f"the store file is damaged: {health.damage[0]}"
                             + (f" (and {len(health.damage) - 1} more)"
                                if len(health.damage) > 1 else ""),
                             "copy it aside and recover what reads (sqlite3 STORE .recover) "
                             "before any other run writes to it"))
        return found  # nothing else it holds can be trusted, and no run should write to it
    for table, rows in health.orphans:
        found.append(Finding("warning", "orphans", f"{rows} {table} rows belong to no trial or "
                             "variant (a write cut short); no verdict reads them"))
    if health.duplicated:
        found.append(Finding("error", "duplicated", f"{_trials(health.duplicated, 'are')} "
                             "recorded more than once", "report it: the driver numbers each "
                             "trial once"))
    if health.done_empty:
        found.append(Finding("error", "empty", f"{_trials(health.done_empty, 'are')} done "
                             "with no session", "report it: a trial is stored whole or not at "
                             "all"))
    if driver_alive:
        return found  # running trials, a 'running' status and held locks are its work
    if health.unfinished:
        found.append(Finding("warning", "unfinished", f"{_trials(health.unfinished)} left "
                             "running by a driver that stopped",
                             f"`{resume}` discards them and runs them again"))
    if health.status in ("running", "interrupted") and not health.unfinished:
        found.append(Finding("warning", "interrupted", f"the campaign is {health.status} but no "
                             "driver is running it", f"`{resume}` goes on from its "
                             f"{health.trials} done trials"))
    return found


def _lock_findings(health: StoreHealth, campaign: Campaign, resume: str,
                   store_arg: str) -> tuple[list[Finding], bool]:
    """Each node's lock file; True when this campaign's driver is alive on this machine."""
    found, alive = [], False
    quoted = shlex.quote(health.campaign_id)
    for node in campaign.nodes:
        try:
            transport = transport_for(node)
            try:
                lock = read_lock(transport, node.name, node.workdir)
            finally:
                transport.close()
        except (TransportError, ValueError) as exc:
            found.append(Finding("error", "unreachable", f"node {node.name}: cannot read its "
                                 f"lock: {exc}", "check the way to the node, then run doctor "
                                 "again"))
            continue
        recorded = node.name in health.held_locks
        if lock is None:
            if recorded:
                found.append(Finding("warning", "stale_lock_row", f"node {node.name} is free, "
                                     "but the store says this campaign still holds it",
                                     f"`bisect unlock CAMPAIGN.yaml {shlex.quote(node.name)} "
                                     f"--holder {quoted} --store {shlex.quote(store_arg)}`"))
            continue
        if lock.campaign_id != health.campaign_id:
            found.append(Finding("info", "other_campaign",
                                 f"node {node.name} is held by {lock.describe()}"))
            continue
        if _driver_alive(lock):
            alive = True
            found.append(Finding("info", "running", f"node {node.name}: this campaign's driver "
                                 f"(pid {lock.pid}) is running it now"))
        else:
            found.append(Finding("warning", "stale_lock", f"node {node.name} is still locked by "
                                 f"this campaign's driver, which is gone ({lock.describe()})",
                                 f"`{resume}` restores the node and releases it; "
                                 f"to give the node up instead: `bisect unlock CAMPAIGN.yaml "
                                 f"{shlex.quote(node.name)} --holder {quoted}`"))
    return found, alive


def _driver_alive(lock: LockInfo) -> bool:
    """On another machine nobody can tell a dead driver from a slow one: assume alive. Here,
    a driver gone whose reaper still stops its services counts as running too."""
    if lock.host != socket.gethostname():
        return True
    return procs.alive(lock.pid) or procs.alive(lock.reaper)


def diagnose(store: Store, campaign_id: str, *, nodes: bool = False,
             store_arg: str = "bisect.db") -> Diagnosis:
    """``store_arg``: the store as the user named it, for commands to copy and run."""
    health = store.health(campaign_id)
    resume = f"bisect resume {shlex.quote(campaign_id)}"
    if store_arg != "bisect.db":
        resume += f" --store {shlex.quote(store_arg)}"
    found: list[Finding] = []
    alive = False
    if nodes:
        campaign = Campaign.model_validate(store.get_campaign(campaign_id).spec)
        found, alive = _lock_findings(health, campaign, resume, store_arg)
    elif health.held_locks and health.status not in ("running", "interrupted"):
        found.append(Finding("warning", "stale_lock_row", f"the campaign is {health.status} but "
                             f"its locks on {', '.join(health.held_locks)} were never released",
                             "`bisect doctor --nodes` reads the nodes' lock files"))
    found = _store_findings(health, resume, alive) + found
    if not nodes and not health.damage and (health.unfinished or health.status == "running"):
        found.append(Finding("info", "driver_unknown", "without --nodes, a driver that is "
                             "running this campaign now cannot be told from a dead one"))
    return Diagnosis(campaign_id, health.status, health.trials, tuple(found))
