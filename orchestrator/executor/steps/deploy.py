"""The deploy steps: apply, then restart → health → prove per service the variant changes, then
the ``post`` hooks. Each blocks on the nodes and runs in a thread."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

from deploy.health import HealthTimeout, wait_healthy
from deploy.listeners import check_port
from deploy.proof import node_clock, prove_loaded
from deploy.render import LevelSettings, render_service
from deploy.services.base import ServiceConfig, Started
from experiments.campaign import Campaign, Service
from experiments.secrets import SecretValues, shown
from orchestrator.executor.steps.base import DeployFailed, Details, PoolParts, Running, Skip

LOG_TAIL_LINES = 20


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


@dataclass(eq=False)
class Apply:
    """Files first (git refs, patches): a node whose files change restarts all its services,
    stopped before the move so that no server imports half-switched code; then the services'
    configs, and the ``pre`` hooks of what will restart. ``running``: each service's proven
    config before this trial (a copy)."""

    levels: dict[str, str]
    running: Mapping[str, ServiceConfig]
    name: str = field(default="apply", init=False)
    service: str | None = field(default=None, init=False)
    settings: list[LevelSettings] = field(default_factory=list, init=False)
    configs: dict[str, ServiceConfig] = field(default_factory=dict, init=False)
    restarting: set[str] = field(default_factory=set, init=False)
    stopped: list[str] = field(default_factory=list, init=False)  # its node's files change

    async def run(self, parts: PoolParts) -> Details:
        return await asyncio.to_thread(self._apply, parts)

    def _apply(self, parts: PoolParts) -> Details:
        levels = self.levels
        self.settings = level_settings(parts.campaign, levels, parts.secrets)
        changing = parts.sources.changing(levels)
        for service in reversed(parts.pool.services):
            if service.node in changing:
                parts.managers[service.name].stop(service.name)
                self.stopped.append(service.name)
        parts.sources.move_to(levels)
        self.configs = {s.name: render_service(s.name, parts.secrets.argv(s.start),
                                               parts.secrets.env(s.env), self.settings)
                        for s in parts.pool.services}
        self.restarting = {name for name, config in self.configs.items()
                           if name in self.stopped or self.running.get(name) != config
                           or not parts.managers[name].is_running(name)}
        parts.sources.run_hooks(levels, "pre", self.restarting)
        return {"files_changed_on": sorted(changing), "restarting": sorted(self.restarting)}

    def settle(self, running: Running) -> None:
        for name in self.stopped:
            running.configs.pop(name, None)


class ServiceStep:
    """A step of one service that the variant restarts (skipped for one it leaves unchanged);
    its work, ``work``, blocks on the node and runs in a thread."""

    service_def: Service
    apply: Apply

    @property
    def service(self) -> str | None:
        return self.service_def.name

    async def run(self, parts: PoolParts) -> Details:
        if self.service_def.name not in self.apply.restarting:
            raise Skip("the variant leaves it unchanged")
        return await asyncio.to_thread(self.work, parts)

    def work(self, parts: PoolParts) -> Details:
        raise NotImplementedError

    def settle(self, running: Running) -> None:
        pass


@dataclass(eq=False)
class Restart(ServiceStep):
    service_def: Service
    apply: Apply
    name: str = field(default="restart", init=False)
    began: bool = field(default=False, init=False)  # its old process may be gone from here on
    started: Started | None = field(default=None, init=False)
    deployed_at: float = field(default=0.0, init=False)  # the node's clock, just before

    def work(self, parts: PoolParts) -> Details:
        name = self.service_def.name
        self.began = True
        deployed_at = node_clock(parts.transports[self.service_def.node])  # skew never counts
        try:
            started = parts.managers[name].start(self.apply.configs[name])
        except ValueError as exc:  # what the service manager cannot hold (a NUL, a newline)
            raise DeployFailed(f"{name}: cannot apply the variant: {exc}") from None
        self.started, self.deployed_at = started, deployed_at
        return {"pid": started.pid, "deployed_at": deployed_at}

    def settle(self, running: Running) -> None:
        name = self.service_def.name
        if self.began:  # proven again, or restarted at the next trial
            running.configs.pop(name, None)
        if self.started is not None:  # its log before this start belongs to no trial
            running.log_read[name] = self.started.log_offset


def started_by(restart: Restart) -> Started:
    """What ``restart`` started: the steps after it run only once it did."""
    assert restart.started is not None, "a step ran after its service failed to restart"
    return restart.started


@dataclass(eq=False)
class Health(ServiceStep):
    service_def: Service
    apply: Apply
    restart: Restart
    name: str = field(default="health", init=False)

    def work(self, parts: PoolParts) -> Details:
        service, manager = self.service_def, parts.managers[self.service_def.name]
        urls = [url for url in (service.health_url, service.health_generate_url) if url]
        try:
            for url in urls:
                wait_healthy(url, service.startup_timeout_s,
                             alive=partial(manager.is_running, service.name))
        except HealthTimeout as exc:
            offset = started_by(self.restart).log_offset
            tail = manager.read_log(service.name, offset).splitlines()
            last = "\n".join(tail[-LOG_TAIL_LINES:])
            raise DeployFailed(f"{service.name}: {exc}\n{last}".rstrip()) from None
        return {"urls": urls}


@dataclass(eq=False)
class Prove(ServiceStep):
    """A healthy server is not proof: the variant's argv, env and log markers must be those of
    a process started after the deploy. A variant that cannot be proven is not stressed."""

    service_def: Service
    apply: Apply
    restart: Restart
    name: str = field(default="prove", init=False)
    proven: ServiceConfig | None = field(default=None, init=False)

    def work(self, parts: PoolParts) -> Details:
        service, config = self.service_def, self.apply.configs[self.service_def.name]
        started = started_by(self.restart)
        touching = [s for s in self.apply.settings if s.touches(service.name)]
        files, git = parts.sources.expected_code(service.node)  # the code it must be running
        # healthy, but is it this start that answers? (another process on its port: setup)
        port = check_port(parts.transports[service.node], started.pid, config.argv, service.name)
        proof = prove_loaded(
            parts.transports[service.node], started.pid, config,
            deployed_at_epoch=self.restart.deployed_at,
            log_text=parts.managers[service.name].read_log(service.name, started.log_offset),
            markers=[*service.log_markers, *(m for s in touching for m in s.markers)],
            absent_markers=[m for s in touching for m in s.absent_markers],
            files=files, git=git, start_words=len(service.start),  # the rest: levels' flags
        )
        if not proof.ok:
            raise DeployFailed(f"{service.name}: the variant is not loaded: "
                               + "; ".join(proof.problems),
                               {"checks": proof.checks, "problems": proof.problems})
        self.proven = config
        return {"checks": {**proof.checks, "listener": port}}

    def settle(self, running: Running) -> None:
        if self.proven is not None:  # kept while the variant leaves it unchanged
            running.configs[self.service_def.name] = self.proven


@dataclass(eq=False)
class Hooks:
    """The ``post`` hooks of what restarted, once every service is up."""

    apply: Apply
    name: str = field(default="hooks", init=False)
    service: str | None = field(default=None, init=False)

    async def run(self, parts: PoolParts) -> Details:
        await asyncio.to_thread(parts.sources.run_hooks, self.apply.levels, "post",
                                self.apply.restarting)
        return {}

    def settle(self, running: Running) -> None:
        pass
