"""Render a variant into a service's exact command line and environment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from deploy.services.base import ServiceConfig


@dataclass(frozen=True)
class LevelSettings:
    """What one chosen level contributes to the services it touches."""

    factor: str
    level: str
    env: Mapping[str, str] = field(default_factory=dict)
    flags: Sequence[str] = ()
    services: frozenset[str] | None = None  # None: every service
    markers: Sequence[str] = ()  # log lines proving it loaded
    absent_markers: Sequence[str] = ()  # log lines that must not appear

    def touches(self, service: str) -> bool:
        return self.services is None or service in self.services


def render_service(
    name: str,
    start: Sequence[str],
    base_env: Mapping[str, str],
    levels: Sequence[LevelSettings],
) -> ServiceConfig:
    """Base argv and env, then each touching level's flags and env in factor order."""
    argv = list(start)
    env = dict(base_env)
    for level in levels:
        if level.touches(name):
            argv.extend(level.flags)
            env.update(level.env)
    return ServiceConfig.of(name, argv, env)
