"""How a sweep compares one variant's trials with the baseline: each trial as a ``Sample``, one
metric at a time (``compare``), on the sides one judgement reads (``Sides``), at the looks that
may settle it (``compare_looks``, ``confirm_looks``) and within its budget (``budget_of``). The
sweep strategy (sweep.py) decides what to run and says where each variant stands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from experiments.strategy_config import BaselineTrial, SweepConfig
from orchestrator.core.evidence import CORRUPTING, WEDGING, TrialEvidence
from orchestrator.core.pairs import pairs_on_pools
from orchestrator.core.stats.clustered import INDEPENDENT, Counts, Dispersion
from orchestrator.core.stats.regression import (
    Comparison,
    Difference,
    compare_counts,
    compare_values,
)
from orchestrator.core.strategies.looks import budget, looks, spent
from orchestrator.core.strategies.sweep_judged import BINARY, CONTINUOUS

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


def trial_counts(samples: Sequence[Sample], metric: str) -> list[Counts]:
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
    is worse (SAME untested); at those looks SAME is tested at an equal share of alpha each."""
    threshold = getattr(plan.thresholds, metric)
    if threshold is None:
        return None
    detect = DETECT * threshold
    least = detect if confirming else threshold  # the worsening SAME rules out
    alpha_worse = spent(plan.alpha, confirm_looks(plan)) if confirming else None
    alpha_same = spent(plan.alpha, compare_looks(plan)) if same and not confirming else None
    if metric in BINARY:
        trials = trial_counts(current, metric)
        now, then = _summed(trials), _summed(trial_counts(reference, metric))
        tested = (spread.effective(now, len(current)), spread.effective(then, len(reference)))
        ruled_out = (then[0] / then[1] if then[1] else 0.0) + least
        return compare_counts(metric, now, then, min_effect=least, alpha=plan.alpha,
                              detect=detect,
                              effective=None if tested == (now, then) else tested,
                              p_same_trials=_tail(spread, now[0],
                                                  tuple(n for _, n in trials), ruled_out)
                              if same else None,
                              alpha_worse=alpha_worse, alpha_same=alpha_same, same=same)
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
                          paired=paired, detect=detect, alpha_worse=alpha_worse,
                          alpha_same=alpha_same, same=same)


def answers_of(comparisons: Sequence[Comparison]) -> set[Difference]:
    return {c.answer for c in comparisons}


@dataclass(frozen=True)
class Sides:
    """A variant's trials as one judgement reads them: ``mine[i]`` and ``controls[i]`` the
    i-th pair (a trial and its control, on one pool), in the order the pairs ended, then the
    trials still waiting for their partner (``lone``)."""

    mine: list[Sample]  # the current build's
    controls: list[Sample]  # the baseline's build's, fresh (empty where it cannot run)
    reference: list[Sample]  # the baseline run's stored trials
    pairs: int = 0  # whole pairs run
    lone: tuple[TrialEvidence, ...] = ()  # trials of either build whose partner has not run

    @classmethod
    def of(cls, mine: Sequence[TrialEvidence], controls: Sequence[TrialEvidence],
           reference: list[Sample], paired: bool) -> Sides:
        """Where ``paired``, a trial and its control pair only where they ran on one pool
        (pairs_on_pools): pools that differ in speed by a few percent would otherwise put that
        difference between the sides."""
        if not paired:
            return cls([of_trial(t) for t in mine], [], reference)
        pairs, lone = pairs_on_pools(mine, controls)
        waiting = {id(t) for t in lone}
        return cls([of_trial(a) for a, _ in pairs] + [of_trial(t) for t in mine
                                                        if id(t) in waiting],
                   [of_trial(b) for _, b in pairs] + [of_trial(t) for t in controls
                                                        if id(t) in waiting],
                   reference, len(pairs), tuple(lone))

    def detection(self, seen: int, metric: str) -> tuple[list[Sample], list[Sample]]:
        """What the first ``seen`` trials are compared with: performance with the controls
        beside them only (another day's trials mix the machine's drift in), session counts
        with the stored trials and the controls together."""
        if not self.controls:
            return self.mine[:seen], self.reference
        if metric in CONTINUOUS:
            return self.mine[:seen], self.controls[:seen]
        return self.mine[:seen], [*self.reference, *self.controls[:seen]]


def budget_of(plan: SweepConfig, comparisons: Sequence[Comparison]) -> int:
    """A variant's trials before it is left undecided: ``max_trials``, or twice it
    (looks.budget) while an undecided metric leans either way (a p short of its level,
    but within ``LEANS_AT``): a regression that restarts spread shows itself a few trials
    later, and a clean variant whose trials spread wide rules the threshold out a few trials
    later (bench/sweeps.py: at a 10% throughput threshold, 26% of clean runs were left
    undecided at 12 pairs, most with p_same within 0.1)."""
    return budget(plan.max_trials, *((p, level) for c in comparisons
                                     if c.answer == Difference.UNKNOWN
                                     for p, level in ((c.p_worse, c.level_worse),
                                                      (c.p_same, c.level_same))))


def compare_looks(plan: SweepConfig) -> tuple[int, ...]:
    """The trials a variant's comparison may settle at, SAME or undecided (3, 6, 12 and 24 at
    a sweep file's default budget): fewer chances for a regression of exactly the threshold to
    pass for SAME than a judgement after every trial, and the exact test of SAME is skipped
    between them. Each look tests SAME at an equal share of alpha (``spent``): at alpha each,
    a 10% drop at a 10% threshold passed for SAME in 9 of 200 runs (bench/sweeps.py)."""
    return looks(plan.min_trials, plan.max_trials)


def confirm_looks(plan: SweepConfig) -> tuple[int, ...]:
    """The fresh trials a suspect's confirmation judges at (3, 6, 12 and 24 at a sweep file's
    default budget), each at an equal share of ``alpha``: an alert is the confirmation's
    DIFFERENT, and judged after every fresh trial, a clean variant's noise had ten chances or
    more to cross alpha (bench/sweeps.py: 2 of 200 clean runs alerted)."""
    return looks(plan.confirm_trials, plan.max_trials)
