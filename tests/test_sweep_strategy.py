"""The sweep strategy as a pure replay: what it asks for, when a difference is a suspect, and
when the fresh trials confirm it (no servers: trials are plain values)."""

from __future__ import annotations

import json

import pytest

from experiments.strategy_config import BaselineTrial, NamedVariant, SweepConfig, Thresholds
from orchestrator.cli.sweep_view import print_outcome
from orchestrator.cli.verdict_view import trail_line
from orchestrator.core.evidence import Latency, Performance, TrialEvidence
from orchestrator.core.strategies.base import Status
from orchestrator.core.strategies.sweep import SweepStrategy
from orchestrator.reports.sweep_build import _said, comparison
from orchestrator.reports.sweep_model import MetricRow

PRODUCTION = NamedVariant(name="production", levels={"hicache": "off"})
WATCH_COUNTS = Thresholds(corruption=0.05, wedging=0.05, throughput=None, p99_latency=None)


def trial(levels: dict[str, str], leaks: int, sessions: int = 80,
          throughput: float | None = None, p99_ms: float = 300) -> TrialEvidence:
    performance = None if throughput is None else Performance(
        wall_s=10, requests=sessions, completed=sessions, output_tokens=1000, good_sessions=0,
        request_throughput=1.0, output_throughput=throughput, goodput=0.0,
        e2e=Latency(100, 200, p99_ms))
    return TrialEvidence(dict(levels), {"ok": sessions - leaks, "leak": leaks},
                         performance=performance)


def plan(baseline: list[BaselineTrial], **changes: object) -> SweepConfig:
    settings: dict[str, object] = {"thresholds": WATCH_COUNTS, **changes}
    return SweepConfig(variants=[PRODUCTION], production="production", baseline=baseline,
                       **settings)  # type: ignore[arg-type]


def clean_baseline(trials: int = 3) -> list[BaselineTrial]:
    return [BaselineTrial(variant="production", counts={"ok": 80}) for _ in range(trials)]


def test_a_first_run_measures_and_names_no_baseline() -> None:
    strategy = SweepStrategy(plan([]))
    assert strategy.propose([], []) == [{"hicache": "off"}] * 3
    done = [trial({"hicache": "off"}, 0) for _ in range(3)]
    assert strategy.propose(done, []) == []
    conclusion = strategy.conclude(done, [])
    assert conclusion.status is Status.NO_CULPRIT and "no baseline yet" in conclusion.reason


def test_a_clean_variant_is_the_same_and_a_running_trial_is_not_asked_twice() -> None:
    strategy = SweepStrategy(plan(clean_baseline()))
    assert strategy.propose([], [{"hicache": "off"}]) == [{"hicache": "off"}] * 2
    done = [trial({"hicache": "off"}, 0) for _ in range(3)]
    assert strategy.propose(done, []) == []
    conclusion = strategy.conclude(done, [])
    assert conclusion.status is Status.NO_CULPRIT, conclusion.reason
    assert conclusion.sweep is not None
    assert conclusion.sweep["variants"][0]["state"] == "clean"


def test_a_difference_is_confirmed_on_fresh_trials_before_it_is_a_regression() -> None:
    strategy = SweepStrategy(plan(clean_baseline()))
    bad = [trial({"hicache": "off"}, 12) for _ in range(3)]
    judged = strategy.judged(bad)[0]
    assert judged.state == "confirming" and judged.suspected == ("corruption",)
    assert strategy.propose(bad, []) == [{"hicache": "off"}] * 2  # the fresh trials
    assert strategy.conclude(bad, []).status is Status.INCONCLUSIVE  # not an alert yet
    confirmed = bad + [trial({"hicache": "off"}, 12) for _ in range(2)]
    conclusion = strategy.conclude(confirmed, [])
    assert conclusion.status is Status.CULPRIT
    assert "production: corruption 0.0% -> 15.0% (+15.0 points)" in conclusion.reason
    assert [row["phase"] for row in conclusion.log] == ["compare", "compare", "confirm"]
    json.dumps(conclusion.sweep, allow_nan=False)  # strict JSON: no infinite interval


def test_a_difference_the_fresh_trials_do_not_show_is_no_alert() -> None:
    strategy = SweepStrategy(plan(clean_baseline()))
    done = [trial({"hicache": "off"}, 12) for _ in range(3)]
    done += [trial({"hicache": "off"}, 0) for _ in range(4)]
    conclusion = strategy.conclude(done, [])
    assert conclusion.status is Status.NO_CULPRIT, conclusion.reason
    assert "did not show again" in conclusion.reason
    assert conclusion.sweep is not None
    assert conclusion.sweep["variants"][0]["state"] == "unconfirmed"


def test_with_the_baseline_build_the_confirmation_runs_both_builds_side_by_side() -> None:
    strategy = SweepStrategy(plan(clean_baseline(), confirm_build=True))
    now = {"hicache": "off", "build": "current"}
    then = {"hicache": "off", "build": "baseline"}
    bad = [trial(now, 12) for _ in range(3)]
    assert strategy.propose(bad, []) == [now, then, now, then]
    # the baseline's build put back is clean again: the new build is the regression
    done = [*bad, trial(now, 12), trial(then, 0), trial(now, 13), trial(then, 0)]
    conclusion = strategy.conclude(done, [])
    assert conclusion.status is Status.CULPRIT
    # it fails the same way on the baseline's build: not the build, not a regression of it
    same = [*bad, trial(now, 12), trial(then, 12), trial(now, 13), trial(then, 11)]
    assert strategy.conclude(same, []).status is not Status.CULPRIT


def test_throughput_is_compared_per_trial() -> None:
    watched = Thresholds(corruption=None, wedging=None, throughput=0.15, p99_latency=None)
    baseline = [BaselineTrial(variant="production", counts={"ok": 80}, output_throughput=v)
                for v in (1000, 1020, 990)]
    strategy = SweepStrategy(plan(baseline, thresholds=watched))
    slow = [trial({"hicache": "off"}, 0, throughput=v) for v in (600, 610, 590, 605, 598)]
    judged = strategy.judged(slow)[0]
    assert judged.state == "regression" and judged.regressed == ("throughput",)


def test_a_throughput_drop_reads_as_a_drop_in_every_reason_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    # issue 27, item 5: throughput fell 40% (and p99 latency rose 50%); `change` is signed
    # worse-positive for the tests, but every line a person reads says the drop is a drop
    watched = Thresholds(corruption=None, wedging=None, throughput=0.15, p99_latency=0.2)
    baseline = [BaselineTrial(variant="production", counts={"ok": 80}, output_throughput=v,
                              p99_e2e_ms=300) for v in (1000, 1000, 1000)]
    strategy = SweepStrategy(plan(baseline, thresholds=watched))
    slow = [trial({"hicache": "off"}, 0, throughput=600, p99_ms=450) for _ in range(5)]
    conclusion = strategy.conclude(slow, [])
    assert conclusion.status is Status.CULPRIT
    assert conclusion.reason == "regression: production: throughput -40%, p99_latency +50%"
    # the trail (`bisect log`): as it moved, its alert as far the bad way
    rows = [r for r in conclusion.log if r["metric"] == "throughput"]
    assert rows and all(r["change"] == pytest.approx(0.4) for r in rows)  # the JSON: as before
    line = trail_line(1, rows[-1])
    assert "-40.0% (alert at -15%)" in line and "+40" not in line
    latency = trail_line(2, next(r for r in conclusion.log if r["metric"] == "p99_latency"))
    assert "+50.0% (alert at +20%)" in latency
    # `bisect sweep`'s printed outcome and the report's answer sentence
    assert conclusion.sweep is not None
    [variant] = conclusion.sweep["variants"]
    print_outcome({"sweep": "nightly", "run": 2, "status": "regression",
                   "reason": conclusion.reason,
                   "variants": [variant]})
    printed = capsys.readouterr().out
    assert "throughput: different -40.0%" in printed and "+40" not in printed
    row = MetricRow(metric="throughput", binary=False, watched=True, now=600.0,
                    detection=comparison(variant["comparisons"][0]),
                    confirmation=comparison(variant["confirmation"][0]), suspected=True,
                    regressed=True)
    assert _said(row) == "throughput -40%"
