"""One trial on one pool: its chain of steps (executor/steps/), apply → stress → collect.

Runs inside the pool's Ray actor. It never writes the store: it returns a TrialReport value (with
its steps) and the driver, the only writer, stores it. A server that misbehaves is data
(sessions, log events); a trial that fails is either an infrastructure failure (retried, never
judged) or a variant failure (evidence: the variant could not be deployed or proven).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from db.records import GeneratorRow, MetricRow, SessionRow, TrialTiming
from deploy.services.base import ServiceManager
from deploy.services.factory import manager_for
from deploy.transports.factory import Transports
from experiments.campaign import Campaign, Service
from experiments.secrets import SecretValues
from orchestrator.executor.base import GeneratorRun, TrialOrder, TrialReport
from orchestrator.executor.load_generators import LoadGenerators
from orchestrator.executor.source_changes import SourceChanges
from orchestrator.executor.steps.base import PoolParts, Running, failure_of, run_chain
from orchestrator.executor.steps.chain import DEPLOY_STEPS, WORKLOAD_STEPS, TrialSteps

# Begins the error text of an infrastructure failure, for people: the class itself is the
# report's ``failure``, decided by type (orchestrator.executor.steps) and stored as a column.
INFRA_ERROR = "infrastructure error: "


def generator_rows(runs: Iterable[GeneratorRun]) -> list[GeneratorRow]:
    """A report's load generators as the store takes them, in order."""
    return [GeneratorRow(r.node_id, r.address, r.sessions, r.finished, r.stopped) for r in runs]


def service_manager(service: Service, transports: Transports,
                    workdirs: dict[str, str]) -> ServiceManager:
    return manager_for(service.manager, transports[service.node], service=service.name,
                       workdir=workdirs[service.node], unit=service.unit,
                       start_timeout_s=service.startup_timeout_s)


class PoolRunner:
    """Owns one pool's services for the whole campaign; restarts only what a variant changes."""

    def __init__(self, campaign_json: dict[str, object], pool_name: str,
                 secret_values: dict[str, str] | None = None) -> None:
        campaign = Campaign.model_validate(campaign_json)  # secrets as references
        pool = next(p for p in campaign.pools if p.name == pool_name)
        workdirs = {node.name: node.workdir for node in campaign.nodes}
        self.transports = Transports(campaign.nodes)  # one connection per node, built here:
        # paramiko objects cannot travel to a Ray actor
        generators = campaign.generators
        self.parts = PoolParts(
            campaign, pool,
            SecretValues(secret_values or {}),  # read by the driver, in memory only
            self.transports,
            {service.name: service_manager(service, self.transports, workdirs)
             for service in pool.services},
            SourceChanges(campaign, pool, self.transports),
            LoadGenerators(generators) if generators is not None else None)
        self.running = Running()  # what its services run, across trials

    async def run_trial(self, order: TrialOrder) -> TrialReport:
        """One trial: its chain of steps (orchestrator.executor.steps), each timed and reported."""
        started = time.monotonic()
        parts = self.parts
        trial = TrialSteps.of(order, parts.pool.services, self.running, parts.probing)
        steps, failed = await run_chain(trial.steps, parts, self.running)
        restart_s = sum(s.duration_s for s in steps if s.name in DEPLOY_STEPS)
        workload_s = sum(s.duration_s for s in steps if s.name in WORKLOAD_STEPS)
        result = trial.result
        if failed is not None or result is None:
            timing = TrialTiming(time.monotonic() - started, restart_s, 0.0, trial.restarts)
            failure = failure_of(failed) if failed is not None else "variant"
            infra = INFRA_ERROR if failure == "infrastructure" else ""
            return TrialReport(order.trial_id, f"{infra}{failed}", timing, failure=failure,
                               steps=tuple(steps))
        timing = TrialTiming(time.monotonic() - started, restart_s, workload_s, trial.restarts,
                             result.stopped_early)
        sessions = [
            SessionRow(s.index, s.key, s.outcome.value, s.turns, s.first_bad_turn, s.evidence,
                       s.latency_s)
            for s in result.sessions
        ]
        metrics = [MetricRow(m.service, m.t, m.name, dict(m.labels), m.value)
                   for m in trial.workload.samples]
        used = parts.generators.runs if parts.generators is not None else ()
        return TrialReport(order.trial_id, None, timing, sessions, metrics, trial.collect.logs,
                           used, steps=tuple(steps), performance=trial.collect.performance)

    def deploy(self, levels: dict[str, str]) -> int:
        """Only the deploy steps (apply to hooks), raising what fails; the restarts needed."""
        trial = TrialSteps.of(TrialOrder(0, levels, 0), self.parts.pool.services, self.running)
        _, failed = asyncio.run(run_chain(trial.deploy, self.parts, self.running))
        if failed is not None:
            raise failed
        return trial.restarts

    async def shutdown(self) -> None:
        """Stop every service this pool started: nodes are left as they were found."""
        await asyncio.to_thread(self._stop_all)

    def _stop_all(self) -> None:
        parts = self.parts
        try:
            for service in reversed(parts.pool.services):
                parts.managers[service.name].stop(service.name)
            if parts.generators is not None:
                parts.generators.shutdown()
            parts.sources.restore()  # the nodes' files as they were found
        finally:
            self.running.configs.clear()
            self.transports.close()
