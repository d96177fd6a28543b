"""Plain values of the sweeps in the store (``db.sweeps``): a sweep, its runs, their hunts. Frozen:
nothing here talks to the database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

# running: holds the sweep's lock; skipped: another run held it; missed: a scheduled slot passed
# with no run; interrupted: its orchestrator died (found by the next run) or its lock was broken.
SWEEP_RUN_STATUSES = frozenset({"running", "clean", "regression", "inconclusive", "failed",
                                "skipped", "missed", "interrupted"})
FINISHED_STATUSES = frozenset({"clean", "regression", "inconclusive", "failed", "interrupted"})
NOT_MEASURED = frozenset({"skipped", "missed"})  # finished rows with no campaign behind them
TRIGGERS = frozenset({"manual", "schedule"})


@dataclass(frozen=True, slots=True)
class SweepRecord:
    id: int
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SweepRunRecord:
    id: int
    sweep_id: int
    sweep: str  # the sweep's name
    seq: int  # 1, 2, … within its sweep, skipped and missed runs included
    campaign_id: str | None  # None: skipped, missed, or not started far enough to have one
    status: str  # SWEEP_RUN_STATUSES
    trigger: str  # TRIGGERS
    schedule: str | None  # the schedule that started (or missed) it
    started_at: datetime
    finished_at: datetime | None
    accepted: bool  # accepted as a baseline (the sweep's baseline is the last accepted)
    accepted_at: datetime | None
    baseline_run_id: int | None  # the run it was compared with
    result: dict[str, Any] | None  # what the caller stored at its end (JSON)
    facts: dict[str, Any] | None  # the node facts it ran on (JSON)
    reason: str | None  # why it was skipped, missed, failed or interrupted
    slot: datetime | None  # a missed run: the time it was scheduled for

    @property
    def finished(self) -> bool:
        return self.status != "running"


@dataclass(frozen=True, slots=True)
class HuntRecord:
    id: int
    run_id: int
    campaign_id: str  # the campaign that hunts the difference
    good: str  # the side that behaves (the baseline's)
    bad: str  # the side that regressed
    created_at: datetime
