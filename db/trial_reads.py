"""The store's reads of trials: each trial with its tallies, and what trials observed
(sessions, metric samples, log events, load generators, steps), one trial or many at once."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from sqlalchemy import func, select

from db.errors import NotFound
from db.models import (
    LogEvent,
    MetricSample,
    Trial,
    TrialGenerator,
    TrialSession,
    TrialStep,
    Variant,
)
from db.records import (
    GeneratorRecord,
    LogRecord,
    MetricRecord,
    SessionRecord,
    StepRecord,
    TrialRecord,
)
from db.rows import failed_steps, metric_record, record, step_record, trial_record
from db.transactions import Transactions

R = TypeVar("R")
ID_BATCH = 500  # trial ids in one query's IN (...)


class TrialReads(Transactions):
    """Reads of the campaign's trials and of what they observed (the store is one)."""

    def trials(self, campaign_id: str, status: str | None = "done") -> list[TrialRecord]:
        """The campaign's trials with ``status`` (all if ``None``), by seq then id."""
        with self._session(f"list the trials of campaign {campaign_id!r}") as s:
            query = (
                select(Trial, Variant.levels_json)
                .join(Variant, Trial.variant_id == Variant.id)
                .where(Trial.campaign_id == campaign_id)
            )
            tally = (
                select(TrialSession.trial_id, TrialSession.outcome, func.count())
                .join(Trial, TrialSession.trial_id == Trial.id)
                .where(Trial.campaign_id == campaign_id)
                .group_by(TrialSession.trial_id, TrialSession.outcome)
            )
            logged = (
                select(LogEvent.trial_id, LogEvent.kind, func.count())
                .join(Trial, LogEvent.trial_id == Trial.id)
                .where(Trial.campaign_id == campaign_id)
                .group_by(LogEvent.trial_id, LogEvent.kind)
            )
            if status is not None:
                query = query.where(Trial.status == status)
                tally = tally.where(Trial.status == status)
                logged = logged.where(Trial.status == status)
            counts: dict[int, dict[str, int]] = {}
            for trial_id, outcome, n in s.execute(tally):
                counts.setdefault(trial_id, {})[outcome] = n
            events: dict[int, dict[str, int]] = {}
            for trial_id, kind, n in s.execute(logged):
                events.setdefault(trial_id, {})[kind] = n
            failed = failed_steps(s.execute(
                select(TrialStep.trial_id, TrialStep.name)
                .join(Trial, TrialStep.trial_id == Trial.id)
                .where(Trial.campaign_id == campaign_id, Trial.status == "failed",
                       TrialStep.outcome == "failed")
                .order_by(TrialStep.trial_id, TrialStep.position)))
            rows = s.execute(query.order_by(Trial.seq, Trial.id))
            return [trial_record(row, levels, counts.get(row.id, {}), events.get(row.id, {}),
                           failed.get(row.id)) for row, levels in rows]

    def get_trial(self, trial_id: int) -> TrialRecord:
        with self._session(f"read trial {trial_id}") as s:
            found = s.execute(
                select(Trial, Variant.levels_json)
                .join(Variant, Trial.variant_id == Variant.id)
                .where(Trial.id == trial_id)
            ).one_or_none()
            if found is None:
                raise NotFound(f"no trial {trial_id}")
            tally = s.execute(
                select(TrialSession.outcome, func.count())
                .where(TrialSession.trial_id == trial_id)
                .group_by(TrialSession.outcome)
            )
            logged = s.execute(
                select(LogEvent.kind, func.count())
                .where(LogEvent.trial_id == trial_id)
                .group_by(LogEvent.kind)
            )
            failed = failed_steps(s.execute(
                select(TrialStep.trial_id, TrialStep.name)
                .where(TrialStep.trial_id == trial_id, TrialStep.outcome == "failed")
                .order_by(TrialStep.position)))
            return trial_record(found[0], found[1], {outcome: n for outcome, n in tally},
                          {kind: n for kind, n in logged}, failed.get(trial_id))

    # --- what a trial observed ------------------------------------------------------------

    def sessions(self, trial_id: int) -> list[SessionRecord]:
        return self._of_trial(trial_id, "sessions", TrialSession,
                              (TrialSession.idx, TrialSession.id),
                              lambda r: record(SessionRecord, r))

    def metrics(self, trial_id: int, names: Collection[str] | None = None) -> list[MetricRecord]:
        """The trial's metric samples by time; only those ``names`` if given."""
        return self.trials_metrics([trial_id], names).get(trial_id, [])

    def trials_metrics(self, trial_ids: Collection[int], names: Collection[str] | None = None
                       ) -> dict[int, list[MetricRecord]]:
        """The metric samples of these trials (``names`` only, if given), read together, by
        trial id, each by time; a trial with none is absent."""
        where = [] if names is None else [MetricSample.name.in_(names)]
        return self._of_trials("metrics", MetricSample, trial_ids, where,
                               (MetricSample.trial_id, MetricSample.t, MetricSample.id),
                               metric_record)

    def log_events(self, trial_id: int) -> list[LogRecord]:
        return self._of_trial(trial_id, "log events", LogEvent, (LogEvent.id,),
                              lambda r: record(LogRecord, r))

    def trials_log_events(self, trial_ids: Collection[int], kinds: Collection[str] | None = None
                          ) -> dict[int, list[LogRecord]]:
        """The log events of these trials (of ``kinds`` only, if given), read together, by
        trial id, each in order; a trial with none is absent."""
        where = [] if kinds is None else [LogEvent.kind.in_(kinds)]
        return self._of_trials("log events", LogEvent, trial_ids, where,
                               (LogEvent.trial_id, LogEvent.id), lambda r: record(LogRecord, r))

    def generators(self, trial_id: int) -> list[GeneratorRecord]:
        """The load generators that ran the trial's sessions, in order; none if its pool's actor
        ran them itself."""
        return self._of_trial(trial_id, "load generators", TrialGenerator,
                              (TrialGenerator.position,), lambda r: record(GeneratorRecord, r))

    def steps(self, trial_id: int) -> list[StepRecord]:
        """The trial's chain of steps as it ran, in order (none for a trial stored before 0006,
        or one still running)."""
        return self._of_trial(trial_id, "steps", TrialStep, (TrialStep.position,), step_record)

    def campaign_steps(self, campaign_id: str) -> dict[int, list[StepRecord]]:
        """Every stored step of the campaign's trials, by trial id, each trial's in order."""
        return self._of_campaign(campaign_id, "steps", TrialStep,
                                 (TrialStep.trial_id, TrialStep.position), step_record)

    def campaign_generators(self, campaign_id: str) -> dict[int, list[GeneratorRecord]]:
        """The load generators of every trial of the campaign, by trial id, each trial's in
        order; a trial whose pool's actor ran its sessions is absent."""
        return self._of_campaign(campaign_id, "load generators", TrialGenerator,
                                 (TrialGenerator.trial_id, TrialGenerator.position),
                                 lambda r: record(GeneratorRecord, r))

    # Plain rows (a Core select of the table's columns), not ORM objects: a trial holds tens
    # of thousands of samples, and building an ORM instance for each, only to copy it into a
    # record, is most of the time of reading them.

    def _of_trial(self, trial_id: int, what: str, model: Any, order: Sequence[Any],
                  convert: Callable[[Any], R]) -> list[R]:
        with self._session(f"read the {what} of trial {trial_id}") as s:
            query = (select(*model.__table__.columns).where(model.trial_id == trial_id)
                     .order_by(*order))
            return [convert(row) for row in s.execute(query).mappings()]

    def _of_trials(self, what: str, model: Any, trial_ids: Collection[int],
                   where: Sequence[Any], order: Sequence[Any],
                   convert: Callable[[Any], R]) -> dict[int, list[R]]:
        ids = sorted(set(trial_ids))
        found: dict[int, list[R]] = {}
        with self._session(f"read the {what} of trials") as s:
            # a few hundred ids a query: SQLite bounds the parameters of one statement
            for start in range(0, len(ids), ID_BATCH):
                query = (select(*model.__table__.columns)
                         .where(model.trial_id.in_(ids[start:start + ID_BATCH]), *where)
                         .order_by(*order))
                for row in s.execute(query).mappings():
                    found.setdefault(row["trial_id"], []).append(convert(row))
        return found

    def _of_campaign(self, campaign_id: str, what: str, model: Any, order: Sequence[Any],
                     convert: Callable[[Any], R]) -> dict[int, list[R]]:
        with self._session(f"read the {what} of campaign {campaign_id!r}") as s:
            query = (select(*model.__table__.columns)
                     .join(Trial, model.trial_id == Trial.id)
                     .where(Trial.campaign_id == campaign_id).order_by(*order))
            found: dict[int, list[R]] = {}
            for row in s.execute(query).mappings():
                found.setdefault(row["trial_id"], []).append(convert(row))
            return found
