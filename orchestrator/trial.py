"""One trial on one pool: apply → restart → prove healthy → stress → collect.

Runs inside the pool's Ray actor. It never writes the store: it returns a TrialReport value and
the driver, the only writer, stores it. A server that misbehaves is data (sessions, log events);
a deploy that cannot be completed is an infrastructure failure of the trial, never a verdict input.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

from db.records import GeneratorRow, LogRow, MetricRow, SessionRow, TrialTiming
from deploy.health import HealthTimeout, wait_healthy
from deploy.proof import node_clock, prove_loaded
from deploy.render import LevelSettings, render_service
from deploy.services.base import ServiceConfig, ServiceManager, Started
from deploy.services.factory import manager_for
from deploy.transports.base import TransportError
from deploy.transports.factory import Transports
from deploy.variants.base import VariantError
from experiments.campaign import Campaign, Pool, Service
from experiments.collect import Sample, log_events, poll_metrics
from experiments.outcomes import is_corrupt, is_infra
from experiments.secrets import SecretValues, shown
from experiments.workload.stress import SessionResult, StressResult, run_stress
from orchestrator.load_generators import GeneratorFailed, GeneratorRun, LoadGenerators
from orchestrator.source_variants import SourceVariants
from orchestrator.stats.compare import StopWhenFailing

LOG_TAIL_LINES = 20
# Marks a failure of the way to the node (SSH drop, command timeout) or of a load generator, not
# of the variant: such a trial is retried and never makes the variant unresolvable
# (runner.unresolvable).
INFRA_ERROR = "infrastructure error: "


@dataclass(frozen=True)
class TrialOrder:
    trial_id: int
    levels: dict[str, str]
    seed: int
    stop_rule: StopWhenFailing | None = None  # a sequential test may end the workload early
    target: str = "corruption"  # what the stop rule counts: corrupt sessions, or wedged ones


@dataclass(frozen=True)
class TrialReport:
    trial_id: int
    error: str | None
    timing: TrialTiming
    sessions: list[SessionRow] = field(default_factory=list)
    metrics: list[MetricRow] = field(default_factory=list)
    logs: list[LogRow] = field(default_factory=list)
    generators: tuple[GeneratorRun, ...] = ()  # the load generators that ran the workload


def generator_rows(runs: Iterable[GeneratorRun]) -> list[GeneratorRow]:
    """A report's load generators as the store takes them, in order."""
    return [GeneratorRow(r.node_id, r.address, r.sessions, r.finished, r.stopped) for r in runs]


class DeployFailed(RuntimeError):
    pass


def service_manager(service: Service, transports: Transports,
                    workdirs: dict[str, str]) -> ServiceManager:
    return manager_for(service.manager, transports[service.node], service=service.name,
                       workdir=workdirs[service.node], unit=service.unit,
                       start_timeout_s=service.startup_timeout_s)


def level_settings(campaign: Campaign, levels: dict[str, str],
                   secrets: SecretValues | None = None) -> list[LevelSettings]:
    """Each factor's chosen level; secrets as their values, or (no ``secrets``: to compare
    variants) as placeholders."""
    settings = []
    for factor in campaign.factors:
        level = factor.level(levels[factor.name])
        touched = frozenset(factor.services) if factor.services is not None else None
        env = secrets.env(level.env) if secrets is not None else shown(level.env)
        settings.append(LevelSettings(factor.name, levels[factor.name], env,
                                      tuple(level.flags), touched, tuple(level.log_markers),
                                      tuple(level.absent_log_markers)))
    return settings


class PoolRunner:
    """Owns one pool's services for the whole campaign; restarts only what a variant changes."""

    def __init__(self, campaign_json: dict[str, object], pool_name: str,
                 secret_values: dict[str, str] | None = None) -> None:
        self.campaign = Campaign.model_validate(campaign_json)  # secrets as references
        self.secrets = SecretValues(secret_values or {})  # read by the driver, in memory only
        self.pool: Pool = next(p for p in self.campaign.pools if p.name == pool_name)
        workdirs = {node.name: node.workdir for node in self.campaign.nodes}
        self.transports = Transports(self.campaign.nodes)  # one connection per node, built here:
        # paramiko objects cannot travel to a Ray actor
        self.managers: dict[str, ServiceManager] = {
            service.name: service_manager(service, self.transports, workdirs)
            for service in self.pool.services
        }
        self.applied: dict[str, ServiceConfig] = {}
        self.log_read: dict[str, int] = {}  # bytes of each service log already examined
        self.sources = SourceVariants(self.campaign, self.pool, self.transports)
        generators = self.campaign.generators
        self.generators = LoadGenerators(generators) if generators is not None else None

    async def run_trial(self, order: TrialOrder) -> TrialReport:
        """One trial; the blocking deploy steps run in a thread so the event loop stays free."""
        started = time.monotonic()
        restarts, restart_s = 0, 0.0
        try:
            restart_began = time.monotonic()
            restarts = await asyncio.to_thread(self._deploy, order.levels)
            restart_s = time.monotonic() - restart_began
            workload_began = time.monotonic()
            result, samples = await self._stress(order.seed, order.stop_rule, order.target)
            workload_s = time.monotonic() - workload_began
            logs = await asyncio.to_thread(self._collect_logs)
        except (DeployFailed, TransportError, HealthTimeout, VariantError, GeneratorFailed) as exc:
            timing = TrialTiming(time.monotonic() - started, restart_s, 0.0, restarts)
            infra = INFRA_ERROR if isinstance(exc, TransportError | GeneratorFailed) else ""
            return TrialReport(order.trial_id, f"{infra}{exc}", timing)
        timing = TrialTiming(time.monotonic() - started, restart_s, workload_s, restarts,
                             result.stopped_early)
        sessions = [
            SessionRow(s.index, s.key, s.outcome.value, s.turns, s.first_bad_turn, s.evidence,
                       s.latency_s)
            for s in result.sessions
        ]
        metrics = [MetricRow(m.service, m.t, m.name, dict(m.labels), m.value) for m in samples]
        used = self.generators.runs if self.generators is not None else ()
        return TrialReport(order.trial_id, None, timing, sessions, metrics, logs, used)

    def _deploy(self, levels: dict[str, str]) -> int:
        settings = level_settings(self.campaign, levels, self.secrets)
        # Files first (git refs, patches): a node whose files change restarts all its services,
        # stopped before the move so that no server imports half-switched code.
        changing = self.sources.changing(levels)
        for service in reversed(self.pool.services):
            if service.node in changing:
                self.managers[service.name].stop(service.name)
                self.applied.pop(service.name, None)
        self.sources.move_to(levels)
        configs = {s.name: render_service(s.name, self.secrets.argv(s.start),
                                          self.secrets.env(s.env), settings)
                   for s in self.pool.services}
        restarting = {name for name, config in configs.items()
                      if self.applied.get(name) != config
                      or not self.managers[name].is_running(name)}
        self.sources.run_hooks(levels, "pre", restarting)
        restarts = 0
        for service in self.pool.services:  # declared order: e.g. prefill, decode, router
            if service.name not in restarting:
                continue
            config, manager = configs[service.name], self.managers[service.name]
            self.applied.pop(service.name, None)
            transport = self.transports[service.node]
            deployed_at = node_clock(transport)  # the node's clock: skew never counts
            started = manager.start(config)
            self.log_read[service.name] = started.log_offset
            try:
                for url in filter(None, (service.health_url, service.health_generate_url)):
                    wait_healthy(url, service.startup_timeout_s,
                                 alive=partial(manager.is_running, service.name))
            except HealthTimeout as exc:
                tail = manager.read_log(service.name, started.log_offset).splitlines()
                last = "\n".join(tail[-LOG_TAIL_LINES:])
                raise DeployFailed(f"{service.name}: {exc}\n{last}".rstrip()) from None
            self._prove(service, config, started, deployed_at, settings)
            self.applied[service.name] = config
            restarts += 1
        self.sources.run_hooks(levels, "post", restarting)
        return restarts

    def _prove(self, service: Service, config: ServiceConfig, started: Started,
               deployed_at: float, settings: list[LevelSettings]) -> None:
        """A healthy server is not proof: the variant's argv, env and log markers must be those
        of a process started after the deploy. A variant that cannot be proven is not stressed."""
        touching = [s for s in settings if s.touches(service.name)]
        files, git = self.sources.expected_code(service.node)  # the code it must be running
        proof = prove_loaded(
            self.transports[service.node], started.pid, config,
            deployed_at_epoch=deployed_at,
            log_text=self.managers[service.name].read_log(service.name, started.log_offset),
            markers=[*service.log_markers, *(m for s in touching for m in s.markers)],
            absent_markers=[m for s in touching for m in s.absent_markers],
            files=files, git=git,
        )
        if not proof.ok:
            raise DeployFailed(f"{service.name}: the variant is not loaded: "
                               + "; ".join(proof.problems))

    async def _stress(
        self, seed: int, rule: StopWhenFailing | None, target: str
    ) -> tuple[StressResult, list[Sample]]:
        urls = {s.name: s.metrics_url for s in self.pool.services if s.metrics_url}
        planned = self.campaign.workload.sessions
        corrupted = 0

        def decided(session: SessionResult) -> bool:
            nonlocal corrupted
            failing = is_infra if target == "wedging" else is_corrupt
            corrupted += failing(session.outcome)
            return rule is not None and rule.decided(corrupted, planned)

        stop = asyncio.Event()
        poller = asyncio.create_task(poll_metrics(urls, stop))
        try:
            stress = run_stress if self.generators is None else self.generators.run_stress
            result = await stress(self.pool.endpoint, self.campaign.workload, seed=seed,
                                  on_session=decided,
                                  api_key=self.secrets.api_key(self.pool.api_key_env))
        finally:
            stop.set()
        return result, await poller

    def _collect_logs(self) -> list[LogRow]:
        rows: list[LogRow] = []
        for service in self.pool.services:
            manager = self.managers[service.name]
            offset = self.log_read.get(service.name, 0)
            text = manager.read_log(service.name, offset)
            self.log_read[service.name] = offset + len(text.encode())
            rows.extend(LogRow(service.name, e.line_no, e.kind, e.text) for e in log_events(text))
        return rows

    async def shutdown(self) -> None:
        """Stop every service this pool started: nodes are left as they were found."""
        await asyncio.to_thread(self._stop_all)

    def _stop_all(self) -> None:
        try:
            for service in reversed(self.pool.services):
                self.managers[service.name].stop(service.name)
            if self.generators is not None:
                self.generators.shutdown()
            self.sources.restore()  # the nodes' files as they were found
        finally:
            self.applied.clear()
            self.transports.close()
