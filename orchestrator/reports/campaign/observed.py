"""What the trials observed, for the report: raw excerpts of corrupted sessions with their
triage, and time series of running and queued requests with the wedge log events marked.

Both are capped (a few excerpts per outcome class, a few dozen series of a bounded number of
points), and read from the store only for the trials they take, so that a campaign of hundreds
of trials is read quickly and reported small."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from db.records import LogRecord, MetricRecord, StepRecord, TrialRecord
from db.store import Store
from experiments.markup import find_markup, markup_family
from experiments.outcomes import WEDGE_LOG_KINDS, Outcome, is_corrupt
from orchestrator.core.evidence import variant_key
from orchestrator.reports.campaign.model import CulpritRow, Excerpt, Point, SeriesEvent, TrialSeries

MAX_EXCERPTS = 3  # per corrupted outcome class
MAX_EXCERPT = 400  # characters of one excerpt
MAX_SERIES = 16  # (trial, service) series in a report
MAX_POINTS = 120  # per series: downsampled beyond (each bucket keeps its peak)
MAX_EVENTS = 40  # wedge log events marked per series
MAX_EVENT_TEXT = 200
RUNNING, QUEUED = "sglang:num_running_reqs", "sglang:num_queue_reqs"

# A leak's stored evidence begins with its triage line (experiments/workload/session.py).
_TRIAGE = re.compile(r"\[(?P<label>[^\]\n]*)\] ", re.DOTALL)
_CANARIES = re.compile(r"expected canary '(?P<expected>[^']*)', got (?P<echoed>'[^']*'|\S+)")
_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")  # SGLang's log lines (local time)


def _clip(text: str, at: int) -> str:
    if len(text) <= MAX_EXCERPT:
        return text
    start = max(0, min(at - MAX_EXCERPT // 4, len(text) - MAX_EXCERPT))
    return text[start:start + MAX_EXCERPT]


def excerpt(outcome: str, variant: str, trial_id: int, session_key: str, turn: int | None,
            evidence: str) -> Excerpt:
    """A session's stored evidence read back: the triage line of a leak (well-formed or not,
    the markup's family), the canaries of a lost plot; the text clipped around the markup."""
    label = well_formed = family = expected = echoed = None
    text = evidence
    if outcome == Outcome.LEAK:
        found = _TRIAGE.match(evidence)
        if found:
            label, text = found["label"], evidence[found.end():]
            well_formed = False if label.startswith("malformed") else \
                True if label.startswith(("parses as", "parser mismatch")) else None
        family = markup_family(text)
    elif outcome == Outcome.LOST_PLOT and (canaries := _CANARIES.search(evidence)):
        expected, echoed = canaries["expected"], canaries["echoed"].strip("'")
        echoed = None if echoed == "None" else echoed
    fragment = find_markup(text)
    return Excerpt(outcome=outcome, variant=variant, trial_id=trial_id, session_key=session_key,
                   turn=turn, text=_clip(text, text.find(fragment) if fragment else 0),
                   well_formed=well_formed, family=family, expected_canary=expected,
                   echoed_canary=echoed, triage=label)


def excerpts(store: Store, trials: Sequence[TrialRecord],
             omitted: dict[str, int]) -> list[Excerpt]:
    """Up to MAX_EXCERPTS per corrupted outcome class, from as many trials as it takes."""
    taken: dict[str, list[Excerpt]] = {}
    for trial in trials:
        wanted = [o for o, n in trial.counts.items()
                  if n and is_corrupt(o) and len(taken.get(o, [])) < MAX_EXCERPTS]
        if not wanted:
            continue
        for session in store.sessions(trial.id):
            got = taken.setdefault(session.outcome, [])
            if session.outcome in wanted and len(got) < MAX_EXCERPTS:
                got.append(excerpt(session.outcome, variant_key(trial.levels), trial.id,
                                   session.key, session.first_bad_turn, session.evidence or ""))
    total = sum(n for t in trials for o, n in t.counts.items() if is_corrupt(o))
    shown = [e for got in taken.values() for e in got]
    if total > len(shown):
        omitted["evidence"] = total - len(shown)
    return shown


def _downsample(points: list[Point]) -> list[Point]:
    """At most MAX_POINTS: each bucket's peak, so that a queue's spike is never smoothed out."""
    if len(points) <= MAX_POINTS:
        return points
    size = len(points) / MAX_POINTS
    return [max(points[int(i * size):int((i + 1) * size)], key=lambda p: p[1])
            for i in range(MAX_POINTS)]


def _summed(samples: Sequence[MetricRecord], name: str) -> list[Point]:
    """A metric's samples summed over its label sets (ranks, models) at each scrape."""
    at: dict[float, float] = {}
    for sample in samples:
        if sample.name == name:
            at[sample.t] = at.get(sample.t, 0.0) + sample.value
    return _downsample([(round(t, 3), value) for t, value in sorted(at.items())])


def _chosen(trials: Sequence[TrialRecord], culprits: Sequence[CulpritRow]) -> list[TrialRecord]:
    """The trials worth a chart first: those with wedge signs (most first), then one of each
    variant, the culprits' first; then the rest by their order."""
    def holds(trial: TrialRecord) -> bool:
        return any(all(trial.levels.get(f) == lvl for f, lvl in c.levels.items())
                   for c in culprits)

    def signs(trial: TrialRecord) -> int:
        return sum(trial.events.get(k, 0) for k in WEDGE_LOG_KINDS) + \
            trial.counts.get(Outcome.ERROR.value, 0) + trial.counts.get(Outcome.TIMEOUT.value, 0)

    wedged = sorted((t for t in trials if signs(t)), key=signs, reverse=True)
    seen: set[str] = set()
    firsts = []
    for trial in sorted(trials, key=lambda t: not holds(t)):
        if (key := variant_key(trial.levels)) not in seen:
            seen.add(key)
            firsts.append(trial)
    return list({t.id: t for t in [*wedged, *firsts, *trials]}.values())


def _event_time(text: str, stress_at: datetime | None, last_t: float) -> float | None:
    """Seconds since the metrics began (the workload's start), read from the line's own stamp
    (whole seconds, the node's local time read as this machine's: the middle of its second,
    kept within the series); None where it has none, or it falls outside (another clock)."""
    found = _STAMP.match(text)
    if found is None or stress_at is None:
        return None
    stamp = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S").astimezone(UTC)
    t_s = (stamp - stress_at).total_seconds() + 0.5
    if not -1.5 <= t_s <= last_t + 1.5:
        return None
    return round(min(max(t_s, 0.0), last_t), 3)


def series(store: Store, trials: Sequence[TrialRecord], culprits: Sequence[CulpritRow],
           omitted: dict[str, int],
           steps: Mapping[int, Sequence[StepRecord]]) -> list[TrialSeries]:
    """Running and queued requests per (trial, service), wedge log events marked. ``steps``:
    the trials' steps by trial id (``Store.campaign_steps``), for when each workload began."""
    shown: list[TrialSeries] = []
    skipped = 0
    chosen = _chosen(trials, culprits)
    samples: dict[int, list[MetricRecord]] = {}
    events: dict[int, list[LogRecord]] = {}
    read: set[int] = set()
    for at, trial in enumerate(chosen):
        if len(shown) >= MAX_SERIES:
            skipped += 1
            continue
        if trial.id not in read:  # the next trials, as many as there are series to fill
            batch = [t.id for t in chosen[at:at + MAX_SERIES - len(shown)]]
            samples.update(store.trials_metrics(batch, (RUNNING, QUEUED)))
            events.update(store.trials_log_events(batch, WEDGE_LOG_KINDS))
            read.update(batch)
        mine = samples.pop(trial.id, [])
        if not mine:
            continue
        stress_at = next((s.started_at for s in steps.get(trial.id, ())
                          if s.name in ("stress", "probe")), None)
        logged = events.pop(trial.id, [])
        for service in sorted({s.service for s in mine}):
            of_service = [s for s in mine if s.service == service]
            running, queued = _summed(of_service, RUNNING), _summed(of_service, QUEUED)
            last_t = max(p[0] for p in [*running, *queued])
            marked = [e for e in logged if e.service == service]
            if len(marked) > MAX_EVENTS:
                omitted["events"] = omitted.get("events", 0) + len(marked) - MAX_EVENTS
            shown.append(TrialSeries(
                trial_id=trial.id, variant=variant_key(trial.levels), pool=trial.pool,
                service=service, running=running, queued=queued,
                events=[SeriesEvent(t_s=_event_time(e.text, stress_at, last_t), kind=e.kind,
                                    text=e.text[:MAX_EVENT_TEXT])
                        for e in marked[:MAX_EVENTS]]))
    if skipped:
        omitted["series_trials"] = skipped
    return shown
