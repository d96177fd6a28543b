"""A regression sweep's strategy: each named variant against the baseline run's trials of it.

Each variant runs ``min_trials`` trials, then is compared with the baseline on every watched
metric (corruption and wedging on session counts, throughput and p99 latency on per-trial
values), three-way (orchestrator/core/stats/regression.py; how: sweep_compare.py). UNKNOWN adds
a trial, up to ``max_trials`` (twice that while the metric leans either way: ``budget_of``). A
threshold is the change a sweep must catch: a significant worsening of ``DETECT`` of it makes a
suspect, and SAME rules out the whole threshold. A variant found DIFFERENT is a *suspect*, not
yet a regression: it is run again on fresh trials, and only a difference those fresh trials
show again, on the same metric, is a regression. One unlucky trial on a noisy machine is how
alert storms start; the fresh trials are how they stop.

Controls, as Pinpoint runs them. Where the run can put the baseline's build back (the source
tree moved: ``confirm_build``), every trial of a variant runs beside one of the baseline's build,
alternated (current, baseline, current, baseline), each pair on one pool (``Beside``: with
several pools, several pairs at once, and a trial is paired with the control that ran on its
pool, orchestrator/core/pairs.py), and performance is compared with those fresh controls only,
measured in the same hours on the same machine: a machine runs faster or slower
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

from experiments.strategy_config import NamedVariant, SweepConfig
from orchestrator.core.evidence import TrialEvidence, variant_key
from orchestrator.core.pairs import fresh_pairs, partner_of
from orchestrator.core.stats.clustered import INDEPENDENT, RESTART_PRIOR, Dispersion, dispersion
from orchestrator.core.stats.compare import StopWhenFailing
from orchestrator.core.stats.regression import Comparison, Difference
from orchestrator.core.strategies.base import (
    UNFINISHED,
    Conclusion,
    Levels,
    Status,
    Unresolvable,
    not_yet_running,
)
from orchestrator.core.strategies.sweep_compare import (
    Sample,
    Sides,
    answers_of,
    budget_of,
    compare,
    compare_looks,
    confirm_looks,
    of_baseline,
    of_trial,
    trial_counts,
)
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
        return {metric: dispersion(trial_counts(samples, metric)
                                   for samples in groups.values()).at_least(RESTART_PRIOR)
                for metric in BINARY}

    def judge(self, variant: NamedVariant, done: Sequence[TrialEvidence],
              spread: Mapping[str, Dispersion] | None = None) -> Judged:
        plan, controlled = self.plan, self.plan.confirm_build
        spread = self.spread(done) if spread is None else spread
        key, base_key = variant_key(self.levels(variant)), variant_key(
            self.levels(variant, "baseline"))
        reference = self.baseline.get(variant.name, [])
        paired = controlled and bool(reference)  # each trial beside a control
        sides = Sides.of([t for t in done if variant_key(t.levels) == key],
                         [t for t in done if variant_key(t.levels) == base_key]
                         if paired else [], reference, paired)
        mine = sides.mine
        usable = sides.pairs if paired else len(mine)  # whole pairs
        if usable < plan.min_trials:
            return Judged(variant, "measuring", len(mine), (), needed=tuple(self._pairs(
                variant, plan.min_trials, sides, paired)))
        if not reference:
            return Judged(variant, "new", len(mine), ())
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
            if answers_of(deciding) <= {Difference.SAME}:
                return Judged(variant, "uncontrolled" if drifted else "clean", seen, found,
                              controls=seen if controlled else 0, uncontrolled=drifted)
            if seen >= budget_of(plan, deciding):
                return Judged(variant, "inconclusive", seen, found,
                              controls=seen if controlled else 0)
        return Judged(variant, "measuring", len(mine), found,
                      needed=tuple(self._pairs(variant, usable + 1, sides, paired)),
                      controls=usable if controlled else 0)

    def _pairs(self, variant: NamedVariant, wanted: int, sides: Sides, paired: bool
               ) -> list[dict[str, str]]:
        """The trials that make ``wanted`` trials of the variant, each beside a control on one
        pool where ``paired``: first the partner of each trial waiting for one, on its pool."""
        mine, control = self.levels(variant), self.levels(variant, "baseline")
        if not paired:
            return [mine] * max(0, wanted - len(sides.mine))
        partners = [partner_of(t, mine, control) for t in sides.lone]
        fresh = max(0, wanted - sides.pairs - len(sides.lone))
        return [*partners, *_interleaved([mine] * fresh, [control] * fresh,
                                         sides.pairs + len(sides.lone))]

    def _confirm(self, variant: NamedVariant, seen: int, found: tuple[Comparison, ...],
                 suspected: tuple[str, ...], sides: Sides,
                 spread: Mapping[str, Dispersion]) -> Judged:
        """The suspect again, on fresh trials only; against fresh trials of the baseline's
        build run beside them where the run can put it back, else against the baseline run's
        trials."""
        plan, controlled = self.plan, bool(sides.controls)
        fresh = sides.mine[seen:]
        fresh_controls = sides.controls[seen:]
        pairs = sides.pairs - seen if controlled else len(fresh)
        at = [n for n in confirm_looks(plan) if n <= pairs]  # the looks taken so far
        partial: tuple[Comparison, ...] = ()
        if at:
            pairs = at[-1]  # judged at its last look: the same answer until the next
            against = fresh_controls[:pairs] if controlled else sides.reference
            judged = tuple(c for metric in suspected
                           if (c := compare(metric, fresh[:pairs], against, plan, True,
                                            spread.get(metric, INDEPENDENT),
                                            controlled and metric in CONTINUOUS)) is not None)
            answers = answers_of(judged)
            state = ("regression" if Difference.DIFFERENT in answers else
                     "unconfirmed" if answers <= {Difference.SAME} else
                     "inconclusive" if pairs >= budget_of(plan, judged) else "confirming")
            if state != "confirming":
                return Judged(variant, state, seen, found, suspected, judged, pairs,
                              controls=seen if controlled else 0)
            partial = judged
        wanted = min(n for n in confirm_looks(plan) if n > pairs) if at else plan.confirm_trials
        return Judged(variant, "confirming", seen, found, suspected, partial, pairs,
                      needed=tuple(self._pairs(variant, seen + wanted, sides, controlled)),
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
            unsure = ", ".join(_unsure(j, states) for j in judged if j.variant.name in bad)
            status, reason = Status.INCONCLUSIVE, (
                f"inconclusive: {unsure} undecided within the budget of "
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


def _interleaved(current: list[dict[str, str]], baseline: list[dict[str, str]], ran: int
                 ) -> list[dict[str, str]]:
    """Current and baseline builds alternating, so a pair runs side by side in time on one pool
    (``Beside``), and each pair in the order the reverse of the last (current first in the
    run's first, third... pair; ``ran`` pairs ran before): a machine that speeds up or slows
    down over the hours would otherwise favour the side that always runs second
    (bench/sweeps.py: a false throughput alert, -7% over 12 pairs, every baseline trial run
    after its pair's)."""
    firsts = [pair[(ran + index) % 2] for index, pair in enumerate(zip(current, baseline,
                                                                        strict=True))]
    seconds = [pair[1 - (ran + index) % 2] for index, pair in enumerate(zip(current, baseline,
                                                                             strict=True))]
    return fresh_pairs(firsts, seconds)


def _unsure(judged: Judged, states: Mapping[str, str]) -> str:
    """A variant left undecided, with the metrics it left so (where its trials ran)."""
    metrics = [c.metric for c in judged.comparisons if c.answer == Difference.UNKNOWN]
    name = judged.variant.name
    return f"{name} ({', '.join(metrics)})" if metrics and states[name] == "inconclusive" \
        else name
