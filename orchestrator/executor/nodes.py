"""Before a campaign touches its nodes: take them (one campaign per node) and check them all.

A lock file on each node stops two campaigns from deploying to the same machine; the preflight
reports every problem of every node at once (unreachable, missing executable, a flag the node's
own build rejects, a full disk) before anything is changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from db.store import Store
from deploy import locks
from deploy.preflight import LevelFlags, NodeCheck, Preflight, ServiceCheck, preflight
from deploy.transports.base import TransportError
from deploy.transports.factory import Transports
from experiments.campaign import Campaign
from experiments.secrets import SecretValues, redact, shown, shown_argv


class PreflightFailed(RuntimeError):
    """The campaign cannot run on these nodes as written; nothing was changed."""


def _distinct_nodes(campaign: Campaign) -> list[tuple[str, str]]:
    """(node, workdir) once per machine and directory: two names for one place share a lock."""
    seen: set[tuple[str, str, str]] = set()
    distinct = []
    for node in campaign.nodes:
        place = (node.transport, node.host or "", node.workdir)
        if place not in seen:
            seen.add(place)
            distinct.append((node.name, node.workdir))
    return distinct


@contextmanager
def locked(campaign: Campaign, transports: Transports, campaign_id: str, store: Store, *,
           reclaim: bool, reaper: int = 0) -> Iterator[None]:
    """Hold every node's lock for the block; all or none. Each lock is also a store row, so
    the store tells which nodes a campaign whose driver died still holds. ``reclaim``: take
    over the campaign's own locks whose driver is gone; ``reaper``: this driver's reaper."""
    taken: list[tuple[str, str]] = []
    try:
        for name, workdir in _distinct_nodes(campaign):
            locks.acquire(transports[name], name, workdir, campaign_id, reclaim=reclaim,
                          reaper=reaper)
            taken.append((name, workdir))
            if (campaign_id, name) not in store.held_locks(campaign_id):
                store.lock_taken(campaign_id, name)
        yield
    except BaseException:
        _release(transports, campaign_id, store, taken, quietly=True)
        raise
    _release(transports, campaign_id, store, taken)


def _release(transports: Transports, campaign_id: str, store: Store,
             taken: list[tuple[str, str]], *, quietly: bool = False) -> None:
    """Release the locks taken. ``quietly``, after a failure: a node out of reach keeps its lock
    (and its store row: the store still tells it is held) and never hides why the run failed."""
    for name, workdir in reversed(taken):
        try:
            locks.release(transports[name], name, workdir, campaign_id)
        except TransportError:
            if not quietly:
                raise
            continue
        store.lock_released(campaign_id, name)


def check_nodes(campaign: Campaign, transports: Transports,
                secrets: SecretValues | None = None) -> Preflight:
    """Preflight of every node; raises PreflightFailed with every problem found. ``secrets``:
    their values, for the `--help` runs as at start (without: placeholders)."""
    argv = secrets.argv if secrets is not None else shown_argv
    env = secrets.env if secrets is not None else shown
    checks = []
    for node in campaign.nodes:
        services = tuple(
            ServiceCheck(
                service.name, tuple(argv(service.start)), node.workdir,
                tuple(LevelFlags(factor.name, name, tuple(factor.level(name).flags))
                      for factor in campaign.factors
                      if factor.services is None or service.name in factor.services
                      for name in factor.shown_levels()),
                tuple(sorted(env(service.env).items())),
            )
            for pool in campaign.pools for service in pool.services
            if service.node == node.name
        )
        checks.append(NodeCheck(node.name, transports[node.name], services))
    result = preflight(checks)
    if result.problems:
        lines = [f"{p.node}{'/' + p.service if p.service else ''}: {p.message}"
                 for p in result.problems]
        raise PreflightFailed(redact("preflight found problems, nothing was changed:\n  "
                                     + "\n  ".join(lines)))
    return result
