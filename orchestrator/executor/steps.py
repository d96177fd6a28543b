"""A trial as a chain of named steps: apply → restart → health → prove → hooks → facts → stress →
collect (``probe`` in place of ``stress`` where the campaign's workload is the user's own probe).

restart, health and prove run once per service of the pool, in declared order (a router after
the servers it routes to), and are skipped for a service the variant leaves unchanged. Each step
is timed and says what it observed (the proof of load's checks, the sessions run); the chain
stops at the first failure and the steps after it are recorded as skipped. ``facts`` runs once
per node of the pool (its ``service`` is the node's name) and never fails: what it cannot read
is None (deploy.facts).

A failure has one of three classes, decided by the exception's TYPE: ``infrastructure`` (the way
to the node, a load generator: retried, never judged), ``variant`` (the variant could not be
deployed, never became healthy or could not be proven loaded: evidence, unresolvable after
``runner.MAX_FAILED_ATTEMPTS``) or ``setup`` (the node's own setup, whatever the variant: a unit
not installed or that cannot start; the run stops at once, as bad input).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from db.records import LogRow, StepRow
from deploy.changes.base import ChangeError
from deploy.errors import SetupError
from deploy.facts import node_facts
from deploy.health import HealthTimeout, wait_healthy
from deploy.proof import node_clock, prove_loaded
from deploy.render import LevelSettings, render_service
from deploy.services.base import ServiceConfig, Started
from deploy.services.systemd import StartFailed, VariantNotApplied
from deploy.transports.base import TransportError
from experiments.campaign import Service
from experiments.collect import Sample
from experiments.strategy_config import SweepConfig
from experiments.workload.stress import StressResult
from orchestrator.executor.base import Failure
from orchestrator.executor.load_generators import GeneratorFailed

if TYPE_CHECKING:
    from orchestrator.executor.base import TrialOrder
    from orchestrator.executor.trial import PoolRunner

Details = dict[str, Any]
LOG_TAIL_LINES = 20

class DeployFailed(RuntimeError):
    """The variant could not be deployed, became unhealthy or could not be proven loaded."""

    def __init__(self, message: str, details: Details | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class ProbeBroken(RuntimeError):
    """The user's probe was killed by a signal, ran past its timeout or could not be started:
    the tool's error, never a judgement of the variant (retried as an infrastructure failure;
    the run stops if it persists)."""

    def __init__(self, message: str, details: Details | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class ProbeSkipped(DeployFailed):
    """The user's probe exited 125: the variant cannot be judged (``git bisect skip``); like a
    deploy that fails, unresolvable after ``stored.MAX_FAILED_ATTEMPTS``."""


INFRASTRUCTURE_FAILURES: tuple[type[Exception], ...] = (TransportError, GeneratorFailed,
                                                         ProbeBroken)
VARIANT_FAILURES: tuple[type[Exception], ...] = (DeployFailed, HealthTimeout, ChangeError,
                                                  VariantNotApplied, StartFailed)
SETUP_FAILURES: tuple[type[Exception], ...] = (SetupError,)
# anything else crashes the pool
TRIAL_FAILURES = INFRASTRUCTURE_FAILURES + VARIANT_FAILURES + SETUP_FAILURES


def failure_of(exc: Exception) -> Failure:
    if isinstance(exc, SETUP_FAILURES):
        return "setup"
    return "infrastructure" if isinstance(exc, INFRASTRUCTURE_FAILURES) else "variant"


class Skip(Exception):  # not an error: the step has nothing to do
    """Raised by a step that has nothing to do; its text says why."""


@dataclass
class TrialState:
    """What the steps of one trial hand each other."""

    order: TrialOrder
    settings: list[LevelSettings] = field(default_factory=list)
    configs: dict[str, ServiceConfig] = field(default_factory=dict)
    restarting: set[str] = field(default_factory=set)
    started: dict[str, tuple[Started, float]] = field(default_factory=dict)  # and deployed at
    restarts: int = 0
    result: StressResult | None = None
    samples: list[Sample] = field(default_factory=list)
    logs: list[LogRow] = field(default_factory=list)
    performance: dict[str, Any] | None = None  # what the workload measured (collect)


class Step(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def service(self) -> str | None: ...  # the service a per-service step is about

    async def run(self, pool: PoolRunner, trial: TrialState) -> Details: ...


@dataclass(frozen=True)
class Apply:
    """Files first (git refs, patches): a node whose files change restarts all its services,
    stopped before the move so that no server imports half-switched code; then the services'
    configs, and the ``pre`` hooks of what will restart."""

    name: str = "apply"
    service: str | None = None

    async def run(self, pool: PoolRunner, trial: TrialState) -> Details:
        return await asyncio.to_thread(self._apply, pool, trial)

    @staticmethod
    def _apply(pool: PoolRunner, trial: TrialState) -> Details:
        from orchestrator.executor.trial import level_settings  # trial imports this module

        levels = trial.order.levels
        trial.settings = level_settings(pool.campaign, levels, pool.secrets)
        changing = pool.sources.changing(levels)
        for service in reversed(pool.pool.services):
            if service.node in changing:
                pool.managers[service.name].stop(service.name)
                pool.applied.pop(service.name, None)
        pool.sources.move_to(levels)
        trial.configs = {s.name: render_service(s.name, pool.secrets.argv(s.start),
                                                pool.secrets.env(s.env), trial.settings)
                         for s in pool.pool.services}
        trial.restarting = {name for name, config in trial.configs.items()
                            if pool.applied.get(name) != config
                            or not pool.managers[name].is_running(name)}
        pool.sources.run_hooks(levels, "pre", trial.restarting)
        return {"files_changed_on": sorted(changing), "restarting": sorted(trial.restarting)}


@dataclass(frozen=True)
class ServiceStep:
    """A step of one service that the variant restarts (skipped for one it leaves unchanged);
    its work, ``work``, blocks on the node and runs in a thread."""

    service_def: Service

    @property
    def service(self) -> str | None:
        return self.service_def.name

    async def run(self, pool: PoolRunner, trial: TrialState) -> Details:
        if self.service_def.name not in trial.restarting:
            raise Skip("the variant leaves it unchanged")
        return await asyncio.to_thread(self.work, pool, trial)

    def work(self, pool: PoolRunner, trial: TrialState) -> Details:
        raise NotImplementedError


@dataclass(frozen=True)
class Restart(ServiceStep):
    name: str = "restart"

    def work(self, pool: PoolRunner, trial: TrialState) -> Details:
        name = self.service_def.name
        pool.applied.pop(name, None)
        deployed_at = node_clock(pool.transports[self.service_def.node])  # skew never counts
        try:
            started = pool.managers[name].start(trial.configs[name])
        except ValueError as exc:  # what the service manager cannot hold (a NUL, a newline)
            raise DeployFailed(f"{name}: cannot apply the variant: {exc}") from None
        pool.log_read[name] = started.log_offset
        trial.started[name] = (started, deployed_at)
        return {"pid": started.pid, "deployed_at": deployed_at}


@dataclass(frozen=True)
class Health(ServiceStep):
    name: str = "health"

    def work(self, pool: PoolRunner, trial: TrialState) -> Details:
        service, manager = self.service_def, pool.managers[self.service_def.name]
        urls = [url for url in (service.health_url, service.health_generate_url) if url]
        try:
            for url in urls:
                wait_healthy(url, service.startup_timeout_s,
                             alive=partial(manager.is_running, service.name))
        except HealthTimeout as exc:
            offset = trial.started[service.name][0].log_offset
            tail = manager.read_log(service.name, offset).splitlines()
            last = "\n".join(tail[-LOG_TAIL_LINES:])
            raise DeployFailed(f"{service.name}: {exc}\n{last}".rstrip()) from None
        return {"urls": urls}


@dataclass(frozen=True)
class Prove(ServiceStep):
    """A healthy server is not proof: the variant's argv, env and log markers must be those of
    a process started after the deploy. A variant that cannot be proven is not stressed."""

    name: str = "prove"

    def work(self, pool: PoolRunner, trial: TrialState) -> Details:
        service = self.service_def
        started, deployed_at = trial.started[service.name]
        touching = [s for s in trial.settings if s.touches(service.name)]
        files, git = pool.sources.expected_code(service.node)  # the code it must be running
        proof = prove_loaded(
            pool.transports[service.node], started.pid, trial.configs[service.name],
            deployed_at_epoch=deployed_at,
            log_text=pool.managers[service.name].read_log(service.name, started.log_offset),
            markers=[*service.log_markers, *(m for s in touching for m in s.markers)],
            absent_markers=[m for s in touching for m in s.absent_markers],
            files=files, git=git,
        )
        if not proof.ok:
            raise DeployFailed(f"{service.name}: the variant is not loaded: "
                               + "; ".join(proof.problems),
                               {"checks": proof.checks, "problems": proof.problems})
        pool.applied[service.name] = trial.configs[service.name]
        trial.restarts += 1
        return {"checks": proof.checks}


@dataclass(frozen=True)
class Hooks:
    """The ``post`` hooks of what restarted, once every service is up."""

    name: str = "hooks"
    service: str | None = None

    async def run(self, pool: PoolRunner, trial: TrialState) -> Details:
        await asyncio.to_thread(pool.sources.run_hooks, trial.order.levels, "post",
                                trial.restarting)
        return {}


def node_tree(pool: PoolRunner, node: str) -> str | None:
    """The git source tree of ``node``: the one the trial's git change put at its commit, else
    the first one a level (or the commit range) declares for a service of the node."""
    _, applied = pool.sources.expected_code(node)
    if applied is not None:
        return applied[0]
    campaign = pool.campaign
    services = {s.name for s in pool.pool.services if s.node == node}
    for factor in campaign.factors:
        if factor.services is None or services & set(factor.services):
            for name in factor.levels:
                if (git := factor.level(name).git) is not None:
                    return git.tree
    commits = campaign.commits
    if commits is not None and (commits.services is None or services & set(commits.services)):
        return commits.tree
    plan = campaign.strategy
    if isinstance(plan, SweepConfig) and plan.source_tree is not None and (
            plan.source_services is None or services & set(plan.source_services)):
        return plan.source_tree
    return None


@dataclass(frozen=True)
class Facts:
    """What a report's provenance says of one node (``service``: its name): host, GPU model and
    driver, server version and build, its tree's commit; read once per trial, after the deploy
    (the commit and the server are the variant's). Never fails the trial."""

    service: str
    name: str = "facts"

    async def run(self, pool: PoolRunner, trial: TrialState) -> Details:
        node = self.service
        servers = list(dict.fromkeys(  # each server's base URL, once, in the pool's order
            f"{url.scheme}://{url.netloc}" for url in
            (urlsplit(s.health_url) for s in pool.pool.services if s.node == node)))
        facts = await asyncio.to_thread(
            node_facts, pool.transports[node], tree=node_tree(pool, node), servers=servers,
            api_key=pool.secrets.api_key(pool.pool.api_key_env))
        return facts.details()


@dataclass(frozen=True)
class Stress:
    name: str = "stress"
    service: str | None = None

    async def run(self, pool: PoolRunner, trial: TrialState) -> Details:
        order = trial.order
        trial.result, trial.samples = await pool.stress(order.seed, order.stop_rule,
                                                        order.failing)
        return {"sessions": len(trial.result.sessions), "samples": len(trial.samples),
                "stopped_early": trial.result.stopped_early}


@dataclass(frozen=True)
class Probe:
    """The user's own probe, ``runs`` times (each one session); its runs' exit status, time and
    output are the trial's evidence (``PoolRunner.probe``)."""

    name: str = "probe"
    service: str | None = None

    async def run(self, pool: PoolRunner, trial: TrialState) -> Details:
        trial.result, trial.samples, runs = await pool.probe(trial.order)
        return {"runs": [r.details() for r in runs], "samples": len(trial.samples),
                "stopped_early": trial.result.stopped_early}


@dataclass(frozen=True)
class Collect:
    name: str = "collect"
    service: str | None = None

    async def run(self, pool: PoolRunner, trial: TrialState) -> Details:
        trial.logs = await asyncio.to_thread(pool.collect_logs)
        if trial.result is not None and not pool.probing:  # throughput, goodput, latencies
            trial.performance = trial.result.performance()
        return {"log_events": len(trial.logs)}


DEPLOY_STEPS = frozenset({"apply", "restart", "health", "prove", "hooks"})  # restart_s


WORKLOAD_STEPS = frozenset({"stress", "probe"})  # workload_s


def chain(services: list[Service], probe: bool = False) -> list[Step]:
    """The steps of a trial on a pool with these services, in order; ``probe``: the user's own
    probe in place of the stress workload."""
    per_service: list[Step] = [step for service in services
                               for step in (Restart(service), Health(service), Prove(service))]
    nodes = [Facts(node) for node in dict.fromkeys(service.node for service in services)]
    return [Apply(), *per_service, Hooks(), *nodes, Probe() if probe else Stress(), Collect()]


async def run_chain(steps: list[Step], pool: PoolRunner,
                    trial: TrialState) -> tuple[list[StepRow], Exception | None]:
    """Every step, timed, until one fails (the rest: skipped); the failure, if one did."""
    rows: list[StepRow] = []
    failed: Exception | None = None
    for step in steps:
        began_at, began = datetime.now(UTC), time.monotonic()
        if failed is not None:
            rows.append(StepRow(step.name, step.service, began_at, 0.0, "skipped",
                                {"reason": "an earlier step failed"}))
            continue
        try:
            details, outcome = await step.run(pool, trial), "ok"
        except Skip as skip:
            details, outcome = {"reason": str(skip)}, "skipped"
        except TRIAL_FAILURES as exc:
            failed, outcome = exc, "failed"
            details = {"error": str(exc), "failure": failure_of(exc),
                       **getattr(exc, "details", {})}
        rows.append(StepRow(step.name, step.service, began_at, time.monotonic() - began,
                            outcome, details))
    return rows, failed
