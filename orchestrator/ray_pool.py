"""Ray behind one small adapter: pools become actors; nothing else in the code sees Ray."""

from __future__ import annotations

import logging
import os
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.trial import PoolRunner, TrialOrder, TrialReport


def ensure_ray(address: str | None = None) -> bool:
    """Start (or join) Ray once per process; True if this call started it."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        address=address,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        configure_logging=True,
    )
    return True


class PoolCrashed(RuntimeError):
    """A pool's actor died or raised: a broken run, not evidence about a variant."""


class PoolActors:
    """One actor per pool. Actors hold no CPU reservation: they mostly wait on the network."""

    def __init__(self, campaign_json: dict[str, Any], pool_names: list[str]) -> None:
        # On the driver's machine: `transport: local` nodes are this machine, and only load
        # generators (orchestrator/load_generators.py) go to the cluster's other machines.
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        actor = ray.remote(num_cpus=0)(PoolRunner).options(scheduling_strategy=here)
        self.actors: dict[str, Any] = {
            name: actor.remote(campaign_json, name) for name in pool_names
        }
        self.running: dict[Any, str] = {}

    def submit(self, pool: str, order: TrialOrder) -> None:
        self.running[self.actors[pool].run_trial.remote(order)] = pool

    @property
    def busy(self) -> set[str]:
        return set(self.running.values())

    def next_report(self) -> tuple[str, TrialReport]:
        """Block until some pool finishes its trial; return the pool and its report."""
        [ready], _ = ray.wait(list(self.running), num_returns=1)
        pool = self.running.pop(ready)
        try:
            report: TrialReport = ray.get(ready)
        except RayError as exc:
            cause = getattr(exc, "cause", None) or exc
            raise PoolCrashed(f"pool {pool} crashed: {type(cause).__name__}: {cause}") from exc
        return pool, report

    def shutdown(self) -> None:
        try:
            ray.get([a.shutdown.remote() for a in self.actors.values()], timeout=120)
        finally:
            for handle in self.actors.values():
                ray.kill(handle)
