"""`optimize` on several pools, pure: a pool's own speed decides neither the ranking nor the
answer's comparison with production (issue 27; BENCHMARKS.md, "On two pools 10% apart": the
ranking read production's trials on the slower pool against others' on the faster one).
Planted per-trial throughputs on named pools, no driver, no Optuna."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bench.knob_space import PRODUCTION
from orchestrator.core.evidence import TrialEvidence
from orchestrator.core.pairs import Beside
from orchestrator.core.strategies.optimize_pools import one_pool, pool_offsets
from orchestrator.core.strategies.optimize_rank import candidates, ranked
from orchestrator.core.strategies.optimize_versus import versus_production, welch
from tests.support.optimize_planted import ELSE, Recorder, strategy, trial

pytestmark = pytest.mark.pure

SLOW, FAST = "pool-1", "pool-2"


def ran(*rows: tuple[str, float, str], corrupt: int = 0) -> list[TrialEvidence]:
    """Trials in the order they ran: (configuration, output throughput, pool); ``corrupt``
    leaks in each of production's."""
    return [trial(name, figure, seq, corrupt=corrupt if name == "production" else 0,
                  pool=pool) for seq, (name, figure, pool) in enumerate(rows, start=1)]


def first(done: list[TrialEvidence]) -> dict[str, str]:
    return dict(ranked([c for c in candidates(done, strategy().plan) if c.safe])[0].levels)


def test_a_configuration_on_the_faster_pool_does_not_outrank_production_by_its_pool() -> None:
    # production ran three times on the slower pool and once on the faster; the other
    # configuration only on the faster, 2.5% below production there: pooled, its mean (1,950)
    # is above production's (1,850), and it ranked first
    slower = [("production", 1800.0, SLOW), ("production", 1810.0, SLOW),
              ("production", 1790.0, SLOW), ("production", 2000.0, FAST)]
    done = ran(*slower, ("else", 1950.0, FAST), ("else", 1960.0, FAST), ("else", 1940.0, FAST))
    assert first(done) == PRODUCTION
    assert strategy().standing(done).named[0].levels == PRODUCTION
    every = candidates(done, strategy().plan)
    assert every[1].objectives[0].mean == pytest.approx(1950.0)  # the report's figures: raw
    assert every[1].adjusted and every[1].score() < every[0].score()
    # faster on that pool in truth (5% above production there): it ranks first
    assert first(ran(*slower, ("else", 2100.0, FAST), ("else", 2110.0, FAST))) == ELSE
    # one pool: the plain means rank, as before
    alone = ran(*[(name, figure, "") for name, figure, _ in
                  [*slower, ("else", 1950.0, FAST), ("else", 1960.0, FAST)]])
    assert first(alone) == ELSE and all(not c.adjusted for c in candidates(
        alone, strategy().plan))


def test_pool_offsets_come_from_configurations_measured_on_several_pools() -> None:
    # two configurations on both pools, the slower pool at x0.9 exactly
    done = ran(("production", 900.0, SLOW), ("production", 1000.0, FAST),
               ("else", 1800.0, SLOW), ("else", 2000.0, FAST), ("m64", 1500.0, "pool-3"))
    values = [(t, t.performance.output_throughput) for t in done if t.performance]
    offsets = pool_offsets(values)
    assert offsets[FAST] - offsets[SLOW] == pytest.approx(-math.log(0.9))
    assert offsets[SLOW] + offsets[FAST] == pytest.approx(0.0)  # 2 trials each: centred
    assert "pool-3" not in offsets  # linked by nothing: nothing says how it differs
    # nothing measured on two pools: no offsets, and the ranking's figures are the means
    apart = ran(("production", 900.0, SLOW), ("else", 2000.0, FAST))
    assert pool_offsets([(t, 1.0) for t in apart]) == {}
    assert all(not c.adjusted for c in candidates(apart, strategy().plan))


def test_production_runs_on_the_leaders_pool_before_the_final_phase() -> None:
    # production confirmed on the slower pool, the leader on the faster: nothing links the two
    # pools, so production runs next on the leader's pool before the pairs begin
    done = ran(("production", 1800.0, SLOW), ("production", 1810.0, SLOW),
               ("else", 2100.0, FAST), ("else", 2110.0, FAST))
    two = strategy(4, pools=2, search=Recorder())
    asked = two.propose(done, [])
    assert asked == [dict(PRODUCTION)] and isinstance(asked[0], Beside) and asked[0].mate == 4
    assert two.final(done) is None
    # once it ran there, confirmation is settled: the final phase's pairs
    linked = [*done, trial("production", 2000.0, 5, pool=FAST)]
    after = strategy(4, pools=2, search=Recorder())
    assert after.final(linked) is not None
    assert after.propose(linked, []) == [dict(PRODUCTION), dict(ELSE)]
    # one pool: nothing to link, no trial more
    one = ran(*[(name, figure, "") for name, figure in
                [("production", 1800.0), ("production", 1810.0), ("else", 2100.0),
                 ("else", 2110.0)]])
    assert strategy(4, pools=1, search=Recorder()).final(one) is not None


def test_the_welch_test_reads_one_pool_never_one_pool_against_another() -> None:
    plan = strategy().plan
    # never on one pool: not tested (all trials pooled said better: 1,950 against 1,800)
    apart = candidates(ran(("production", 1800.0, SLOW), ("production", 1810.0, SLOW),
                           ("production", 1790.0, SLOW), ("else", 1950.0, FAST),
                           ("else", 1960.0, FAST), ("else", 1940.0, FAST)), plan)
    versus = versus_production(apart[1], apart[0], 0.05)
    assert versus.objectives[0].apart and versus.objectives[0].p_value is None
    assert not versus.shown_better and "never ran on one pool" in versus.why_not()
    # production shown unsafe (no final phase): the fallback reads the pool both ran on; all
    # trials pooled said better (p about 0.02), on the faster pool the answer is slower
    done = ran(("production", 1600.0, SLOW), ("production", 1610.0, SLOW),
               ("production", 1590.0, SLOW), ("production", 1605.0, SLOW),
               ("production", 2000.0, FAST), ("production", 2010.0, FAST),
               ("else", 1950.0, FAST), ("else", 1960.0, FAST), ("else", 1940.0, FAST),
               corrupt=10)
    said = strategy(9).conclude(done, []).finding_json("optimize")
    assert said is not None and said["best"] == ELSE
    against = said["versus_production"]
    assert not against["paired"] and not against["shown_better"]
    assert against["objectives"][0]["pool"] == FAST
    assert against["objectives"][0]["trials"] == [3, 2]
    production, answer = (c.objectives[0] for c in candidates(done, plan))
    pooled = welch(dataclasses.replace(answer, pools=()),
                   dataclasses.replace(production, pools=()), 0.05)
    assert pooled.shown_better and pooled.p_value is not None and pooled.p_value < 0.05
    assert one_pool((FAST, FAST, SLOW), (SLOW, FAST, FAST)) == FAST
    assert one_pool((SLOW,), (FAST,)) is None
