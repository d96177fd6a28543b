"""A regression sweep's strategy: each named variant against the baseline run's trials of it.

Each variant runs ``min_trials`` trials, then is compared with the baseline on every watched
metric (corruption and wedging on session counts, throughput and p99 latency on per-trial
values), three-way (orchestrator/core/stats/regression.py). UNKNOWN adds a trial, up to
``max_trials``. A variant found DIFFERENT is a *suspect*, not yet a regression: it is run again on
fresh trials (beside fresh trials of the baseline's build, where the run can put it back), and
only a difference those fresh trials show again, on the same metric, is a regression. One
unlucky trial on a noisy machine is how alert storms start; the fresh trials are how they stop.

The replay is pure: the same stored trials give the same answer, at every resume and in every
report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from experiments.strategy_config import BaselineTrial, NamedVariant, SweepConfig
from orchestrator.core.evidence import CORRUPTING, WEDGING, TrialEvidence, variant_key
from orchestrator.core.stats.compare import StopWhenFailing
from orchestrator.core.stats.regression import (
    Comparison,
    Difference,
    compare_counts,
    compare_values,
    said_change,
)
from orchestrator.core.strategies.base import (
    UNFINISHED,
    Conclusion,
    Levels,
    Status,
    Unresolvable,
    not_yet_running,
)

BUILD = "build"  # the factor of a run that can put the baseline's commit back
BINARY = ("corruption", "wedging")
CONTINUOUS = ("throughput", "p99_latency")
METRICS = (*BINARY, *CONTINUOUS)
# A rise of corruption or wedging becomes a suspect when it is significant and at least this
# share of its threshold: the threshold is the rise a sweep must catch, and a true rise of
# exactly it is seen below it half the time (bench/sweeps.py: 48% of 5-point regressions found
# at a share of 1, 96% at 0.4). SAME still rules out the whole threshold.
DETECT = 0.4
# A variant's state as a reader says it (`bisect sweep`, the sweep report)
STATES: Mapping[str, str] = {
    "clean": "same as the baseline", "regression": "REGRESSION (confirmed)",
    "unconfirmed": "a difference the fresh trials did not show again",
    "inconclusive": "undecided within the budget", "new": "no baseline to compare with",
    "undeployable": "could not be deployed", "measuring": "unfinished",
    "confirming": "unfinished (confirming)"}


@dataclass(frozen=True)
class Sample:
    """What one trial gives each metric: session counts, and the two performance figures."""

    counts: Mapping[str, int]
    output_throughput: float | None
    p99_e2e_ms: float | None


def of_trial(trial: TrialEvidence) -> Sample:
    performance = trial.performance
    p99 = None if performance is None or performance.e2e is None else performance.e2e.p99_ms
    return Sample(trial.counts, None if performance is None else performance.output_throughput,
                  p99)


def of_baseline(trial: BaselineTrial) -> Sample:
    return Sample(trial.counts, trial.output_throughput, trial.p99_e2e_ms)


def _counts(samples: Sequence[Sample], metric: str) -> tuple[int, int]:
    """(failing, judged) sessions: corruption among sessions that reached a verdict of their
    own; wedging (errors and timeouts) among all sessions."""
    failing = CORRUPTING if metric == "corruption" else WEDGING
    judged = [TrialEvidence({}, s.counts, failing=failing) for s in samples]
    return sum(t.failures for t in judged), sum(t.judged for t in judged)


def _values(samples: Sequence[Sample], metric: str) -> list[float]:
    raw = [s.output_throughput if metric == "throughput" else s.p99_e2e_ms for s in samples]
    return [v for v in raw if v is not None and v > 0]


def compare(metric: str, current: Sequence[Sample], reference: Sequence[Sample],
            plan: SweepConfig, confirming: bool = False) -> Comparison | None:
    """One metric of ``current`` against ``reference``; None where it is not watched or not
    measured on both sides (a probe has no throughput). ``confirming``: a suspect's fresh
    trials, let go only when they rule out the rise that made it one (DETECT of the
    threshold), not merely the whole threshold."""
    threshold = getattr(plan.thresholds, metric)
    if threshold is None:
        return None
    if metric in BINARY:
        detect = DETECT * threshold
        return compare_counts(metric, _counts(current, metric), _counts(reference, metric),
                              min_effect=detect if confirming else threshold,
                              alpha=plan.alpha, detect=detect)
    now, then = _values(current, metric), _values(reference, metric)
    if not now and not then:
        return None
    return compare_values(metric, now, then, min_relative=threshold, alpha=plan.alpha,
                          worse="lower" if metric == "throughput" else "higher")


@dataclass(frozen=True)
class Judged:
    """Where one variant stands. ``state``: measuring (more trials needed), clean,
    inconclusive (UNKNOWN at the budget), confirming (a suspect's fresh trials running),
    regression (confirmed), unconfirmed (the fresh trials did not show it again), new (no
    baseline to compare with)."""

    variant: NamedVariant
    state: str
    trials: int  # the trials the detection used
    comparisons: tuple[Comparison, ...]
    suspected: tuple[str, ...] = ()  # metrics found DIFFERENT, to confirm
    confirmation: tuple[Comparison, ...] = ()
    confirm_trials: int = 0  # fresh trials of the suspect (and of the baseline's build)
    needed: tuple[dict[str, str], ...] = ()  # the trials it still needs

    @property
    def regressed(self) -> tuple[str, ...]:
        return tuple(c.metric for c in self.confirmation if c.answer == Difference.DIFFERENT)


def _answers(comparisons: Sequence[Comparison]) -> set[Difference]:
    return {c.answer for c in comparisons}


class SweepStrategy:
    def __init__(self, plan: SweepConfig) -> None:
        self.plan = plan
        self.baseline: dict[str, list[Sample]] = {}
        for trial in plan.baseline:
            self.baseline.setdefault(trial.variant, []).append(of_baseline(trial))

    def levels(self, variant: NamedVariant, build: str = "current") -> dict[str, str]:
        return {**variant.levels, **({BUILD: build} if self.plan.confirm_build else {})}

    def judge(self, variant: NamedVariant, done: Sequence[TrialEvidence]) -> Judged:
        plan = self.plan
        key, base_key = variant_key(self.levels(variant)), variant_key(
            self.levels(variant, "baseline"))
        mine = [of_trial(t) for t in done if variant_key(t.levels) == key]
        more = dict(self.levels(variant))
        if len(mine) < plan.min_trials:
            return Judged(variant, "measuring", len(mine), (),
                          needed=(more,) * (plan.min_trials - len(mine)))
        reference = self.baseline.get(variant.name)
        if not reference:
            return Judged(variant, "new", len(mine), ())
        for seen in range(plan.min_trials, len(mine) + 1):
            found = tuple(c for metric in METRICS
                          if (c := compare(metric, mine[:seen], reference, plan)) is not None)
            answers = _answers(found)
            if Difference.DIFFERENT in answers:
                suspected = tuple(c.metric for c in found if c.answer == Difference.DIFFERENT)
                return self._confirm(variant, seen, found, suspected, mine[seen:],
                                     [of_trial(t) for t in done
                                      if variant_key(t.levels) == base_key], reference)
            if answers <= {Difference.SAME}:
                return Judged(variant, "clean", seen, found)
            if seen >= plan.max_trials:
                return Judged(variant, "inconclusive", seen, found)
        return Judged(variant, "measuring", len(mine), found, needed=(more,))

    def _confirm(self, variant: NamedVariant, seen: int, found: tuple[Comparison, ...],
                 suspected: tuple[str, ...], fresh: list[Sample], rebuilt: list[Sample],
                 reference: list[Sample]) -> Judged:
        """The suspect again, on fresh trials only; against fresh trials of the baseline's
        build where the run has it, else against the baseline run's trials."""
        plan, build = self.plan, self.plan.confirm_build
        pairs = min(len(fresh), len(rebuilt)) if build else len(fresh)
        partial: tuple[Comparison, ...] = ()
        if pairs >= plan.confirm_trials:
            against = rebuilt[:pairs] if build else reference
            judged = tuple(c for metric in suspected
                           if (c := compare(metric, fresh[:pairs], against, plan, True))
                           is not None)
            answers = _answers(judged)
            state = ("regression" if Difference.DIFFERENT in answers else
                     "unconfirmed" if answers <= {Difference.SAME} else
                     "inconclusive" if pairs >= plan.max_trials else "confirming")
            if state != "confirming":
                return Judged(variant, state, seen, found, suspected, judged, pairs)
            partial = judged
        wanted = max(plan.confirm_trials, pairs + 1)
        needed = [self.levels(variant)] * (wanted - len(fresh))
        if build:
            needed += [self.levels(variant, "baseline")] * (wanted - len(rebuilt))
        return Judged(variant, "confirming", seen, found, suspected, partial, pairs,
                      needed=tuple(_interleaved(needed)))

    def judged(self, done: Sequence[TrialEvidence]) -> list[Judged]:
        return [self.judge(variant, done) for variant in self.plan.variants]

    # -- the Strategy protocol -----------------------------------------------------------

    def propose(self, done: Sequence[TrialEvidence], pending: Sequence[Levels]) -> list[
            dict[str, str]]:
        needed = [levels for judged in self.judged(done) for levels in judged.needed]
        return not_yet_running(needed, pending)

    def stop_rule(self, levels: Levels, done: Sequence[TrialEvidence]) -> StopWhenFailing | None:
        return None  # a sweep measures throughput and latency: every trial runs to its end

    def meeting(self, unresolvable: Sequence[Unresolvable]) -> SweepStrategy:
        return self

    def conclude(self, done: Sequence[TrialEvidence],
                 unresolvable: Sequence[Unresolvable]) -> Conclusion:
        judged = self.judged(done)
        broken = {variant_key(u.levels) for u in unresolvable}
        states = {j.variant.name: ("undeployable" if variant_key(self.levels(j.variant))
                                   in broken else j.state) for j in judged}
        summary = {"baseline_run": self.plan.baseline_run,
                   "variants": [_judged_json(j, states[j.variant.name]) for j in judged]}
        log = tuple(row for j in judged for row in _trail(j))
        regressions = [name for name, state in states.items() if state == "regression"]
        waiting = [name for name, state in states.items()
                   if state in ("measuring", "confirming")]
        if regressions:
            words = "; ".join(_regression_words(j) for j in judged if j.variant.name
                              in regressions)
            status, reason = Status.CULPRIT, f"regression: {words}"
        elif waiting:
            status, reason = Status.INCONCLUSIVE, UNFINISHED
        elif bad := [n for n, s in states.items() if s in ("inconclusive", "undeployable")]:
            status, reason = Status.INCONCLUSIVE, (
                f"inconclusive: {', '.join(bad)} undecided within the budget of "
                f"{self.plan.max_trials} trials")
        elif all(state == "new" for state in states.values()) or not self.plan.baseline:
            status, reason = Status.NO_CULPRIT, ("no baseline yet: nothing to compare with "
                                                 "(`--accept` makes this run the baseline)")
        else:
            unconfirmed = [n for n, s in states.items() if s == "unconfirmed"]
            new = [n for n, s in states.items() if s == "new"]
            status, reason = Status.NO_CULPRIT, "clean: no variant differs from the baseline" + (
                f" ({', '.join(unconfirmed)}: a difference the fresh trials did not show "
                "again)" if unconfirmed else "") + (
                f"; new since the baseline, measured only: {', '.join(new)}" if new else "")
        return Conclusion(status, reason, log=log, sweep=summary)


def _interleaved(levels: list[dict[str, str]]) -> list[dict[str, str]]:
    """Current and baseline builds alternating, so a pair runs side by side in time."""
    current = [lv for lv in levels if lv.get(BUILD) != "baseline"]
    baseline = [lv for lv in levels if lv.get(BUILD) == "baseline"]
    out: list[dict[str, str]] = []
    for index in range(max(len(current), len(baseline))):
        out += current[index:index + 1] + baseline[index:index + 1]
    return out


def _comparison_json(c: Comparison) -> dict[str, Any]:
    return {"metric": c.metric, "answer": c.answer.value, "baseline": c.baseline,
            "current": c.current, "change": c.change,
            "interval": [x if math.isfinite(x) else None for x in c.interval],  # strict JSON
            "p_worse": c.p_worse, "p_same": c.p_same, "min_effect": c.min_effect,
            "alpha": c.alpha,
            **({"counts": [list(x) for x in c.counts]} if c.counts is not None else {}),
            **({"values": [list(x) for x in c.values]} if c.values is not None else {})}


def _judged_json(j: Judged, state: str) -> dict[str, Any]:
    return {"name": j.variant.name, "levels": dict(j.variant.levels), "state": state,
            "trials": j.trials, "comparisons": [_comparison_json(c) for c in j.comparisons],
            "suspected": list(j.suspected), "confirm_trials": j.confirm_trials,
            "confirmation": [_comparison_json(c) for c in j.confirmation],
            "regressed": list(j.regressed)}


def _said(c: Comparison) -> str:
    if c.metric in BINARY:
        return (f"{c.metric} {c.baseline:.1%} -> {c.current:.1%} "
                f"({c.change * 100:+.1f} points)")
    return said_change(c.metric, c.change)  # a drop negative: "throughput -31%"


def _regression_words(j: Judged) -> str:
    said = ", ".join(_said(c) for c in j.confirmation if c.answer == Difference.DIFFERENT)
    return f"{j.variant.name}: {said}"


_WHAT: Mapping[str, str] = {"corruption": "corrupted sessions", "wedging": "errors and timeouts",
                            "throughput": "output tokens/s", "p99_latency": "p99 e2e latency"}


def _trail(j: Judged) -> list[dict[str, Any]]:
    """The decision trail (`bisect log`): each comparison the run decided on."""
    rows = [{"phase": "compare", "variant": j.variant.name, "levels": dict(j.variant.levels),
             "trials": j.trials,
             "what": _WHAT[c.metric], **_comparison_json(c)} for c in j.comparisons]
    rows += [{"phase": "confirm", "variant": j.variant.name, "levels": dict(j.variant.levels),
              "trials": j.confirm_trials,
              "what": _WHAT[c.metric], **_comparison_json(c)} for c in j.confirmation]
    return rows
