"""The workload steps (the stress workload, or the user's own probe) and ``collect``, which
reads the services' logs. Metrics are polled while the workload runs."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from db.records import LogRow
from experiments.collect import Sample, log_events, poll_metrics
from experiments.workload.probe import ProbeRun, ProbeSpec, probe_env, run_probe
from experiments.workload.stress import SessionResult, StressResult, run_stress
from experiments.workload.triage import pool_parser
from orchestrator.core.evidence import variant_key
from orchestrator.core.strategies.base import PROBE_SKIPPED
from orchestrator.executor.base import TrialOrder
from orchestrator.executor.steps.base import (
    Details,
    PoolParts,
    ProbeBroken,
    ProbeSkipped,
    Running,
)
from orchestrator.executor.steps.deploy import Apply, Restart


def metrics_urls(parts: PoolParts) -> dict[str, str]:
    return {s.name: s.metrics_url for s in parts.pool.services if s.metrics_url}


@dataclass(eq=False)
class Stress:
    """The stress workload against the pool's endpoint; the trial's stop rule may end it early.
    ``apply``: the configs its services run (their tool-call parser is the client's)."""

    order: TrialOrder
    apply: Apply
    name: str = field(default="stress", init=False)
    service: str | None = field(default=None, init=False)
    result: StressResult | None = field(default=None, init=False)
    samples: list[Sample] = field(default_factory=list, init=False)

    async def run(self, parts: PoolParts) -> Details:
        self.result, self.samples = await self._stress(parts)
        return {"sessions": len(self.result.sessions), "samples": len(self.samples),
                "stopped_early": self.result.stopped_early}

    async def _stress(self, parts: PoolParts) -> tuple[StressResult, list[Sample]]:
        order, pool = self.order, parts.pool
        workload = parts.campaign.workload
        assert not isinstance(workload, ProbeSpec)  # the chain runs Probe for it
        planned = workload.sessions
        failures = 0

        def decided(session: SessionResult) -> bool:
            nonlocal failures
            failures += session.outcome in order.failing
            return order.stop_rule is not None and order.stop_rule.decided(failures, planned)

        stop = asyncio.Event()
        poller = asyncio.create_task(poll_metrics(metrics_urls(parts), stop))
        try:
            stress = run_stress if parts.generators is None else parts.generators.run_stress
            result = await stress(pool.endpoint, workload, seed=order.seed,
                                  on_session=decided,
                                  api_key=parts.secrets.api_key(pool.api_key_env),
                                  tool_call_parser=pool_parser(
                                      c.argv for c in self.apply.configs.values()))
        finally:
            stop.set()
        return result, await poller

    def performance(self) -> dict[str, Any] | None:
        """Throughput, goodput and latencies, once it ran."""
        return self.result.performance() if self.result is not None else None

    def settle(self, running: Running) -> None:
        pass


@dataclass(eq=False)
class Probe:
    """The user's own probe, ``runs`` times, each run one session; the trial's stop rule may end
    it early. Exit 125 fails the trial as the variant's (``ProbeSkipped``: cannot be judged); a
    signal, a timeout or a probe that cannot start fails it as the tool's (``ProbeBroken``)."""

    order: TrialOrder
    name: str = field(default="probe", init=False)
    service: str | None = field(default=None, init=False)
    result: StressResult | None = field(default=None, init=False)
    samples: list[Sample] = field(default_factory=list, init=False)
    runs: list[ProbeRun] = field(default_factory=list, init=False)

    async def run(self, parts: PoolParts) -> Details:
        self.result, self.samples = await self._probe(parts)
        return {"runs": [r.details() for r in self.runs], "samples": len(self.samples),
                "stopped_early": self.result.stopped_early}

    async def _probe(self, parts: PoolParts) -> tuple[StressResult, list[Sample]]:
        order, pool, spec = self.order, parts.pool, parts.campaign.workload
        assert isinstance(spec, ProbeSpec)
        cwd = spec.cwd or os.getcwd()  # a campaign file's is made absolute when it is loaded
        program = spec.command[0]
        argv = [str(Path(cwd) / program) if "/" in program else program, *spec.command[1:]]
        base = dict(os.environ)  # the driver's (Ray's marker in it: its reaper finds the probe)
        key = parts.secrets.api_key(pool.api_key_env)
        if pool.api_key_env is not None and key is not None:  # for a probe that calls it
            base[pool.api_key_env] = key
        runs = self.runs
        failures = 0
        began = time.monotonic()
        stop = asyncio.Event()
        poller = asyncio.create_task(poll_metrics(metrics_urls(parts), stop))
        try:
            for number in range(1, spec.runs + 1):
                env = probe_env(base, variant=variant_key(order.levels), levels=order.levels,
                                endpoint=pool.endpoint, pool=pool.name,
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
        return StressResult(sessions, time.monotonic() - began, len(runs) < spec.runs), samples

    def settle(self, running: Running) -> None:
        pass


@dataclass(eq=False)
class Collect:
    """Each service's log events since the last trial read it (or since this trial restarted
    it), and what the stress workload measured (none for a probe).
    ``log_read``: the bytes of each log read before this trial (a copy)."""

    log_read: Mapping[str, int]
    restarts: Mapping[str, Restart]
    stress: Stress | None = None
    name: str = field(default="collect", init=False)
    service: str | None = field(default=None, init=False)
    logs: list[LogRow] = field(default_factory=list, init=False)
    read: dict[str, int] = field(default_factory=dict, init=False)  # each log's bytes, now
    performance: dict[str, Any] | None = field(default=None, init=False)

    async def run(self, parts: PoolParts) -> Details:
        self.logs = await asyncio.to_thread(self._collect_logs, parts)
        if self.stress is not None:  # throughput, goodput, latencies
            self.performance = self.stress.performance()
        return {"log_events": len(self.logs)}

    def offset(self, service: str) -> int:
        restart = self.restarts.get(service)
        if restart is not None and restart.started is not None:
            return restart.started.log_offset
        return self.log_read.get(service, 0)

    def _collect_logs(self, parts: PoolParts) -> list[LogRow]:
        rows: list[LogRow] = []
        for service in parts.pool.services:
            offset = self.offset(service.name)
            text = parts.managers[service.name].read_log(service.name, offset)
            self.read[service.name] = offset + len(text.encode())
            rows.extend(LogRow(service.name, e.line_no, e.kind, e.text)
                        for e in log_events(text, service.engine))
        return rows

    def settle(self, running: Running) -> None:
        running.log_read.update(self.read)
