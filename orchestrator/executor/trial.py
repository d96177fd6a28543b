"""One trial on one pool: its chain of steps (executor/steps.py), apply → stress → collect.

Runs inside the pool's Ray actor. It never writes the store: it returns a TrialReport value (with
its steps) and the driver, the only writer, stores it. A server that misbehaves is data
(sessions, log events); a trial that fails is either an infrastructure failure (retried, never
judged) or a variant failure (evidence: the variant could not be deployed or proven).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from pathlib import Path

from db.records import GeneratorRow, LogRow, MetricRow, SessionRow, TrialTiming
from deploy.render import LevelSettings
from deploy.services.base import ServiceConfig, ServiceManager
from deploy.services.factory import manager_for
from deploy.transports.factory import Transports
from experiments.campaign import Campaign, Pool, Service
from experiments.collect import Sample, log_events, poll_metrics
from experiments.secrets import SecretValues, shown
from experiments.workload.probe import ProbeRun, ProbeSpec, probe_env, run_probe
from experiments.workload.stress import SessionResult, StressResult, run_stress
from experiments.workload.triage import pool_parser
from orchestrator.core.evidence import Failing, variant_key
from orchestrator.core.stats.compare import StopRule
from orchestrator.core.strategies.base import PROBE_SKIPPED
from orchestrator.executor.base import GeneratorRun, TrialOrder, TrialReport
from orchestrator.executor.load_generators import LoadGenerators
from orchestrator.executor.source_changes import SourceChanges
from orchestrator.executor.steps import (
    DEPLOY_STEPS,
    WORKLOAD_STEPS,
    ProbeBroken,
    ProbeSkipped,
    TrialState,
    chain,
    failure_of,
    run_chain,
)

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
        self.sources = SourceChanges(self.campaign, self.pool, self.transports)
        generators = self.campaign.generators
        self.generators = LoadGenerators(generators) if generators is not None else None

    async def run_trial(self, order: TrialOrder) -> TrialReport:
        """One trial: its chain of steps (orchestrator.executor.steps), each timed and reported."""
        started = time.monotonic()
        trial = TrialState(order)
        steps, failed = await run_chain(chain(self.pool.services, self.probing), self, trial)
        restart_s = sum(s.duration_s for s in steps if s.name in DEPLOY_STEPS)
        workload_s = sum(s.duration_s for s in steps if s.name in WORKLOAD_STEPS)
        if failed is not None or trial.result is None:
            timing = TrialTiming(time.monotonic() - started, restart_s, 0.0, trial.restarts)
            failure = failure_of(failed) if failed is not None else "variant"
            infra = INFRA_ERROR if failure == "infrastructure" else ""
            return TrialReport(order.trial_id, f"{infra}{failed}", timing, failure=failure,
                               steps=tuple(steps))
        result = trial.result
        timing = TrialTiming(time.monotonic() - started, restart_s, workload_s, trial.restarts,
                             result.stopped_early)
        sessions = [
            SessionRow(s.index, s.key, s.outcome.value, s.turns, s.first_bad_turn, s.evidence,
                       s.latency_s)
            for s in result.sessions
        ]
        metrics = [MetricRow(m.service, m.t, m.name, dict(m.labels), m.value)
                   for m in trial.samples]
        used = self.generators.runs if self.generators is not None else ()
        return TrialReport(order.trial_id, None, timing, sessions, metrics, trial.logs, used,
                           steps=tuple(steps), performance=trial.performance)

    def _deploy(self, levels: dict[str, str]) -> int:
        """Only the deploy steps (apply to hooks), raising what fails; the restarts needed."""
        trial = TrialState(TrialOrder(0, levels, 0))
        deploy = [s for s in chain(self.pool.services) if s.name in DEPLOY_STEPS]
        _, failed = asyncio.run(run_chain(deploy, self, trial))
        if failed is not None:
            raise failed
        return trial.restarts

    @property
    def probing(self) -> bool:
        """The workload is the user's own probe (``workload: {command: ...}``)."""
        return isinstance(self.campaign.workload, ProbeSpec)

    async def probe(self, order: TrialOrder) -> tuple[StressResult, list[Sample], list[ProbeRun]]:
        """The user's probe, ``runs`` times, each run one session; the trial's stop rule may end
        it early. Exit 125 fails the trial as the variant's (``ProbeSkipped``: cannot be judged);
        a signal, a timeout or a probe that cannot start fails it as the tool's
        (``ProbeBroken``). Metrics are polled meanwhile, as under the stress workload."""
        spec = self.campaign.workload
        assert isinstance(spec, ProbeSpec)
        cwd = spec.cwd or os.getcwd()  # a campaign file's is made absolute when it is loaded
        program = spec.command[0]
        argv = [str(Path(cwd) / program) if "/" in program else program, *spec.command[1:]]
        base = dict(os.environ)  # the driver's (Ray's marker in it: its reaper finds the probe)
        key = self.secrets.api_key(self.pool.api_key_env)
        if self.pool.api_key_env is not None and key is not None:  # for a probe that calls it
            base[self.pool.api_key_env] = key
        runs: list[ProbeRun] = []
        failures = 0
        began = time.monotonic()
        urls = {s.name: s.metrics_url for s in self.pool.services if s.metrics_url}
        stop = asyncio.Event()
        poller = asyncio.create_task(poll_metrics(urls, stop))
        try:
            for number in range(1, spec.runs + 1):
                env = probe_env(base, variant=variant_key(order.levels), levels=order.levels,
                                endpoint=self.pool.endpoint, pool=self.pool.name,
                                trial_id=order.trial_id, seed=order.seed + number - 1,
                                run=number, runs=spec.runs)
                run = await asyncio.to_thread(run_probe, argv, cwd=cwd, env=env,
                                              timeout_s=spec.timeout_s, run=number)
                runs.append(run)
                judgement = run.judgement
                if judgement in ("skip", "error"):
                    details = {"runs": [r.details() for r in runs], "argv": argv, "cwd": cwd,
                               "exit_code": run.exit_code, "output": run.evidence()}
                    if judgement == "skip":
                        raise ProbeSkipped(f"{PROBE_SKIPPED}: the variant cannot be judged "
                                           "(skipped, as `git bisect skip`)", details)
                    raise ProbeBroken(f"the probe {run.status()}: an error of the probe, not a "
                                      "judgement of the variant", details)
                failures += run.outcome in order.failing
                if order.stop_rule is not None and order.stop_rule.decided(failures, spec.runs):
                    break
        finally:
            stop.set()
            samples = await poller
        sessions = tuple(
            SessionResult(r.run - 1, f"run-{r.run}", r.outcome, 1,
                          None if r.judgement == "good" else 1, r.evidence(), r.duration_s)
            for r in runs)
        return (StressResult(sessions, time.monotonic() - began, len(runs) < spec.runs),
                samples, runs)

    async def stress(
        self, seed: int, rule: StopRule | None, failing: Failing
    ) -> tuple[StressResult, list[Sample]]:
        urls = {s.name: s.metrics_url for s in self.pool.services if s.metrics_url}
        workload = self.campaign.workload
        assert not isinstance(workload, ProbeSpec)  # chain() runs Probe for it
        planned = workload.sessions
        failures = 0

        def decided(session: SessionResult) -> bool:
            nonlocal failures
            failures += session.outcome in failing
            return rule is not None and rule.decided(failures, planned)

        stop = asyncio.Event()
        poller = asyncio.create_task(poll_metrics(urls, stop))
        try:
            stress = run_stress if self.generators is None else self.generators.run_stress
            result = await stress(self.pool.endpoint, workload, seed=seed,
                                  on_session=decided,
                                  api_key=self.secrets.api_key(self.pool.api_key_env),
                                  tool_call_parser=pool_parser(
                                      c.argv for c in self.applied.values()))
        finally:
            stop.set()
        return result, await poller

    def collect_logs(self) -> list[LogRow]:
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
