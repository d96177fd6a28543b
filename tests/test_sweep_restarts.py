"""The sweep's rules for trials that differ by restart (issue 27): a SAME that allows for a
failing variant's low restarts, the spread a clean baseline cannot show, a budget that runs on
while a metric leans either way, SAME at a few looks only, and a performance suspect at DETECT
of its threshold. Pure replays:
trials are plain values."""

from __future__ import annotations

import pytest

from experiments.strategy_config import BaselineTrial, Thresholds
from orchestrator.core.stats.clustered import INDEPENDENT, RESTART_PRIOR, Dispersion
from orchestrator.core.stats.regression import Difference
from orchestrator.core.strategies.sweep import SweepStrategy
from orchestrator.core.strategies.sweep_compare import (
    DETECT,
    compare,
    compare_looks,
    confirm_looks,
    of_baseline,
    of_trial,
)
from tests.support.sweep_trials import NOW, THEN, plan, trial

pytestmark = pytest.mark.pure

ONE_IN_80 = BaselineTrial(variant="production", counts={"ok": 79, "leak": 1})
PRODUCTION = {"hicache": "off"}
THROUGHPUT_ONLY = Thresholds(corruption=None, wedging=None, throughput=0.15, p99_latency=None)


def test_a_failing_variant_whose_restarts_landed_low_is_not_the_same() -> None:
    # four trials of one leak each, against a baseline at 1.25%: as sessions at the design
    # effect of their own low rate, Chan's test rules out a 5-point rise (p 0.002); but a
    # variant truly at 6.25% whose restarts spread as these do (a multiplier of variance
    # 0.62: a restart halves or doubles the rate) shows four such trials with p 0.012, more
    # than alpha: not yet the same
    reference = [of_baseline(ONE_IN_80)] * 12
    current = [of_baseline(ONE_IN_80)] * 4
    settings = plan([], thresholds=Thresholds(wedging=None, throughput=None,
                                              p99_latency=None))
    spread = Dispersion(0.62, 40)
    found = compare("corruption", current, reference, settings, spread=spread)
    assert found is not None and found.answer is Difference.UNKNOWN
    assert found.p_same_trials == pytest.approx(0.012, abs=0.001)
    assert found.p_same == found.p_same_trials  # the larger of the two tests
    # the same trials where restarts do not spread at all: the same
    alone = compare("corruption", current, reference, settings, spread=INDEPENDENT)
    assert alone is not None and alone.answer is Difference.SAME


def test_the_spread_allows_for_restarts_a_clean_baseline_cannot_show() -> None:
    strategy = SweepStrategy(plan([BaselineTrial(variant="production", counts={"ok": 80})] * 6))
    clean = [trial(PRODUCTION, 0) for _ in range(3)]
    # no trial failed: the trials show no spread, and the restart prior stands in for it
    assert strategy.spread(clean)["corruption"] == Dispersion(RESTART_PRIOR.tau2, 0)
    # at a 1% rate, trials that show little spread do not lower it: the prior is its floor
    low = strategy.spread([trial(PRODUCTION, k) for k in (1, 0, 1, 1, 0, 1)])["corruption"]
    assert low.df > 0 and low.tau2 == RESTART_PRIOR.tau2
    # a wider spread the trials show is kept
    spread = [trial(PRODUCTION, k) for k in (0, 12, 0, 12, 0, 12)]
    assert strategy.spread(spread)["corruption"].tau2 > 1.0


@pytest.mark.parametrize(("leaks", "state", "p_worse", "p_same"), [
    ((0, 14, 0, 0, 10, 0), "measuring", 0.056, 0.399),  # leans worse: runs on past max_trials
    ((0, 9, 0, 0, 5, 0), "measuring", 0.139, 0.069),  # leans SAME: runs on too
    ((0, 11, 0, 0, 4, 0), "inconclusive", 0.152, 0.132),  # neither within LEANS_AT: stops
])
def test_a_variant_leaning_either_way_runs_past_the_budget(
        leaks: tuple[int, ...], state: str, p_worse: float, p_same: float) -> None:
    strategy = SweepStrategy(plan([ONE_IN_80] * 12))  # max_trials 6
    done = [trial(PRODUCTION, k) for k in leaks]
    judged = strategy.judged(done)[0]
    [corruption] = [c for c in judged.comparisons if c.metric == "corruption"]
    assert corruption.answer is Difference.UNKNOWN
    assert corruption.p_worse == pytest.approx(p_worse, abs=0.001)
    assert corruption.p_same == pytest.approx(p_same, abs=0.001)
    assert judged.state == state
    assert strategy.propose(done, []) == ([PRODUCTION] if state == "measuring" else [])


def test_a_performance_drop_is_a_suspect_at_detect_of_its_threshold() -> None:
    # a steady 8% throughput drop beside its controls, under the 15% threshold: a suspect
    # (DETECT of the threshold, 6%, as session counts have it), confirmed on fresh pairs that
    # rule out nothing less than 6%; the threshold is the drop a sweep must catch, and a true
    # drop of exactly it is seen below it half the time
    assert pytest.approx(0.06) == DETECT * 0.15
    baseline = [BaselineTrial(variant="production", counts={"ok": 80},
                              output_throughput=1000)] * 3
    watched = Thresholds(corruption=None, wedging=None, throughput=0.15, p99_latency=None)
    strategy = SweepStrategy(plan(baseline, thresholds=watched, confirm_build=True))
    now = [920, 925, 918, 921, 919, 922, 920]
    then = [1000, 1004, 998, 1001, 999, 1002, 1000]
    done = [t for a, b in zip(now, then, strict=True)
            for t in (trial(NOW, 0, throughput=a), trial(THEN, 0, throughput=b))]
    judged = strategy.judged(done)[0]
    assert judged.suspected == ("throughput",)
    assert judged.state == "regression", judged
    assert judged.confirmation[0].min_effect == pytest.approx(0.06)


def test_a_confirmation_judges_at_its_looks_each_at_a_share_of_alpha() -> None:
    # a sweep file's default budget: fresh trials judged at 3, 6, 12 and (leaning) 24, each
    # at a quarter of alpha, so that all four looks together err at most alpha
    settings = plan([], min_trials=3, max_trials=12, confirm_trials=3)
    assert confirm_looks(settings) == (3, 6, 12, 24)
    baseline = [BaselineTrial(variant="production", counts={"ok": 80})] * 3
    strategy = SweepStrategy(plan(baseline, thresholds=THROUGHPUT_ONLY, confirm_build=True,
                                  min_trials=3, max_trials=12, confirm_trials=3))
    now, then = [900.0] * 3, [1000.0] * 3
    # four fresh pairs: judged at their third, as three were; the fourth waits for the sixth
    fresh_now, fresh_then = [905.0, 899.0, 902.0, 898.0], [1000.0, 998.0, 1003.0, 999.0]
    done = [t for a, b in zip(now + fresh_now, then + fresh_then, strict=True)
            for t in (trial(NOW, 0, throughput=a), trial(THEN, 0, throughput=b))]
    judged = strategy.judged(done)[0]
    assert judged.suspected == ("throughput",)
    assert judged.confirm_trials == 3 and judged.state == "confirming"
    [confirming] = judged.confirmation
    # p 0.003: an alert at alpha itself, short of the look's share of it
    assert confirming.alpha_worse == pytest.approx(0.0025)
    assert confirming.alpha_worse is not None
    assert confirming.alpha_worse < confirming.p_worse <= confirming.alpha
    assert confirming.answer is Difference.UNKNOWN
    # to the look at 6: pairs 8 and 9 of the run, each the reverse of the last
    assert strategy.propose(done, []) == [THEN, NOW, NOW, THEN]


def test_same_settles_a_variant_at_the_looks_only() -> None:
    # Four trials that rule out the 5-point rise (SAME) do not settle the variant: SAME is
    # judged at 3, 6 and 12 trials only (`compare_looks`), or a rise of exactly the threshold
    # would pass for SAME at one of ten looks. Between the looks only a suspect is sought.
    strategy = SweepStrategy(plan([ONE_IN_80] * 12))  # min 3, max 6: looks at 3, 6, 12
    assert compare_looks(strategy.plan) == (3, 6, 12)
    done = [trial(PRODUCTION, k) for k in (0, 1, 3, 0)]
    spread = strategy.spread(done)["corruption"]
    alone = compare("corruption", [of_trial(t) for t in done], [of_baseline(ONE_IN_80)] * 12,
                    strategy.plan, spread=spread)
    assert alone is not None and alone.answer is Difference.SAME
    judged = strategy.judged(done)[0]
    [corruption] = [c for c in judged.comparisons if c.metric == "corruption"]
    assert judged.state == "measuring" and strategy.propose(done, []) == [PRODUCTION]
    assert corruption.answer is Difference.UNKNOWN and corruption.p_same is None  # untested
    done += [trial(PRODUCTION, 0), trial(PRODUCTION, 0)]
    settled = strategy.judged(done)[0]
    assert settled.state == "clean"  # at the look of 6
    # each of the three looks tests SAME at a third of alpha: together they err at most alpha
    [corruption] = [c for c in settled.comparisons if c.metric == "corruption"]
    assert corruption.alpha_same == pytest.approx(strategy.plan.alpha / 3)
    assert corruption.alpha_same is not None and corruption.p_same is not None
    assert corruption.p_same <= corruption.alpha_same
