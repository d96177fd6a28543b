"""One trial's steps, in order, each wired to the steps whose results it reads."""

from __future__ import annotations

from dataclasses import dataclass

from experiments.campaign import Service
from experiments.workload.stress import StressResult
from orchestrator.executor.base import TrialOrder
from orchestrator.executor.steps.base import Running, Step
from orchestrator.executor.steps.deploy import Apply, Health, Hooks, Prove, Restart
from orchestrator.executor.steps.facts import Facts
from orchestrator.executor.steps.workload import Collect, Probe, Stress

DEPLOY_STEPS = frozenset({"apply", "restart", "health", "prove", "hooks"})  # restart_s


WORKLOAD_STEPS = frozenset({"stress", "probe"})  # workload_s


@dataclass(frozen=True)
class TrialSteps:
    """The steps of one trial on a pool with these services; what they observed is read from
    them once they ran."""

    apply: Apply
    services: tuple[tuple[Restart, Health, Prove], ...]
    hooks: Hooks
    facts: tuple[Facts, ...]
    workload: Stress | Probe
    collect: Collect

    @classmethod
    def of(cls, order: TrialOrder, services: list[Service], running: Running,
           probe: bool = False) -> TrialSteps:
        """``running``: what the pool runs before this trial (its steps get copies);
        ``probe``: the user's own probe in place of the stress workload."""
        apply = Apply(order.levels, dict(running.configs))
        per_service = []
        for service in services:
            restart = Restart(service, apply)
            per_service.append((restart, Health(service, apply, restart),
                                Prove(service, apply, restart)))
        nodes = tuple(Facts(node) for node in dict.fromkeys(service.node for service in services))
        stress = None if probe else Stress(order, apply)
        restarts = {restart.service_def.name: restart for restart, _, _ in per_service}
        collect = Collect(dict(running.log_read), restarts, stress)
        return cls(apply, tuple(per_service), Hooks(apply), nodes, stress or Probe(order),
                   collect)

    @property
    def steps(self) -> list[Step]:
        per_service: list[Step] = [step for steps in self.services for step in steps]
        return [self.apply, *per_service, self.hooks, *self.facts, self.workload, self.collect]

    @property
    def deploy(self) -> list[Step]:
        """Only the deploy steps (apply to hooks)."""
        return [step for step in self.steps if step.name in DEPLOY_STEPS]

    @property
    def restarts(self) -> int:
        """The services restarted and proven."""
        return sum(prove.proven is not None for _, _, prove in self.services)

    @property
    def result(self) -> StressResult | None:
        return self.workload.result
