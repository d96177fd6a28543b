"""The service-manager protocol: start, stop and inspect one service on a node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from deploy.safe_words import check_argv, check_environment


@dataclass(frozen=True)
class ServiceConfig:
    """A service as a variant renders it: the exact argv and the environment it adds."""

    name: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        # Every manager builds its command from these values: a bad one is refused here,
        # before anything runs, whichever manager (or caller) gets it.
        check_environment(self.env, f"service {self.name}")
        check_argv(self.argv, f"service {self.name}")

    @classmethod
    def of(cls, name: str, argv: Sequence[str], env: Mapping[str, str]) -> ServiceConfig:
        return cls(name, tuple(argv), tuple(sorted(env.items())))


@dataclass(frozen=True)
class Started:
    pid: int
    log_offset: int  # where this start's output begins in the service log


class ServiceManager(Protocol):
    def start(self, config: ServiceConfig) -> Started: ...

    def stop(self, name: str) -> None: ...

    def is_running(self, name: str) -> bool: ...

    def read_log(self, name: str, offset: int = 0) -> str: ...

    # Before a campaign (and from the reaper, once a driver is killed): stop what an earlier
    # run of bisect left of the service, and only that.
    def stop_leftover(self, name: str) -> None: ...

    # After a campaign: the service as bisect found it; ``was_running``: ``is_running`` before
    # the campaign (after ``stop_leftover``).
    def leave_as_found(self, name: str, was_running: bool) -> None: ...
