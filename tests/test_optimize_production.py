"""The `optimize` answer against production, pure: planted per-trial throughputs, no driver, no
Optuna. After confirmation, production and the answer run alternated in fresh pairs (the final
phase, orchestrator/core/strategies/optimize_final.py), and the answer is shown better only on
those pairs (issue 27, item 3)."""

from __future__ import annotations

import pytest

from bench.knob_space import PRODUCTION
from orchestrator.core.evidence import TrialEvidence, variant_key
from orchestrator.core.pairs import Beside
from orchestrator.core.strategies.optimize_rank import candidates
from orchestrator.core.strategies.optimize_versus import versus_production
from tests.support.optimize_planted import (
    ELSE,
    Recorder,
    concluded,
    planted,
    strategy,
    trial,
)

pytestmark = pytest.mark.pure

CLEAR = {"production": [2000, 2020, 1990], "else": [3000, 3030, 2985]}
CLEAR_PAIRS = [("production", 2010), ("else", 3010), ("else", 2995), ("production", 2005)]


def test_an_answer_clearly_faster_than_production_is_shown_better() -> None:
    conclusion, versus = concluded(CLEAR, CLEAR_PAIRS)
    assert conclusion.status.value == "optimum"
    said = conclusion.finding_json("optimize")
    assert said is not None and said["best"] == ELSE
    assert versus["shown_better"] and not versus["is_production"] and versus["why"] == ""
    assert versus["production"] == PRODUCTION and versus["trials"] == 5
    assert versus["paired"] and versus["pairs"] == 2 and versus["pairs_wanted"] == 2
    assert versus["pair_trials"] == [[7, 8], [10, 9]]  # (production's, the answer's)
    assert versus["metric"] == "output_throughput" and versus["p_value"] < 0.01
    assert versus["difference"] == pytest.approx(995.0)  # on the pairs only
    low, high = versus["ratio_ci"]
    assert 1 < low < versus["ratio"] < high and versus["ratio"] == pytest.approx(1.496, 1e-3)
    assert conclusion.reason.startswith("best safe configuration: ")
    assert "better than production" in conclusion.reason and "paired t p=" in conclusion.reason
    assert said["trials"]["final"] == 4


def test_an_answer_within_noise_of_production_is_no_better_than_production() -> None:
    """Issue 27: 2,810 tok/s named best while production (known-good there) was 2,778 from two
    trials: not shown faster, so not called best."""
    conclusion, versus = concluded({"production": [2400, 3156], "else": [2755, 2865]},
                                   [("production", 2800), ("else", 2790), ("else", 2850),
                                    ("production", 2760)])
    assert conclusion.status.value == "optimum"  # a safe configuration is still named
    said = conclusion.finding_json("optimize")
    assert said is not None and said["best"] == ELSE
    assert not versus["shown_better"] and not versus["is_production"]
    assert versus["difference"] == pytest.approx(40.0)
    assert 0.05 < versus["p_value"] < 0.6
    assert [d["trials"] for d in versus["objectives"]] == [[2, 2]]
    assert "paired t-test on the final phase's pairs" in versus["why"]
    assert conclusion.reason.startswith("no better than production (")
    assert "one-sided paired t p=" in conclusion.reason
    # the keys the answer had are all still there
    assert {"best", "ranked", "rejected", "unproven", "production"} <= set(said)


def test_an_answer_that_drift_favoured_is_no_better_on_the_pairs() -> None:
    """BENCHMARKS.md, issue 27: production measured in the run's first hours on a machine that
    ran slower then; the answer's trials hours later. On all trials a Welch test says better;
    the pairs, each measured in one hour, say no better."""
    early = {"production": [1750, 1800, 1780], "else": [2150, 2170, 2160]}
    pairs = [("production", 2160), ("else", 2150), ("else", 2140), ("production", 2155)]
    _, versus = concluded(early, pairs)
    assert not versus["shown_better"] and versus["paired"] and versus["pairs"] == 2
    assert versus["ratio"] == pytest.approx(0.995, abs=0.005)
    # what the comparison on every trial said before the final phase: "better"
    every = candidates(planted(early, pairs), strategy().plan)
    welch = versus_production(every[1], every[0], 0.05)
    assert welch.shown_better and welch.objectives[0].p_value is not None


def test_before_the_final_phase_the_answer_is_not_tested() -> None:
    conclusion, versus = concluded({"production": [1000], "else": [3000, 3010, 2990]})
    assert versus["paired"] and versus["pairs"] == 0 and versus["p_value"] is None
    assert not versus["shown_better"] and versus["pair_trials"] == []
    assert versus["why"].startswith("not tested: 0 of 2 pairs of the final phase")
    assert conclusion.reason.startswith("no better than production (")


def test_production_shown_unsafe_has_no_final_phase() -> None:
    # 10 leaks in each 100: shown above the 5% limit; compared on all trials (Welch), as before
    values = {"production": [1000, 1010, 990], "else": [3000, 3010, 2990]}
    conclusion, versus = concluded(values, [], corrupt={"production": 10})
    assert not versus["paired"] and versus["pairs"] is None and versus["shown_better"]
    assert "one-sided Welch p=" in conclusion.reason and "itself not proven safe" in (
        conclusion.reason)
    assert strategy(6, search=Recorder()).propose(
        planted(values, corrupt={"production": 10}), []) == []


def test_production_itself_the_best_is_said_so() -> None:
    conclusion, versus = concluded({"production": [3000, 3020], "else": [2000, 2010]}, [])
    assert conclusion.status.value == "optimum"
    said = conclusion.finding_json("optimize")
    assert said is not None and said["best"] == PRODUCTION
    assert versus["is_production"] and not versus["shown_better"]
    assert versus["p_value"] is None and versus["objectives"] == []
    assert conclusion.reason.startswith("production is the best safe configuration: ")


def test_welch_is_one_sided_in_the_objectives_direction() -> None:
    from orchestrator.core.strategies.optimize_rank import Estimate
    from orchestrator.core.strategies.optimize_versus import welch

    slow = Estimate("ttft_p99_ms", 200.0, None, None, (198.0, 200.0, 202.0))
    fast = Estimate("ttft_p99_ms", 100.0, None, None, (99.0, 100.0, 101.0))
    lower = welch(fast, slow, 0.05)  # a lower latency is better
    assert lower.shown_better and not lower.shown_worse and lower.difference == -100.0
    higher = welch(slow, fast, 0.05)
    assert higher.shown_worse and not higher.shown_better


def test_the_paired_test_is_one_sided_in_the_objectives_direction() -> None:
    from orchestrator.core.strategies.optimize_final import paired

    pairs = []
    for seq, (theirs, mine) in enumerate([(200.0, 100.0), (210.0, 101.0), (190.0, 99.0)]):
        pairs.append((_ttft(theirs, 2 * seq + 1), _ttft(mine, 2 * seq + 2)))
    lower = paired("ttft_p99_ms", pairs, 0.05)  # the answer's latency halved: better
    assert lower.shown_better and lower.pairs == 3 and lower.ratio == pytest.approx(0.5, 0.02)
    worse = paired("ttft_p99_ms", [(a, p) for p, a in pairs], 0.05)
    assert worse.shown_worse and not worse.shown_better


def _ttft(p99_ms: float, seq: int) -> TrialEvidence:
    import dataclasses

    from orchestrator.core.evidence import Latency

    base = trial("production", 1000, seq)
    assert base.performance is not None
    return dataclasses.replace(base, performance=dataclasses.replace(
        base.performance, ttft=Latency(p99_ms / 2, p99_ms / 1.5, p99_ms)))


def test_production_runs_again_beside_the_leader_then_in_pairs() -> None:
    # issue 27, item 3: production measured once, hours before the answer, can be neither
    # tested (one trial) nor trusted (the machine drifts): after the search it runs again,
    # beside the leader's re-runs, until it has as many trials as a confirmed answer; then the
    # final phase pairs it with the answer
    two = strategy(2, pools=2, search=Recorder())
    # the search's 2 trials spent, the leader short of its confirmation: both, as a pair on one
    # pool (each re-run of production beside the leader's, never on a pool of its own), the
    # side with fewer trials first (a tie: the leader)
    fresh = two.propose(planted({"production": [1000.0], "else": [1500.0]}), [])
    assert fresh == [dict(ELSE), dict(PRODUCTION)]
    assert not isinstance(fresh[0], Beside) and isinstance(fresh[1], Beside)
    assert fresh[1].mate is None  # the proposal before it: a fresh pair
    # one pool free: the whole pair still (it takes one pool, its partner next there)
    assert strategy(2, pools=1, search=Recorder()).propose(
        planted({"production": [1000.0], "else": [1500.0]}), []) == fresh
    # the leader confirmed: production next on the pool of the leader's last trial (3)
    settled = two.propose(planted({"production": [1000.0], "else": [1500.0, 1490.0]}), [])
    assert settled == [dict(PRODUCTION)]
    assert isinstance(settled[0], Beside) and settled[0].mate == 3
    # one of the leader's trials running: production waits to run beside it
    assert two.propose(planted({"production": [1000.0], "else": [1500.0]}), [dict(ELSE)]) == []
    # below the candidates confirmation re-runs (the top 3): run all the same
    ranked_out = planted({"production": [1000.0], "else": [1500.0, 1490.0],
                          "m64": [1400.0, 1410.0], "m80": [1450.0, 1440.0]})
    below = two.propose(ranked_out, [])
    assert below == [dict(PRODUCTION)] and isinstance(below[0], Beside) and below[0].mate == 3
    # production measured twice: confirmation is settled; a whole pair starts at once on the
    # two pools, and nothing while anything else runs
    done = planted({"production": [1000.0], "else": [1500.0, 1490.0]}, [("production", 1010)])
    assert two.final(done) is not None and two.final(done[:-1]) is None
    assert two.propose(done, []) == [dict(PRODUCTION), dict(ELSE)]
    assert two.propose(done, [dict(ELSE)]) == []


def run_final_phase(figures: dict[str, list[float]], fail: int | None = None) -> list[
        TrialEvidence]:
    """The planted search and confirmation, then the final phase as one pool runs it: each
    proposal measured in turn (production and the answer take their next figure), the trial
    numbered ``fail`` a failed deployment (its number taken, no evidence)."""
    done = planted({"production": [1000.0, 1010.0], "else": [1500.0, 1490.0]})
    budget = len(done)
    seq = budget
    for _ in range(20):
        asked = strategy(budget, search=Recorder()).propose(done, [])
        if not asked:
            return done
        assert len(asked) == 1  # one pool
        seq += 1
        if seq == fail:
            continue
        name = "production" if variant_key(asked[0]) == variant_key(PRODUCTION) else "else"
        done.append(trial(name, figures[name].pop(0), seq))
    raise AssertionError("the final phase never ended")


def test_the_final_phase_alternates_and_a_resumed_run_replays_it() -> None:
    figures = {"production": [1005.0, 1000.0, 995.0], "else": [1510.0, 1495.0, 1500.0]}
    done = run_final_phase({k: list(v) for k, v in figures.items()})
    names = ["production" if variant_key(t.levels) == variant_key(PRODUCTION) else "else"
             for t in done[4:]]
    assert names == ["production", "else", "else", "production"]  # each pair reversed
    budget = 4
    # every prefix from the phase's first trial on finds the same phase: a run killed at any
    # point and resumed (a new strategy, the stored trials) goes on with the same pairs
    kept = strategy(budget)  # one strategy asked again and again, as a running campaign's
    for cut in range(budget + 1, len(done) + 1):
        final = strategy(budget).final(done[:cut])
        assert final is not None and final.after == budget
        assert kept.final(done[:cut]) == final  # where it began is remembered, not re-sought
    assert kept.final(done[:budget - 1]) is None  # other trials: sought again
    first = strategy(budget).conclude(done, [])
    again = strategy(budget).conclude(list(reversed(done)), [])  # the store's order is not
    said, said_again = first.finding_json("optimize"), again.finding_json("optimize")
    assert said is not None and said_again is not None
    assert said["versus_production"] == said_again["versus_production"]
    versus = said["versus_production"]
    assert versus["shown_better"] and versus["pair_trials"] == [[5, 6], [8, 7]]
    phases = [step.phase for step in strategy(budget).trail(done)]
    assert phases[4:] == ["final"] * 4 and "final" not in phases[:4]


def test_a_failed_trial_of_a_pair_is_run_again_beside_its_partner() -> None:
    figures = {"production": [1005.0, 1000.0, 995.0], "else": [1510.0, 1495.0, 1500.0]}
    done = run_final_phase({k: list(v) for k, v in figures.items()}, fail=6)
    assert [t.seq for t in done[4:]] == [5, 7, 8, 9]  # 6 (the answer's) failed: 7 is its retry
    conclusion = strategy(4).conclude(done, [])
    said = conclusion.finding_json("optimize")
    assert said is not None
    assert said["versus_production"]["pair_trials"] == [[5, 7], [9, 8]]


def test_the_final_trials_do_not_reopen_the_choice() -> None:
    """The answer's final trials lower its mean below a runner-up's (whose own trials are as
    lucky as the answer's were): the answer confirmation settled stays the answer, tested on its
    pairs, and nothing more runs (a runner-up is not paired in turn)."""
    before = {"production": [1000.0, 1010.0], "else": [1500.0, 1490.0], "m64": [1480.0, 1470.0]}
    final = [("production", 1005.0), ("else", 1400.0), ("else", 1410.0), ("production", 1000.0)]
    done = planted(before, final)
    settled = strategy(6, search=Recorder())
    standing = settled.standing(done)
    assert standing.settled == variant_key(ELSE) and standing.named[0].levels == ELSE
    assert max(standing.named, key=lambda c: c.score()).key != variant_key(ELSE)
    assert settled.propose(done, []) == []
    conclusion, versus = concluded(before, final)
    said = conclusion.finding_json("optimize")
    assert said is not None and said["best"] == ELSE
    assert said["ranked"][0]["levels"] == ELSE
    assert versus["shown_better"] and versus["pair_trials"] == [[7, 8], [10, 9]]
