"""The executor's contract: what the driver sends a pool (a TrialOrder), what comes back (a
TrialReport), and the one protocol the driver runs trials through (``Executor``).

Ray is one implementation (``ray_pool.PoolActors``); the strategy benchmark's simulated pools
are another (bench/simulated.py). The driver sees only this module.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from db.records import LogRow, MetricRow, SessionRow, StepRow, TrialTiming
from orchestrator.core.evidence import CORRUPTING, Failing
from orchestrator.core.stats.compare import StopRule

Failure = Literal["infrastructure", "variant", "setup"]  # a failed trial's class, by type


@dataclass(frozen=True)
class TrialOrder:
    trial_id: int
    levels: dict[str, str]
    seed: int
    stop_rule: StopRule | None = None  # a sequential test may end the workload early
    failing: Failing = CORRUPTING  # the outcomes the stop rule counts (the campaign's target)


@dataclass(frozen=True)
class GeneratorRun:
    """What one load generator did in one trial."""

    node_id: str  # the Ray node it ran on
    address: str  # the IP address of that node
    sessions: int  # sessions it was given
    finished: int  # sessions it reported
    stopped: bool  # told to stop while some of its sessions were still to run


@dataclass(frozen=True)
class TrialReport:
    trial_id: int
    error: str | None
    timing: TrialTiming
    sessions: list[SessionRow] = field(default_factory=list)
    metrics: list[MetricRow] = field(default_factory=list)
    logs: list[LogRow] = field(default_factory=list)
    generators: tuple[GeneratorRun, ...] = ()  # the load generators that ran the workload
    failure: Failure | None = None  # a failed trial's class (steps.base.failure_of)
    steps: tuple[StepRow, ...] = ()  # its chain of steps as they ran
    performance: dict[str, Any] | None = None  # StressResult.performance, for a trial done


class PoolCrashed(RuntimeError):
    """A pool's runner died or raised: a broken run, not evidence about a variant."""


class Executor(Protocol):
    """Runs trials on the campaign's pools, one trial per pool at a time."""

    @property
    def busy(self) -> Collection[str]:
        """The pools running a trial now."""
        ...

    def submit(self, pool: str, order: TrialOrder) -> None:
        """Start ``order`` on ``pool`` (which is not busy); returns at once."""
        ...

    def next_report(self) -> tuple[str, TrialReport]:
        """Block until some pool finishes its trial; its name and report. A pool that broke
        raises ``PoolCrashed``."""
        ...

    def shutdown(self) -> None:
        """Stop every pool's services; the executor is not used again."""
        ...
