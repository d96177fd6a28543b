"""The sweep benchmark (bench/sweeps.py): its draws, its replays, its naive sweep and figures,
on a handful of runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ttest_ind, ttest_rel

import orchestrator.core.strategies.sweep_compare as sweep
from bench.noise import REAL_WORLD
from bench.sweep_fast import fast_comparisons
from bench.sweep_naive import naive, welch_p
from bench.sweep_runs import run_case
from bench.sweep_world import SCENARIOS, SESSIONS, VARIANTS, Machine, Rates, baseline_run, replay
from bench.sweeps import clopper_pearson, main, plan_of, share, targets
from experiments.strategy_config import BaselineTrial
from orchestrator.core.evidence import Latency, Performance, TrialEvidence
from orchestrator.core.stats.regression import Difference
from orchestrator.core.strategies.sweep import SweepStrategy

pytestmark = pytest.mark.pure

CLEAN, CORRUPTION, THROUGHPUT, THROUGHPUT_10 = SCENARIOS


def test_only_the_current_build_of_the_risky_variant_regresses() -> None:
    machine = Machine(np.random.default_rng(0), Rates(), CORRUPTION)
    assert machine.rates({"config": "risky-1"}).corruption == 0.06
    assert machine.rates({"config": "risky-1", "build": "current"}).corruption == 0.06
    assert machine.rates({"config": "risky-1", "build": "baseline"}) == Rates()
    assert machine.rates({"config": "production"}) == Rates()
    machine.current = False  # the baseline run
    assert machine.rates({"config": "risky-1"}) == Rates()
    assert Machine(np.random.default_rng(0), Rates(), THROUGHPUT).rates(
        {"config": "risky-1"}).throughput == pytest.approx(0.7 * Rates().throughput)


def test_the_baseline_run_is_an_accepted_first_run_of_the_sweep() -> None:
    plan = plan_of()
    machine = Machine(np.random.default_rng(1), Rates(), CORRUPTION)
    trials = baseline_run(plan, machine)  # `--accept`: every variant trials.max times
    assert [t.variant for t in trials].count("risky-1") == plan.max_trials
    assert len(trials) == plan.max_trials * len(VARIANTS)
    assert all(sum(t.counts.values()) == SESSIONS and t.output_throughput and t.p99_e2e_ms
               for t in trials)
    assert machine.current  # back to the current build's rates
    assert len(baseline_run(plan, machine, trials=5)) == 5 * len(VARIANTS)


def _trial(name: str, leaks: int, throughput: float) -> TrialEvidence:
    performance = Performance(485, 80, 80, 1, 80 - leaks, 0.1, throughput, 0.1,
                              e2e=Latency(1, 2, 1000.0))
    return TrialEvidence({"config": name}, {"ok": 80 - leaks, "leak": leaks},
                         performance=performance)


def test_the_naive_sweep_alerts_on_any_one_sided_p_at_005() -> None:
    base = [BaselineTrial(variant=v.name, counts={"ok": 80}, output_throughput=t,
                          p99_e2e_ms=1000.0) for v in VARIANTS for t in (2000.0, 2010.0)]
    done = [_trial("production", 0, 2005.0), _trial("production", 0, 1995.0),
            _trial("risky-1", 4, 2000.0), _trial("risky-1", 4, 2010.0),  # 8/160 against 0/160
            _trial("risky-2", 0, 1800.0), _trial("risky-2", 0, 1810.0),  # 10% slower
            _trial("risky-1", 0, 2000.0)]  # a third trial: the naive sweep runs 2
    assert naive(plan_of(), done, base) == (("risky-1", "corruption"),
                                            ("risky-2", "throughput"))


def test_the_naive_welch_and_the_sweeps_student_p_values_are_scipys() -> None:
    rng = np.random.default_rng(3)
    for _ in range(5):
        now, then = rng.normal(100, 5, 4).tolist(), rng.normal(103, 5, 3).tolist()
        assert welch_p(now, then, True) == pytest.approx(
            ttest_ind(now, then, equal_var=False, alternative="less").pvalue)
        assert welch_p(now, then, False) == pytest.approx(
            ttest_ind(now, then, equal_var=False, alternative="greater").pvalue)
        found = sweep.compare_values("throughput", now, then, min_relative=0.15, alpha=0.01,
                                     worse="lower")
        assert found.p_worse == pytest.approx(ttest_ind(
            np.log(now), np.log(then), equal_var=True, alternative="less").pvalue)


def test_the_paired_comparison_is_scipys_paired_t_on_log_ratios() -> None:
    rng = np.random.default_rng(4)
    for _ in range(5):
        now, then = rng.normal(100, 5, 4).tolist(), rng.normal(103, 5, 4).tolist()
        found = sweep.compare_values("throughput", now, then, min_relative=0.15, alpha=0.01,
                                     worse="lower", paired=True)
        assert found.p_worse == pytest.approx(ttest_rel(
            np.log(now), np.log(then), alternative="less").pvalue)
    # a drift the pairs share leaves the comparison: each pair 1% apart, the day's level
    # wandering 30% across the run, is a certain 1% drop (far under the threshold: SAME)
    level = [1000.0, 1300.0, 800.0, 1100.0, 900.0]
    paired = sweep.compare_values("throughput", [v * 0.99 for v in level], level,
                                  min_relative=0.15, alpha=0.01, worse="lower", paired=True)
    unpaired = sweep.compare_values("throughput", [v * 0.99 for v in level], level,
                                    min_relative=0.15, alpha=0.01, worse="lower")
    assert paired.answer == Difference.SAME and unpaired.answer == Difference.UNKNOWN


def test_a_suspect_is_let_go_only_when_its_fresh_trials_rule_out_the_detected_rise() -> None:
    plan = plan_of()
    # 12/240 against 2/240: 4.2 points, below the 5-point threshold, yet a suspect (DETECT)
    assert sweep.compare("corruption", [sweep.Sample({"ok": 228, "leak": 12}, None, None)],
                         [sweep.Sample({"ok": 238, "leak": 2}, None, None)],
                         plan).answer == Difference.DIFFERENT  # type: ignore[union-attr]
    # 3/240 against 3/240 rules out 5 points (SAME) but not the 2 points a confirmation needs
    same = [sweep.Sample({"ok": 237, "leak": 3}, None, None)]
    assert sweep.compare("corruption", same, same, plan).answer == Difference.SAME  # type: ignore[union-attr]
    assert sweep.compare("corruption", same, same, plan,
                         True).answer == Difference.UNKNOWN  # type: ignore[union-attr]


def test_drift_shifts_each_run_as_a_whole() -> None:
    still = Machine(np.random.default_rng(2), Rates(), CLEAN)
    assert still.shifts == {False: (1.0, 1.0), True: (1.0, 1.0)}
    drifting = Machine(np.random.default_rng(2), Rates(drift=0.05), CLEAN)
    assert drifting.shifts[False] != drifting.shifts[True]


def test_clopper_pearson_at_its_edges() -> None:
    low, high = clopper_pearson(0, 4000)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 4000))
    low, high = clopper_pearson(4000, 4000)
    assert high == 1.0 and low == pytest.approx(0.025 ** (1 / 4000))
    low, high = clopper_pearson(10, 100)
    assert 0.04 < low < 0.1 < high < 0.18


def test_targets_are_met_only_by_the_whole_interval() -> None:
    def row(scenario: str, alerts: int, found: int, n: int) -> dict[str, object]:
        return {"sweep": "sweep strategy", "scenario": scenario, "moved": False, "runs": n,
                "alert": share(alerts, n), "detected": share(found, n)}

    said = targets([row("clean", 0, 0, 4000), row("clean", 1, 0, 300), row("clean", 9, 0, 900),
                    row("x", 0, 990, 1000), row("x", 0, 96, 100), row("x", 0, 90, 100),
                    {"sweep": "naive"}])
    assert [line.rsplit(": ", 1)[1] for line in said] == [
        "met", "estimated only", "missed", "met", "estimated only", "missed"]
    assert said[0] == ("clean, build not moved: false alerts 0/4000 (95% up to 0.09%; "
                       "target <= 0.5%): met")
    # where a day's drift shrank some planted rises below the threshold, the target is
    # judged on the runs whose rise reached it
    due = {**row("x", 0, 150, 200), "due": share(149, 150)}
    assert targets([due]) == ["x, build not moved: found 99.33% of the 150 runs whose rise "
                              "reached the threshold (95% from 96.34%; target >= 95%): met"]


def test_memoised_comparisons_change_no_answer() -> None:
    plan, seen = plan_of(), []
    for scenario, index in ((CLEAN, 0), (THROUGHPUT, 0)):
        for moved in (False, True):
            plain = run_case(plan, Rates(), scenario, 7, index, moved)
            with fast_comparisons():
                assert run_case(plan, Rates(), scenario, 7, index, moved) == plain
            seen.append(plain.suspected)
    # both paths: a -30% throughput is suspected at once where controls run beside it, and
    # is no suspect where none can (the build did not move: shown as uncontrolled)
    assert seen == [False, False, False, True]


def test_with_the_build_moved_each_trial_runs_beside_its_control_on_one_pool() -> None:
    plan = plan_of()
    machine = Machine(np.random.default_rng(5), Rates(), CLEAN)
    strategy = SweepStrategy(plan.model_copy(update={
        "baseline": baseline_run(plan, machine), "baseline_run": 1, "confirm_build": True}))
    done = replay(strategy, machine)
    pairs = list(zip(done[::2], done[1::2], strict=True))
    assert all(a.levels["config"] == b.levels["config"]
               and {a.levels["build"], b.levels["build"]} == {"current", "baseline"}
               for a, b in pairs)
    # each variant's pairs in the order the reverse of the last: current first, then second
    firsts: dict[str, list[str]] = {}
    for a, _ in pairs:
        firsts.setdefault(a.levels["config"], []).append(a.levels["build"])
    for order in firsts.values():
        assert order == ["current", "baseline"] * (len(order) // 2) + ["current"] * (
            len(order) % 2)


def test_the_command_writes_its_table_and_json(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweeps.json"
    # the fewest trials a plan takes: the table and the document, not the answers, are tested
    main(["--runs", "1", "--workers", "1", "--trial-noise", "iid", "--trials", "2,2,2",
          "--baseline-trials", "2", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "| sweep strategy, build not moved | clean | 1 |" in printed
    assert "| naive | throughput -30% | 1 |" in printed
    assert "clean, build moved: false alerts " in printed
    document = json.loads(out.read_text())
    assert len(document["rows"]) == 3 * len(SCENARIOS)
    assert len(document["runs"]) == 2 * len(SCENARIOS)  # each run in both cases
    for row in document["rows"]:
        assert row["runs"] == 1
        assert math.isclose(row["clean"]["rate"] + row["inconclusive"]["rate"]
                            + row["alert"]["rate"], 1.0)


def test_the_planted_rise_is_said_as_the_pool_stood() -> None:
    # i.i.d. trials: the planted 1% -> 6% exactly; with noise between trials, a day's drift
    # and the pool's offset scale the planted rate too, and the rise is what they left of it.
    # The fewest trials a plan takes: the rise is read off the planted variant's trials however
    # many the plan runs (the default plan's exact tests took 11 s of the pure tier here)
    plan = plan_of(min_trials=2, max_trials=2)
    iid = run_case(plan, Rates(), CORRUPTION, 3, 0, False)
    assert iid.rise == pytest.approx(0.05)
    noisy = [run_case(plan, Rates(noise=REAL_WORLD), CORRUPTION, 3, i, False).rise
             for i in range(3)]
    assert all(r is not None and 0.0 < r != pytest.approx(0.05) for r in noisy)
    assert run_case(plan, Rates(noise=REAL_WORLD), CLEAN, 3, 0, False).rise is None
