"""A regression sweep's strategy: each named variant against the baseline run's trials of it.

Each variant runs ``min_trials`` trials, then is compared with the baseline on every watched
metric (corruption and wedging on session counts, throughput and p99 latency on per-trial
values), three-way (orchestrator/core/stats/regression.py). UNKNOWN adds a trial, up to
``max_trials`` (twice that while the metric leans worse: ``_budget``). A threshold is the
change a sweep must catch: a significant worsening of ``DETECT`` of it makes a suspect, and
SAME rules out the whole threshold. A variant found DIFFERENT is a *suspect*, not yet a
regression: it is run again on fresh trials, and only a difference those fresh trials show
again, on the same metric, is a regression. One unlucky trial on a noisy machine is how alert
storms start; the fresh trials are how they stop.

Controls, as Pinpoint runs them. Where the run can put the baseline's build back (the source
tree moved: ``confirm_build``), every trial of a variant runs beside one of the baseline's build,
alternated (current, baseline, current, baseline), and performance is compared with those fresh
controls only, measured in the same hours on the same machine: a machine runs faster or slower
from one day to the next, and another day's trials would mix that drift with the build. The
suspect's confirmation runs fresh pairs too. Where the build did not move and nothing else
changed since the baseline, a performance change against the baseline's trials of another day
can only be the machine's drift: it is shown (``uncontrolled``), never an alert. Where something
changed that the run cannot put back (a node's driver, a setting of the sweep file:
``unrestorable``), performance is compared with the baseline run's trials and confirmed on fresh
ones as session counts are, and an alert says it had no control and what changed.
Session counts are compared with the baseline's trials and the fresh controls together,
clustered by trial (sessions of a trial share a server: stats/clustered.py, the spread between
trials pooled over the run's variants).

The replay is pure: the same stored trials give the same answer, at every resume and in every
report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from experiments.strategy_config import BaselineTrial, NamedVariant, SweepConfig
from orchestrator.core.evidence import CORRUPTING, WEDGING, TrialEvidence, variant_key
from orchestrator.core.stats.clustered import (
    INDEPENDENT,
    RESTART_PRIOR,
    Counts,
    Dispersion,
    dispersion,
)
from orchestrator.core.stats.compare import StopWhenFailing
from orchestrator.core.stats.regression import (
    Comparison,
    Difference,
    compare_counts,
    compare_values,
)
from orchestrator.core.strategies.base import (
    UNFINISHED,
    Conclusion,
    Levels,
    Status,
    Unresolvable,
    not_yet_running,
)
from orchestrator.core.strategies.sequential import budget, looks, spent
from orchestrator.core.strategies.sweep_judged import (
    BINARY,
    CONTINUOUS,
    METRICS,
    Judged,
    SweepFinding,
    drift_words,
    regression_words,
    trail,
)

BUILD = "build"  # the factor of a run that can put the baseline's commit back
# A worsening of any watched metric becomes a suspect when it is significant and at least this
# share of its threshold: the threshold is the change a sweep must catch, and a true change of
# exactly it is seen below it half the time (bench/sweeps.py: 48% of 5-point regressions found
# at a share of 1, 96% at 0.4). SAME still rules out the whole threshold.
DETECT = 0.4


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


def _trial_counts(samples: Sequence[Sample], metric: str) -> list[Counts]:
    """Each trial's (failing, judged) sessions: corruption among sessions that reached a
    verdict of their own; wedging (errors and timeouts) among all sessions."""
    failing = CORRUPTING if metric == "corruption" else WEDGING
    judged = [TrialEvidence({}, s.counts, failing=failing) for s in samples]
    return [(t.failures, t.judged) for t in judged]


def _summed(trials: Sequence[Counts]) -> Counts:
    return sum(k for k, _ in trials), sum(n for _, n in trials)


def _tail(spread: Dispersion, failing: int, sizes: tuple[int, ...], rate: float) -> float:
    """P(at most ``failing`` over trials of ``sizes``) at ``rate``, each trial's rate spread
    as ``spread`` says (``Dispersion.at_most``)."""
    return spread.at_most(failing, sizes, rate)


def _values_each(samples: Sequence[Sample], metric: str) -> list[float | None]:
    """Each trial's figure of ``metric``, None where it measured none."""
    raw = [s.output_throughput if metric == "throughput" else s.p99_e2e_ms for s in samples]
    return [v if v is not None and v > 0 else None for v in raw]


def _values(samples: Sequence[Sample], metric: str) -> list[float]:
    return [v for v in _values_each(samples, metric) if v is not None]


def compare(metric: str, current: Sequence[Sample], reference: Sequence[Sample],
            plan: SweepConfig, confirming: bool = False,
            spread: Dispersion = INDEPENDENT, paired: bool = False,
            same: bool = True) -> Comparison | None:
    """One metric of ``current`` against ``reference``; None where it is not watched or not
    measured on both sides (a probe has no throughput). ``confirming``: a suspect's fresh
    trials, let go only when they rule out the rise that made it one (DETECT of the
    threshold), not merely the whole threshold, and found worse only at the level of one of
    the confirmation's looks (``confirm_looks``). ``spread``: between trials, of this metric's
    rate (session counts are tested at their design effect). ``paired``: ``reference[i]`` is
    the control run beside ``current[i]`` (performance is then compared pair by pair).
    ``same=False``: between the looks that may settle it (``compare_looks``), only whether it
    is worse (SAME untested)."""
    threshold = getattr(plan.thresholds, metric)
    if threshold is None:
        return None
    detect = DETECT * threshold
    least = detect if confirming else threshold  # the worsening SAME rules out
    alpha_worse = spent(plan.alpha, confirm_looks(plan)) if confirming else None
    if metric in BINARY:
        trials = _trial_counts(current, metric)
        now, then = _summed(trials), _summed(_trial_counts(reference, metric))
        tested = (spread.effective(now, len(current)), spread.effective(then, len(reference)))
        ruled_out = (then[0] / then[1] if then[1] else 0.0) + least
        return compare_counts(metric, now, then, min_effect=least, alpha=plan.alpha,
                              detect=detect,
                              effective=None if tested == (now, then) else tested,
                              p_same_trials=_tail(spread, now[0],
                                                  tuple(n for _, n in trials), ruled_out)
                              if same else None,
                              alpha_worse=alpha_worse, same=same)
    if paired:  # pairs where both trials measured it
        both = [(a, b) for a, b in zip(_values_each(current, metric),
                                       _values_each(reference, metric), strict=True)
                if a is not None and b is not None]
        values, baseline = [a for a, _ in both], [b for _, b in both]
    else:
        values, baseline = _values(current, metric), _values(reference, metric)
    if not values and not baseline:
        return None
    return compare_values(metric, values, baseline, min_relative=least, alpha=plan.alpha,
                          worse="lower" if metric == "throughput" else "higher",
                          paired=paired, detect=detect, alpha_worse=alpha_worse, same=same)


def _answers(comparisons: Sequence[Comparison]) -> set[Difference]:
    return {c.answer for c in comparisons}


@dataclass(frozen=True)
class _Sides:
    """A variant's trials as one judgement reads them, in the order they ran."""

    mine: list[Sample]  # the current build's
    controls: list[Sample]  # the baseline's build's, fresh (empty where it cannot run)
    reference: list[Sample]  # the baseline run's stored trials

    @property
    def pairs(self) -> int:
        """Whole pairs run (a trial and its control)."""
        return min(len(self.mine), len(self.controls))

    def detection(self, seen: int, metric: str) -> tuple[list[Sample], list[Sample]]:
        """What the first ``seen`` trials are compared with: performance with the controls
        beside them only (another day's trials mix the machine's drift in), session counts
        with the stored trials and the controls together."""
        if not self.controls:
            return self.mine[:seen], self.reference
        if metric in CONTINUOUS:
            return self.mine[:seen], self.controls[:seen]
        return self.mine[:seen], [*self.reference, *self.controls[:seen]]


class SweepStrategy:
    def __init__(self, plan: SweepConfig) -> None:
        self.plan = plan
        self.baseline: dict[str, list[Sample]] = {}
        for trial in plan.baseline:
            self.baseline.setdefault(trial.variant, []).append(of_baseline(trial))

    def levels(self, variant: NamedVariant, build: str = "current") -> dict[str, str]:
        return {**variant.levels, **({BUILD: build} if self.plan.confirm_build else {})}

    def spread(self, done: Sequence[TrialEvidence]) -> dict[str, Dispersion]:
        """The spread between trials of each session metric, pooled over every variant's
        trials of each build and the baseline run's (stats/clustered.py), and never below what
        a restart is assumed to do (``RESTART_PRIOR``): at a 1% rate the trials show almost
        none of their spread (bench/sweeps.py: `tau2` estimated at 0.02 on 42 df where the
        restarts were drawn at 0.62, and an alert followed), and a spread taken as less makes
        both a SAME and an alert surer than the trials are."""
        groups: dict[str, list[Sample]] = {}
        for trial in done:
            groups.setdefault(variant_key(trial.levels), []).append(of_trial(trial))
        for name, samples in self.baseline.items():
            groups[f"baseline run: {name}"] = samples
        return {metric: dispersion(_trial_counts(samples, metric)
                                   for samples in groups.values()).at_least(RESTART_PRIOR)
                for metric in BINARY}

    def judge(self, variant: NamedVariant, done: Sequence[TrialEvidence],
              spread: Mapping[str, Dispersion] | None = None) -> Judged:
        plan, controlled = self.plan, self.plan.confirm_build
        spread = self.spread(done) if spread is None else spread
        key, base_key = variant_key(self.levels(variant)), variant_key(
            self.levels(variant, "baseline"))
        reference = self.baseline.get(variant.name, [])
        sides = _Sides([of_trial(t) for t in done if variant_key(t.levels) == key],
                       [of_trial(t) for t in done if variant_key(t.levels) == base_key]
                       if controlled and reference else [], reference)
        mine, controls = sides.mine, sides.controls
        wanted_controls = plan.min_trials if controlled and reference else 0
        if len(mine) < plan.min_trials or len(controls) < wanted_controls:
            return Judged(variant, "measuring", len(mine), (), needed=tuple(self._pairs(
                variant, plan.min_trials - len(mine), wanted_controls - len(controls),
                sides.pairs)))
        if not reference:
            return Judged(variant, "new", len(mine), ())
        usable = min(len(mine), len(controls)) if controlled else len(mine)  # whole pairs
        # with no control beside it and nothing changed, a performance change is the
        # machine's drift: shown, deciding nothing (more trials would not tell it apart)
        drift_only = not controlled and not plan.unrestorable
        found: tuple[Comparison, ...] = ()
        settle_at = compare_looks(plan)
        for seen in range(plan.min_trials, usable + 1):
            settles = seen in settle_at
            found = tuple(c for metric in METRICS if (c := compare(
                metric, *sides.detection(seen, metric), plan,
                spread=spread.get(metric, INDEPENDENT),
                paired=controlled and metric in CONTINUOUS, same=settles)) is not None)
            deciding = [c for c in found if not drift_only or c.metric in BINARY]
            drifted = tuple(c.metric for c in found if drift_only and c.metric in CONTINUOUS
                            and c.answer == Difference.DIFFERENT)
            suspected = tuple(c.metric for c in deciding if c.answer == Difference.DIFFERENT)
            if suspected:
                return self._confirm(variant, seen, found, suspected, sides, spread)
            if not settles:
                continue  # a suspect at any trial (the confirmation judges it); SAME at looks
            if _answers(deciding) <= {Difference.SAME}:
                return Judged(variant, "uncontrolled" if drifted else "clean", seen, found,
                              controls=seen if controlled else 0, uncontrolled=drifted)
            if seen >= _budget(plan, deciding):
                return Judged(variant, "inconclusive", seen, found,
                              controls=seen if controlled else 0)
        return Judged(variant, "measuring", len(mine), found,
                      needed=tuple(self._pairs(variant, 1, 1 if controlled else 0,
                                               sides.pairs)),
                      controls=usable if controlled else 0)

    def _pairs(self, variant: NamedVariant, current: int, baseline: int, ran: int
               ) -> list[dict[str, str]]:
        """``current`` trials of the variant and ``baseline`` of the baseline's build, each
        control beside its trial; ``ran``: the whole pairs run before them."""
        return _interleaved([self.levels(variant)] * max(0, current),
                            [self.levels(variant, "baseline")] * max(0, baseline), ran)

    def _confirm(self, variant: NamedVariant, seen: int, found: tuple[Comparison, ...],
                 suspected: tuple[str, ...], sides: _Sides,
                 spread: Mapping[str, Dispersion]) -> Judged:
        """The suspect again, on fresh trials only; against fresh trials of the baseline's
        build run beside them where the run can put it back, else against the baseline run's
        trials."""
        plan, controlled = self.plan, bool(sides.controls)
        fresh = sides.mine[seen:]
        fresh_controls = sides.controls[seen:]
        pairs = min(len(fresh), len(fresh_controls)) if controlled else len(fresh)
        at = [n for n in confirm_looks(plan) if n <= pairs]  # the looks taken so far
        partial: tuple[Comparison, ...] = ()
        if at:
            pairs = at[-1]  # judged at its last look: the same answer until the next
            against = fresh_controls[:pairs] if controlled else sides.reference
            judged = tuple(c for metric in suspected
                           if (c := compare(metric, fresh[:pairs], against, plan, True,
                                            spread.get(metric, INDEPENDENT),
                                            controlled and metric in CONTINUOUS)) is not None)
            answers = _answers(judged)
            state = ("regression" if Difference.DIFFERENT in answers else
                     "unconfirmed" if answers <= {Difference.SAME} else
                     "inconclusive" if pairs >= _budget(plan, judged) else "confirming")
            if state != "confirming":
                return Judged(variant, state, seen, found, suspected, judged, pairs,
                              controls=seen if controlled else 0)
            partial = judged
        wanted = min(n for n in confirm_looks(plan) if n > pairs) if at else plan.confirm_trials
        return Judged(variant, "confirming", seen, found, suspected, partial, pairs,
                      needed=tuple(self._pairs(variant, wanted - len(fresh),
                                               wanted - len(fresh_controls) if controlled
                                               else 0, sides.pairs)),
                      controls=seen if controlled else 0)

    def judged(self, done: Sequence[TrialEvidence]) -> list[Judged]:
        spread = self.spread(done)
        return [self.judge(variant, done, spread) for variant in self.plan.variants]

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
        summary = SweepFinding(self.plan.baseline_run,
                               tuple((j, states[j.variant.name]) for j in judged),
                               self.spread(done))
        log = tuple(row for j in judged for row in trail(j))
        regressions = [name for name, state in states.items() if state == "regression"]
        waiting = [name for name, state in states.items()
                   if state in ("measuring", "confirming")]
        if regressions:
            words = "; ".join(regression_words(j) for j in judged if j.variant.name
                              in regressions)
            uncontrolled = not self.plan.confirm_build and any(
                metric in CONTINUOUS for j in judged for metric in j.regressed)
            status, reason = Status.CULPRIT, f"regression: {words}" + (
                " (against the baseline's trials of another day, with no control beside "
                f"them; changed since: {'; '.join(self.plan.unrestorable)})"
                if uncontrolled else "")
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
            drifted = "; ".join(drift_words(j) for j in judged if j.uncontrolled)
            status, reason = Status.NO_CULPRIT, "clean: no variant differs from the baseline" + (
                f" ({', '.join(unconfirmed)}: a difference the fresh trials did not show "
                "again)" if unconfirmed else "") + (
                f"; against the baseline's trials of another day, with no control beside "
                f"them (the build did not move), not an alert: {drifted}" if drifted else "") + (
                f"; new since the baseline, measured only: {', '.join(new)}" if new else "")
        return Conclusion(status, reason, log=log, finding=summary)


def _budget(plan: SweepConfig, comparisons: Sequence[Comparison]) -> int:
    """A variant's trials before it is left undecided: ``max_trials``, or twice it
    (sequential.budget) while an undecided metric leans either way (a p short of its level,
    but within ``LEANS_AT``): a regression that restarts spread shows itself a few trials
    later, and a clean variant whose trials spread wide rules the threshold out a few trials
    later (bench/sweeps.py: at a 10% throughput threshold, 26% of clean runs were left
    undecided at 12 pairs, most with p_same within 0.1)."""
    return budget(plan.max_trials, *((p, level) for c in comparisons
                                     if c.answer == Difference.UNKNOWN
                                     for p, level in ((c.p_worse, c.level_worse),
                                                      (c.p_same, c.alpha))))


def compare_looks(plan: SweepConfig) -> tuple[int, ...]:
    """The trials a variant's comparison may settle at, SAME or undecided (3, 6, 12 and 24 at
    a sweep file's default budget): fewer chances for a regression of exactly the threshold to
    pass for SAME than a judgement after every trial, and the exact test of SAME is skipped
    between them. bench/sweeps.py, 10% drop at a 10% threshold: still 9 of 200 runs called
    clean (each look is at alpha; a share of alpha per look is not measured yet)."""
    return looks(plan.min_trials, plan.max_trials)


def confirm_looks(plan: SweepConfig) -> tuple[int, ...]:
    """The fresh trials a suspect's confirmation judges at (3, 6, 12 and 24 at a sweep file's
    default budget), each at an equal share of ``alpha``: an alert is the confirmation's
    DIFFERENT, and judged after every fresh trial, a clean variant's noise had ten chances or
    more to cross alpha (bench/sweeps.py: 2 of 200 clean runs alerted)."""
    return looks(plan.confirm_trials, plan.max_trials)


def _interleaved(current: list[dict[str, str]], baseline: list[dict[str, str]], ran: int
                 ) -> list[dict[str, str]]:
    """Current and baseline builds alternating, so a pair runs side by side in time, and each
    pair in the order the reverse of the last (current first in the run's first, third...
    pair; ``ran`` pairs ran before): a machine that speeds up or slows down over the hours
    would otherwise favour the side that always runs second (bench/sweeps.py: a false
    throughput alert, -7% over 12 pairs, every baseline trial run after its pair's)."""
    out: list[dict[str, str]] = []
    for index in range(max(len(current), len(baseline))):
        pair = current[index:index + 1] + baseline[index:index + 1]
        out += pair[::-1] if (ran + index) % 2 else pair
    return out
