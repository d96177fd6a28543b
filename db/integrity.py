"""What a store holds that it should not: a damaged file, rows that belong to nothing, trials left
half-done, locks never released. Read-only; ``bisect doctor`` turns it into advice."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from db.models import (
    Campaign,
    LogEvent,
    MetricSample,
    NodeLock,
    Trial,
    TrialGenerator,
    TrialSession,
    TrialStep,
    Variant,
)

_TRIAL_ROWS = {"session": TrialSession.trial_id, "metric_sample": MetricSample.trial_id,
               "log_event": LogEvent.trial_id, "trial_generator": TrialGenerator.trial_id,
               "trial_step": TrialStep.trial_id}


@dataclass(frozen=True)
class StoreHealth:
    """One campaign's rows, as found (plain values)."""

    campaign_id: str
    status: str
    damage: tuple[str, ...]  # the database's own integrity check, when it has one (SQLite)
    orphans: tuple[tuple[str, int], ...]  # (table, rows) whose trial or variant does not exist
    unfinished: tuple[int, ...]  # seqs of trials still 'running'
    duplicated: tuple[int, ...]  # seqs recorded by more than one trial
    done_empty: tuple[int, ...]  # seqs of whole 'done' trials without one session
    held_locks: tuple[str, ...]  # nodes whose lock was taken and never released
    trials: int  # trials that count (done)

    @property
    def clean(self) -> bool:
        return not (self.damage or self.orphans or self.unfinished or self.duplicated
                    or self.done_empty or self.held_locks)


def store_damage(s: Session) -> tuple[str, ...]:
    if s.get_bind().dialect.name != "sqlite":
        return ()  # PostgreSQL enforces its constraints and checksums pages itself
    rows = [str(row[0]) for row in s.execute(text("PRAGMA integrity_check"))]
    return () if rows == ["ok"] else tuple(rows)  # broken references: _orphans


def _orphans(s: Session) -> tuple[tuple[str, int], ...]:
    """Rows of any campaign whose parent row is gone (SQLite does not enforce foreign keys)."""
    found = []
    trial_ids = select(Trial.id)
    for table, trial_id in _TRIAL_ROWS.items():
        count = s.scalar(select(func.count(trial_id)).where(trial_id.not_in(trial_ids)))
        if count:
            found.append((table, int(count)))
    count = s.scalar(select(func.count()).select_from(Trial).where(
        Trial.variant_id.not_in(select(Variant.id))))
    if count:
        found.append(("trial", int(count)))
    return tuple(found)


def unreadable(campaign_id: str, damage: tuple[str, ...]) -> StoreHealth:
    """What is known of a campaign whose rows cannot be read for the damage."""
    return StoreHealth(campaign_id, "unreadable", damage, (), (), (), (), (), 0)


def inspect_campaign(s: Session, campaign_id: str,
                     damage: tuple[str, ...] = ()) -> StoreHealth | None:
    """None: no such campaign. ``damage``: what ``store_damage`` found."""
    campaign = s.get(Campaign, campaign_id)
    if campaign is None:
        return None
    trials = list(s.execute(select(Trial.seq, Trial.status, Trial.id, Trial.stopped_early).where(
        Trial.campaign_id == campaign_id).order_by(Trial.seq, Trial.id)))
    seqs = [seq for seq, _, _, _ in trials]  # the driver numbers every trial it starts once
    done_ids = {trial_id: seq for seq, status, trial_id, _ in trials if status == "done"}
    # A trial stopped early may end before its first session did; a whole one may not.
    whole = {trial_id for _, status, trial_id, early in trials if status == "done" and not early}
    with_sessions = set(s.scalars(select(TrialSession.trial_id).where(
        TrialSession.trial_id.in_(list(done_ids))).distinct())) if done_ids else set()
    held = s.scalars(select(NodeLock.node).where(
        NodeLock.campaign_id == campaign_id, NodeLock.released_at.is_(None)).order_by(NodeLock.id))
    return StoreHealth(
        campaign_id=campaign_id,
        status=campaign.status,
        damage=damage,
        orphans=_orphans(s),
        unfinished=tuple(seq for seq, status, _, _ in trials if status == "running"),
        duplicated=tuple(sorted({seq for seq in seqs if seqs.count(seq) > 1})),
        done_empty=tuple(sorted(seq for tid, seq in done_ids.items()
                                if tid in whole and tid not in with_sessions)),
        held_locks=tuple(dict.fromkeys(held)),
        trials=len(done_ids),
    )
