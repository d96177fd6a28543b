"""The sweep report model built from the store: one run of a sweep, its comparisons recomputed
from its campaign's stored trials (store observations, recompute conclusions), what only the
run's stored result holds (the hunt as it ended, when its campaign cannot be read again), and
the sweep's history measured run by run on each run's own trials.

The comparisons are the verdict's (``orchestrator.stored.verdict_of``, what
``orchestrator.sweeps.run.recompute`` returns) on this read path alone: no transport, no Ray.
Where a campaign cannot be read again (a spec this version no longer reads), the run's stored
result stands in, and the report says so.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from db.errors import NotFound
from db.store import Store
from db.sweep_records import SweepRunRecord
from db.sweeps import Sweeps
from experiments.strategy_config import SweepConfig
from orchestrator.core.evidence import CORRUPTING, WEDGING, TrialEvidence
from orchestrator.core.stats.regression import said_change
from orchestrator.core.strategies.sweep_judged import BINARY, METRICS, STATES
from orchestrator.reports.campaign.provenance import tool_version
from orchestrator.reports.sweep.model import (
    Answer,
    Commit,
    Comparison,
    Counts,
    FactChange,
    HistoryRun,
    Hunt,
    LevelsChange,
    Measured,
    MetricRow,
    RunFacts,
    SettingChange,
    SweepReport,
    TrailRow,
    VariantResult,
)
from orchestrator.reports.text import share
from orchestrator.stored import campaign_of, verdict_of
from orchestrator.sweeps.baseline import (
    baseline_trials,
    changed_facts,
    changed_settings,
    changed_variants,
    one_commit,
)

MAX_HISTORY = 200  # runs: a nightly sweep's half year and more; the others are counted
# What `bisect sweep` exits with (orchestrator/sweeps/run.py EXIT, the CLI's 130 on Ctrl-C)
EXITS: Mapping[str, tuple[int | None, str]] = {
    "clean": (0, "exit 0: clean, no variant differs from the baseline"),
    "regression": (1, "exit 1: a regression, confirmed on fresh trials"),
    "inconclusive": (3, "exit 3: inconclusive, undecided within the trial budget"),
    "skipped": (4, "exit 4: skipped, another run of the sweep held its lock"),
    "failed": (1, "exit 1: the run failed before its answer"),
    "interrupted": (130, "exit 130: interrupted before its answer"),
    "missed": (None, "no exit: no run started at its scheduled time"),
    "running": (None, "no exit yet: the run is under way"),
}
TITLES = {"clean": "Clean", "regression": "REGRESSION confirmed", "inconclusive": "Inconclusive",
          "skipped": "Skipped", "missed": "Missed", "failed": "Failed",
          "interrupted": "Interrupted", "running": "Running"}


def build_sweep_report(store: Store, sweep: str, seq: int | None = None) -> SweepReport:
    """The report of run ``seq`` of ``sweep`` (default: its last run). NotFound: no such sweep,
    no run yet, or no run ``seq``."""
    sweeps = Sweeps(store)
    runs = sweeps.runs(sweep)
    if not runs:
        raise NotFound(f"sweep {sweep!r} has no run yet")
    if seq is None:
        run = runs[-1]
    else:
        found = [r for r in runs if r.seq == seq]
        if not found:
            raise NotFound(f"sweep {sweep!r} has no run {seq} (its runs are 1 to "
                           f"{runs[-1].seq})")
        run = found[0]
    baseline = next((r for r in runs if r.id == run.baseline_run_id), None)
    result = dict(run.result or {})
    notes: list[str] = []
    summary, recomputed = _summary(store, run, result, notes)
    measured = _Measurements(store)
    mine = measured.of(run)
    watched = _watched(store, run)
    variants = [_variant(v, mine.get(str(v.get("name"))), watched)
                for v in summary.get("variants") or []]
    hunt, described = _hunt(store, sweeps, run, result, notes)
    commit_baseline, commit_now, facts, levels, settings = _changes(store, run, baseline, result,
                                                                    described)
    shown = _window(runs, run)
    history = [_history(r, measured, run, baseline) for r in shown]
    reason = str(summary.get("reason") or result.get("reason") or run.reason or "")
    return SweepReport(
        sweep=sweep, run=_facts(run), baseline=_facts(baseline) if baseline else None,
        answer=answer(run.status, reason, variants, baseline),
        watched=watched, variants=variants, commit_baseline=commit_baseline,
        commit_now=commit_now, changed_facts=facts, changed_variants=levels,
        changed_settings=settings, hunt=hunt,
        trail=_trail(summary.get("variants") or []), history=history, recomputed=recomputed,
        tool_version=tool_version(), notes=notes,
        omitted_runs=len(runs) - len(shown))


# --- the run ---------------------------------------------------------------------------------


def _when(moment: Any) -> str | None:
    return None if moment is None else moment.isoformat()


def _facts(run: SweepRunRecord) -> RunFacts:
    return RunFacts(
        id=run.id, seq=run.seq, status=run.status, trigger=run.trigger, schedule=run.schedule,
        started_at=_when(run.started_at), finished_at=_when(run.finished_at),
        accepted=run.accepted, accepted_at=_when(run.accepted_at), campaign_id=run.campaign_id,
        baseline_run_id=run.baseline_run_id, reason=run.reason, slot=_when(run.slot))


def _summary(store: Store, run: SweepRunRecord, result: dict[str, Any],
             notes: list[str]) -> tuple[dict[str, Any], bool]:
    """The run's comparisons recomputed from its stored trials; the stored result where its
    campaign cannot be read again (the bool says which)."""
    if run.campaign_id is None:
        return result, False
    try:
        verdict = verdict_of(store, run.campaign_id)
    # A campaign this version cannot judge must not hide the run: its stored result is shown
    except Exception as exc:
        notes.append(f"the comparisons are as the run stored them at its end: its campaign "
                     f"{run.campaign_id} cannot be judged again ({_first_line(exc)})")
        return result, False
    return {"reason": verdict.reason, **(verdict.finding_json("sweep") or {})}, True


def _first_line(exc: BaseException) -> str:
    said = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {said[0]}" if said else type(exc).__name__


def _watched(store: Store, run: SweepRunRecord) -> dict[str, float | None]:
    if run.campaign_id is None:
        return {}
    try:
        plan = campaign_of(store, run.campaign_id).strategy
    except Exception:  # the notes already say the campaign cannot be read
        return {}
    if not isinstance(plan, SweepConfig):
        return {}
    return {metric: getattr(plan.thresholds, metric) for metric in METRICS}


def answer(status: str, reason: str, variants: Sequence[VariantResult],
           baseline: SweepRunRecord | None) -> Answer:
    """The run's answer in a title and one sentence, and what `bisect sweep` exited with."""
    code, meaning = EXITS.get(status, (None, f"no exit code: the run is {status}"))
    if status == "clean" and baseline is None:
        meaning = "exit 0: clean, with no baseline yet to differ from"
    title = TITLES.get(status, status.capitalize())
    against = (f"run {baseline.seq} (accepted {baseline.accepted_at:%Y-%m-%d %H:%M} UTC)"
               if baseline is not None and baseline.accepted_at is not None else
               f"run {baseline.seq}" if baseline is not None else "")
    if status == "regression":
        said = "; ".join(f"{v.name}: " + ", ".join(_said(m, v.confirm_trials)
                                                   for m in v.metrics if m.regressed)
                         for v in variants if v.state == "regression")
        sentence = f"{title}: {said or reason}" + (f", against {against}" if against else "")
    elif status == "clean" and baseline is None:
        sentence = f"{title}: no baseline yet, nothing to compare with (`bisect sweep --accept` " \
                   "makes a run the baseline)"
    elif status == "clean":
        odd = [v.name for v in variants if v.state == "unconfirmed"]
        drifted = [v.name for v in variants if v.state == "uncontrolled"]
        sentence = f"{title}: every variant is the same as {against or 'the baseline'}" + (
            f" ({', '.join(odd)}: a difference the fresh trials did not show again)"
            if odd else "") + (
            f" ({', '.join(drifted)}: performance differs from the baseline's trials of "
            "another day, with no control beside it: not an alert)" if drifted else "")
    elif status == "inconclusive":
        open_ = [v.name for v in variants
                 if v.state not in ("clean", "unconfirmed", "uncontrolled", "new")]
        sentence = f"{title}: " + (f"{', '.join(open_)} undecided against "
                                   f"{against or 'the baseline'}" if open_ else reason)
    else:
        sentence = f"{title}: {reason}" if reason else title
    return Answer(status=status, title=title, sentence=sentence.rstrip(".") + ".",
                  exit_code=code, exit_meaning=meaning, reason=reason)


def _said(row: MetricRow, fresh: int) -> str:
    """A regressed metric as its confirmation measured it, saying so (the comparisons table
    shows the detection beside it: two figures of different trials), with the counts."""
    c = row.confirmation or row.detection
    if c is None or c.change is None:
        return row.metric
    on = (f" on its {fresh} fresh trial{'s' if fresh != 1 else ''}"
          if row.confirmation is not None and fresh else "")
    if row.binary:
        counts = f" ({c.counts_now[0]}/{c.counts_now[1]})" if c.counts_now else ""
        return (f"{row.metric} {share(c.baseline)} -> {share(c.current)}{counts}{on} "
                f"({c.change * 100:+.1f} points)")
    return said_change(row.metric, c.change) + on  # a drop negative: "throughput -31%"


# --- each variant ----------------------------------------------------------------------------


def _pair(value: Any) -> Counts | None:
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    return int(value[0]), int(value[1])


def _geometric_mean(values: Iterable[float | None]) -> float | None:
    """As the comparisons average a per-trial measure (on the log scale); None: none."""
    known = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return statistics.geometric_mean(known) if known else None


def _bound(value: Any) -> float | None:
    """An interval's end; None where it is unbounded (too few trials on a side)."""
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def comparison(c: Mapping[str, Any]) -> Comparison:
    """A comparison as the strategy's JSON has it (``_comparison_json``: counts and values
    current first, then the baseline's)."""
    interval = c.get("interval")
    counts = c.get("counts") or []
    values = c.get("values") or []
    return Comparison(
        answer=str(c.get("answer", "unknown")), baseline=c.get("baseline"),
        current=c.get("current"), change=c.get("change"),
        interval=(_bound(interval[0]), _bound(interval[1])) if interval and len(interval) == 2
        else None,
        p_worse=c.get("p_worse"), p_same=c.get("p_same"), min_effect=c.get("min_effect"),
        alpha=c.get("alpha"), alpha_worse=c.get("alpha_worse"), alpha_same=c.get("alpha_same"),
        counts_now=_pair(counts[0]) if len(counts) == 2 else None,
        counts_baseline=_pair(counts[1]) if len(counts) == 2 else None,
        values_now=[float(v) for v in values[0]] if len(values) == 2 else [],
        values_baseline=[float(v) for v in values[1]] if len(values) == 2 else [])


def _variant(v: Mapping[str, Any], measured: Measured | None,
             watched: Mapping[str, float | None]) -> VariantResult:
    detected = {c["metric"]: c for c in v.get("comparisons") or []}
    confirmed = {c["metric"]: c for c in v.get("confirmation") or []}
    suspected, regressed = set(v.get("suspected") or []), set(v.get("regressed") or [])
    rows = [MetricRow(metric=metric, binary=metric in BINARY,
                      watched=watched.get(metric) is not None or metric in detected,
                      now=measured.of(metric) if measured else None,
                      detection=comparison(detected[metric]) if metric in detected else None,
                      confirmation=comparison(confirmed[metric]) if metric in confirmed
                      else None,
                      suspected=metric in suspected, regressed=metric in regressed)
            for metric in METRICS
            if watched.get(metric) is not None or metric in detected or not watched]
    state = str(v.get("state", ""))
    return VariantResult(name=str(v.get("name", "")), levels=dict(v.get("levels") or {}),
                         state=state, state_text=STATES.get(state, state),
                         trials=int(v.get("trials") or 0),
                         confirm_trials=int(v.get("confirm_trials") or 0), metrics=rows)


def _trail(variants: Sequence[Mapping[str, Any]]) -> list[TrailRow]:
    """The decision trail (the strategy's ``_trail``, `bisect log`): each variant's comparisons,
    then its confirmation's."""
    rows = []
    for v in variants:
        for phase, key, trials in (("compare", "comparisons", v.get("trials")),
                                   ("confirm", "confirmation", v.get("confirm_trials"))):
            rows += [TrailRow(phase=phase, variant=str(v.get("name", "")),
                              metric=str(c.get("metric", "")), trials=trials,
                              comparison=comparison(c)) for c in v.get(key) or []]
    return rows


# --- what changed, the hunt ------------------------------------------------------------------


def _commit(sha: Any, described: Mapping[str, tuple[str, str]]) -> Commit | None:
    if not sha:
        return None
    subject, author = described.get(str(sha)[:12], (None, None))
    return Commit(sha=str(sha), subject=subject, author=author)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _changes(store: Store, run: SweepRunRecord, baseline: SweepRunRecord | None,
             result: Mapping[str, Any], described: Mapping[str, tuple[str, str]],
             ) -> tuple[Commit | None, Commit | None, list[FactChange], list[LevelsChange],
                        list[SettingChange]]:
    """The commits, node facts and variants' levels at the baseline and now: recomputed from
    both runs' stored facts and campaigns where they have them, else as the run stored them."""
    commits = dict(result.get("commits") or {})
    facts = list(result.get("changed_facts") or [])
    levels = list(result.get("changed_variants") or [])
    settings = list(result.get("changed_settings") or [])
    if baseline is not None and baseline.facts is not None and run.facts is not None:
        commits = {"baseline": one_commit(baseline.facts), "now": one_commit(run.facts)}
        facts = changed_facts(baseline.facts, run.facts)
    if baseline is not None and baseline.campaign_id and run.campaign_id:
        try:
            then_campaign = campaign_of(store, baseline.campaign_id)
            now_campaign = campaign_of(store, run.campaign_id)
            before, now = then_campaign.strategy, now_campaign.strategy
            if isinstance(before, SweepConfig) and isinstance(now, SweepConfig):
                levels = changed_variants(before, now)
            settings = changed_settings(then_campaign, now_campaign)
        except Exception:  # an unreadable campaign: the run's stored words stand
            pass
    return (_commit(commits.get("baseline"), described), _commit(commits.get("now"), described),
            [FactChange(node=str(f.get("node")), fact=str(f.get("fact")),
                        baseline=_text(f.get("baseline")), now=_text(f.get("now")))
             for f in facts],
            [LevelsChange(variant=str(c.get("variant")), baseline=c.get("baseline"),
                          now=dict(c.get("now") or {})) for c in levels],
            [SettingChange(what=f"service {c['service']}" if "service" in c
                           else f"level {c.get('level')}", baseline=_setting(c.get("baseline")),
                           now=_setting(c.get("now"))) for c in settings])


def _setting(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _hunt(store: Store, sweeps: Sweeps, run: SweepRunRecord, result: Mapping[str, Any],
          notes: list[str]) -> tuple[Hunt | None, dict[str, tuple[str, str]]]:
    """The hunt, its first bad commit recomputed from the hunt campaign's stored trials; and
    the subjects and authors of the commits its range holds."""
    stored = dict(result.get("hunt") or {})
    records = sweeps.hunts(run.id)
    if not stored and not records:
        return None, {}
    campaign_id = stored.get("campaign") or (records[-1].campaign_id if records else None)
    record = next((h for h in records if h.campaign_id == campaign_id), None)
    good = stored.get("good") or (record.good if record else None)
    bad = stored.get("bad") or (record.bad if record else None)
    status = str(stored.get("status") or "unknown")
    reason = str(stored.get("reason") or "the run ended before the hunt's answer was stored")
    first_bad, posterior = list(stored.get("first_bad") or []), stored.get("posterior")
    described: dict[str, tuple[str, str]] = {}
    recomputed = False
    if campaign_id:
        try:
            spec = campaign_of(store, campaign_id).commits
            if spec is not None:
                described = {sha: (d.subject, d.author) for sha, d in spec.described.items()}
            verdict = verdict_of(store, campaign_id)
            found = dict(verdict.finding_json("commits") or {})
            status, reason = verdict.status.value, verdict.reason
            first_bad, posterior = list(found.get("first_bad") or []), found.get("posterior")
            recomputed = True
        except Exception as exc:  # its stored words stand, said to be so
            notes.append(f"the hunt is as the run stored it: its campaign {campaign_id} "
                         f"cannot be judged again ({_first_line(exc)})")
    return Hunt(status=status, reason=reason, campaign_id=campaign_id,
                variant=_text(stored.get("variant")), metric=_text(stored.get("metric")),
                good=_commit(good, described), bad=_commit(bad, described),
                first_bad=[c for sha in first_bad if (c := _commit(sha, described))],
                posterior=posterior, recomputed=recomputed), described


# --- the history -----------------------------------------------------------------------------


class _Measurements:
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
                                             f"({_first_line(exc)})")
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
            throughput=_geometric_mean(t.output_throughput for t in trials),
            p99_ms=_geometric_mean(t.p99_e2e_ms for t in trials))
    return measured


def _window(runs: Sequence[SweepRunRecord], run: SweepRunRecord) -> Sequence[SweepRunRecord]:
    """The last MAX_HISTORY runs; around the reported run where it is older than those."""
    at = next(i for i, r in enumerate(runs) if r.id == run.id)
    start = max(0, len(runs) - MAX_HISTORY)
    if at < start:
        start = max(0, at - MAX_HISTORY // 2)
    return runs[start:start + MAX_HISTORY]


def _history(r: SweepRunRecord, measured: _Measurements, run: SweepRunRecord,
             baseline: SweepRunRecord | None) -> HistoryRun:
    shown = measured.of(r)
    note = "" if shown else measured.why.get(r.campaign_id or "") or r.reason or (
        "no trial finished" if r.campaign_id else f"{r.status}: nothing measured")
    return HistoryRun(run=_facts(r), variants=shown,
                      baseline=baseline is not None and r.id == baseline.id,
                      current=r.id == run.id, note=note)
