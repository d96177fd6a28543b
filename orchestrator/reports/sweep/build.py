"""The sweep report model built from the store: one run of a sweep, its comparisons recomputed
from its campaign's stored trials (store observations, recompute conclusions), what only the
run's stored result holds (the hunt as it ended, when its campaign cannot be read again), and
the sweep's history measured run by run on each run's own trials (history.py), and the run's
answer in words (answer.py).

The comparisons are the verdict's (``orchestrator.stored.verdict_of``, what
``orchestrator.sweeps.run.recompute`` returns) on this read path alone: no transport, no Ray.
Where a campaign cannot be read again (a spec this version no longer reads), the run's stored
result stands in, and the report says so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from db.errors import NotFound
from db.store import Store
from db.sweep_records import SweepRunRecord
from db.sweeps import Sweeps
from experiments.strategy_config import SweepConfig
from orchestrator.core.strategies.sweep_judged import BINARY, METRICS, STATES
from orchestrator.reports.campaign.provenance import tool_version
from orchestrator.reports.sweep.answer import answer
from orchestrator.reports.sweep.history import (
    Measurements,
    first_line,
    history_run,
    run_facts,
    window,
)
from orchestrator.reports.sweep.model import (
    Commit,
    Comparison,
    Counts,
    FactChange,
    Hunt,
    LevelsChange,
    Measured,
    MetricRow,
    SettingChange,
    SweepReport,
    TrailRow,
    VariantResult,
)
from orchestrator.stored import campaign_of, verdict_of
from orchestrator.sweeps.baseline import (
    changed_facts,
    changed_settings,
    changed_variants,
    one_commit,
)


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
    measured = Measurements(store)
    mine = measured.of(run)
    watched = _watched(store, run)
    variants = [_variant(v, mine.get(str(v.get("name"))), watched)
                for v in summary.get("variants") or []]
    hunt, described = _hunt(store, sweeps, run, result, notes)
    commit_baseline, commit_now, facts, levels, settings = _changes(store, run, baseline, result,
                                                                    described)
    shown = window(runs, run)
    history = [history_run(r, measured, run, baseline) for r in shown]
    reason = str(summary.get("reason") or result.get("reason") or run.reason or "")
    return SweepReport(
        sweep=sweep, run=run_facts(run), baseline=run_facts(baseline) if baseline else None,
        answer=answer(run.status, reason, variants, baseline),
        watched=watched, variants=variants, commit_baseline=commit_baseline,
        commit_now=commit_now, changed_facts=facts, changed_variants=levels,
        changed_settings=settings, hunt=hunt,
        trail=_trail(summary.get("variants") or []), history=history, recomputed=recomputed,
        tool_version=tool_version(), notes=notes,
        omitted_runs=len(runs) - len(shown))


# --- the run ---------------------------------------------------------------------------------


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
                     f"{run.campaign_id} cannot be judged again ({first_line(exc)})")
        return result, False
    return {"reason": verdict.reason, **(verdict.finding_json("sweep") or {})}, True


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


# --- each variant ----------------------------------------------------------------------------


def _pair(value: Any) -> Counts | None:
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    return int(value[0]), int(value[1])


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
                         f"cannot be judged again ({first_line(exc)})")
    return Hunt(status=status, reason=reason, campaign_id=campaign_id,
                variant=_text(stored.get("variant")), metric=_text(stored.get("metric")),
                good=_commit(good, described), bad=_commit(bad, described),
                first_bad=[c for sha in first_bad if (c := _commit(sha, described))],
                posterior=posterior, recomputed=recomputed), described
