"""The sweep's history in its report: each run's facts, and its variants measured on the run's
own trials (read once a campaign), the last MAX_HISTORY runs around the one reported."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from db.store import Store
from db.sweep_records import SweepRunRecord
from orchestrator.core.evidence import CORRUPTING, WEDGING, TrialEvidence
from orchestrator.reports.sweep.model import HistoryRun, Measured, RunFacts
from orchestrator.sweeps.baseline import baseline_trials

MAX_HISTORY = 200  # runs: a nightly sweep's half year and more; the others are counted


def _when(moment: Any) -> str | None:
    return None if moment is None else moment.isoformat()


def run_facts(run: SweepRunRecord) -> RunFacts:
    return RunFacts(
        id=run.id, seq=run.seq, status=run.status, trigger=run.trigger, schedule=run.schedule,
        started_at=_when(run.started_at), finished_at=_when(run.finished_at),
        accepted=run.accepted, accepted_at=_when(run.accepted_at), campaign_id=run.campaign_id,
        baseline_run_id=run.baseline_run_id, reason=run.reason, slot=_when(run.slot))


def first_line(exc: BaseException) -> str:
    said = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {said[0]}" if said else type(exc).__name__


def geometric_mean(values: Iterable[float | None]) -> float | None:
    """As the comparisons average a per-trial measure (on the log scale); None: none."""
    known = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return statistics.geometric_mean(known) if known else None


class Measurements:
    """Each run's variants measured on its own trials, read once a campaign; why not, where a
    campaign cannot be read."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.done: dict[str, dict[str, Measured]] = {}
        self.why: dict[str, str] = {}

    def of(self, run: SweepRunRecord) -> dict[str, Measured]:
        if run.campaign_id is None:
            return {}
        if run.campaign_id not in self.done:
            try:
                self.done[run.campaign_id] = measure(self.store, run.campaign_id)
            except Exception as exc:  # a campaign this version cannot read: nothing measured
                self.done[run.campaign_id] = {}
                self.why[run.campaign_id] = (f"its campaign cannot be read again "
                                             f"({first_line(exc)})")
        return self.done[run.campaign_id]


def measure(store: Store, campaign_id: str) -> dict[str, Measured]:
    """Each variant of a sweep run's campaign on its finished trials of the current build (the
    trials a later run compares with: ``baseline_trials``), by name."""
    by_name: dict[str, list[Any]] = {}
    for trial in baseline_trials(store, campaign_id):
        by_name.setdefault(trial.variant, []).append(trial)
    measured = {}
    for name, trials in by_name.items():
        corrupt = [TrialEvidence({}, t.counts, failing=CORRUPTING) for t in trials]
        wedged = [TrialEvidence({}, t.counts, failing=WEDGING) for t in trials]
        measured[name] = Measured(
            trials=len(trials), corrupted=sum(t.failures for t in corrupt),
            judged=sum(t.judged for t in corrupt), wedged=sum(t.failures for t in wedged),
            sessions=sum(t.sessions for t in wedged),
            throughput=geometric_mean(t.output_throughput for t in trials),
            p99_ms=geometric_mean(t.p99_e2e_ms for t in trials))
    return measured


def window(runs: Sequence[SweepRunRecord], run: SweepRunRecord) -> Sequence[SweepRunRecord]:
    """The last MAX_HISTORY runs; around the reported run where it is older than those."""
    at = next(i for i, r in enumerate(runs) if r.id == run.id)
    start = max(0, len(runs) - MAX_HISTORY)
    if at < start:
        start = max(0, at - MAX_HISTORY // 2)
    return runs[start:start + MAX_HISTORY]


def history_run(r: SweepRunRecord, measured: Measurements, run: SweepRunRecord,
             baseline: SweepRunRecord | None) -> HistoryRun:
    shown = measured.of(r)
    note = "" if shown else measured.why.get(r.campaign_id or "") or r.reason or (
        "no trial finished" if r.campaign_id else f"{r.status}: nothing measured")
    return HistoryRun(run=run_facts(r), variants=shown,
                      baseline=baseline is not None and r.id == baseline.id,
                      current=r.id == run.id, note=note)
