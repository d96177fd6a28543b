"""What every step shares: the pool's parts a step works with (``PoolParts``), what the pool's
services run across trials (``Running``), the failure classes, and ``run_chain``.

A step is one object per trial (Pinpoint's Execution): it is built with what it needs (the
variant, the steps before it whose results it reads), ``run(parts)`` does its work and keeps what
it observed on itself, and ``settle(running)`` says what it left running on the pool. No step
writes anything shared while it runs; the runner settles each one after it ran, failed or not.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from db.records import StepRow
from deploy.changes.base import ChangeError
from deploy.errors import SetupError
from deploy.health import HealthTimeout
from deploy.services.base import ServiceConfig, ServiceManager
from deploy.services.systemd import StartFailed, VariantNotApplied
from deploy.transports.base import Transport, TransportError
from experiments.campaign import Campaign, Pool
from experiments.secrets import SecretValues
from experiments.workload.probe import ProbeSpec
from orchestrator.executor.base import Failure
from orchestrator.executor.load_generators import GeneratorFailed, LoadGenerators
from orchestrator.executor.source_changes import SourceChanges

Details = dict[str, Any]


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


class NodeTransports(Protocol):
    """Each node's transport by the node's name (``deploy.transports.factory.Transports``)."""

    def __getitem__(self, node: str, /) -> Transport: ...


@dataclass(frozen=True)
class PoolParts:
    """What a step works with, the same for every trial of one pool: the campaign, the pool, the
    secrets' values and the ways to the nodes (transports, service managers, source changes,
    load generators). Holds no step's state."""

    campaign: Campaign
    pool: Pool
    secrets: SecretValues
    transports: NodeTransports
    managers: Mapping[str, ServiceManager]
    sources: SourceChanges
    generators: LoadGenerators | None = None

    @property
    def probing(self) -> bool:
        """The workload is the user's own probe (``workload: {command: ...}``)."""
        return isinstance(self.campaign.workload, ProbeSpec)


@dataclass
class Running:
    """What one pool's services run, across its trials: the config each was proven to run, and
    how many bytes of each service's log were already examined. The runner's own; a step reads a
    copy given when it is built and says what it changed in ``settle``."""

    configs: dict[str, ServiceConfig] = field(default_factory=dict)
    log_read: dict[str, int] = field(default_factory=dict)


class Step(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def service(self) -> str | None: ...  # the service a per-service step is about

    async def run(self, parts: PoolParts) -> Details: ...

    def settle(self, running: Running) -> None: ...  # what it left running, even if it failed


async def run_chain(steps: list[Step], parts: PoolParts,
                    running: Running) -> tuple[list[StepRow], Exception | None]:
    """Every step, timed, until one fails (the rest: skipped), each settled into ``running``
    once it ran; the failure, if one did."""
    rows: list[StepRow] = []
    failed: Exception | None = None
    for step in steps:
        began_at, began = datetime.now(UTC), time.monotonic()
        if failed is not None:
            rows.append(StepRow(step.name, step.service, began_at, 0.0, "skipped",
                                {"reason": "an earlier step failed"}))
            continue
        try:
            details, outcome = await step.run(parts), "ok"
        except Skip as skip:
            details, outcome = {"reason": str(skip)}, "skipped"
        except TRIAL_FAILURES as exc:
            failed, outcome = exc, "failed"
            details = {"error": str(exc), "failure": failure_of(exc),
                       **getattr(exc, "details", {})}
        finally:  # a step that crashed the pool may still have stopped or started a service
            step.settle(running)
        rows.append(StepRow(step.name, step.service, began_at, time.monotonic() - began,
                            outcome, details))
    return rows, failed
