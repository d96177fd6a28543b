"""A pair's two trials run on one pool, and are compared only there (Pinpoint runs A and B on
one device): placement honours ``Beside``, the sweep pairs a trial with the control that ran on
its pool, and on the real campaign loop with two pools of different speed every pair ran on one
pool and nothing alerts."""

from __future__ import annotations

from typing import Any

import pytest

from bench.sweep_pools import one_run
from db.store import Store
from experiments.campaign import Campaign
from experiments.strategy_config import BaselineTrial, Thresholds
from orchestrator.core.evidence import TrialEvidence
from orchestrator.core.pairs import Beside, pairs_on_pools
from orchestrator.core.strategies.sweep import SweepStrategy
from orchestrator.executor.placement import place, place_pairs
from tests.support.sweep_trials import PRODUCTION, plan, trial

pytestmark = pytest.mark.pure

CUR = {"hicache": "off", "build": "current"}
BASE = {"hicache": "off", "build": "baseline"}


def two_pools() -> Campaign:
    """Two pools; moving the build restarts a pool (its files change), as a real build does."""
    return Campaign.model_validate({
        "name": "pairs",
        "nodes": [{"name": "n", "workdir": "/srv/n"}],
        "pools": [{"name": name, "endpoint": f"http://127.0.0.1:{port}", "services": [{
            "name": f"{name}-server", "node": "n", "start": ["sglang"],
            "health_url": f"http://127.0.0.1:{port}/health"}]}
            for name, port in (("p1", 8001), ("p2", 8002))],
        "factors": [
            {"name": "hicache", "levels": {"off": {}, "on": {"flags": ["--enable-hicache"]}}},
            {"name": "build", "levels": {"current": {}, "baseline": {
                "git": {"tree": "/srv/src", "ref": "abc123"}}}}],
        "known_good": CUR,
    })


def test_a_fresh_pairs_partner_follows_it_on_its_pool() -> None:
    c = two_pools()
    # each pool ran one build last: the fewest restarts alone would keep them apart
    running = {"p1": CUR, "p2": BASE}
    assert place(c, ["p1", "p2"], [CUR, BASE], running) == [("p1", CUR), ("p2", BASE)]
    proposals = [dict(CUR), Beside(BASE), dict(BASE), Beside(CUR), dict(CUR), Beside(BASE)]
    placed = place_pairs(c, ["p1", "p2"], proposals, running, {})
    assert placed.now == [("p1", CUR), ("p2", BASE)]  # one pair a pool, two pairs at once
    assert placed.after == {"p1": BASE, "p2": CUR}  # each partner next on its pair's pool
    # with one pool free, one pair; the third proposal waits for a pool
    one = place_pairs(c, ["p2"], proposals, running, {})
    assert one.now == [("p2", CUR)] and one.after == {"p2": BASE}


def test_a_partner_of_a_trial_that_ran_goes_to_its_pool_or_waits_for_it() -> None:
    c = two_pools()
    running = {"p1": CUR, "p2": BASE}
    ran_on = {4: "p1", 5: "p2"}
    # p1 ran trial 4 (current): its control runs there, though p2 runs that build already
    assert place_pairs(c, ["p1", "p2"], [Beside(BASE, 4)], running, ran_on).now == [
        ("p1", BASE)]
    # p1 busy: the partner runs next there, and a free pool takes the rest
    busy = place_pairs(c, ["p2"], [Beside(BASE, 4), dict(CUR), Beside(BASE)], running, ran_on)
    assert busy.after == {"p1": BASE, "p2": BASE} and busy.now == [("p2", CUR)]
    # a partner waits there already: asked again later, never sent to another pool
    waiting = place_pairs(c, ["p2"], [Beside(CUR, 4)], running, ran_on, waiting=["p1"])
    assert waiting.now == [] and waiting.after == {}
    # proposals with no pair are placed as ``place`` places them
    plain = place_pairs(c, ["p1", "p2"], [dict(BASE), dict(CUR)], running, ran_on)
    assert plain.now == place(c, ["p1", "p2"], [BASE, CUR], running) and not plain.after


def on(pool: str, seq: int, levels: dict[str, str], throughput: float) -> TrialEvidence:
    made = trial(levels, 0, throughput=throughput)
    return TrialEvidence(made.levels, made.counts, performance=made.performance, seq=seq,
                         pool=pool)


def test_pairs_are_made_on_each_pool_apart() -> None:
    mine = [on("p1", 1, CUR, 1), on("p2", 2, CUR, 1), on("p1", 5, CUR, 1), on("p2", 7, CUR, 1)]
    controls = [on("p2", 3, BASE, 1), on("p1", 4, BASE, 1), on("p2", 6, BASE, 1)]
    pairs, lone = pairs_on_pools(mine, controls)
    assert [(a.seq, b.seq) for a, b in pairs] == [(2, 3), (1, 4), (7, 6)]  # as they ended
    assert [t.seq for t in lone] == [5]
    # where no trial has a pool (one pool), the i-th of each side: the pairs as they were
    plain = [TrialEvidence(t.levels, t.counts, seq=t.seq) for t in (*mine, *controls)]
    pairs, lone = pairs_on_pools(plain[:4], plain[4:])
    assert [(a.seq, b.seq) for a, b in pairs] == [(1, 3), (2, 4), (5, 6)]
    assert [t.seq for t in lone] == [7]


def sweep(throughput: float = 0.1) -> SweepStrategy:
    baseline = [BaselineTrial(variant="production", counts={"ok": 80}, output_throughput=1000)
                for _ in range(3)]
    return SweepStrategy(plan(baseline, confirm_build=True, baseline_run=1,
                              thresholds=Thresholds(corruption=0.05, wedging=0.05,
                                                    throughput=throughput, p99_latency=None)))


def test_the_sweep_compares_a_trial_with_the_control_on_its_pool() -> None:
    strategy = sweep()
    # p2 runs 10% slower than p1: each build kept to its own pool would read as a drop
    apart = [on("p1" if levels is CUR else "p2", seq, levels,
                1000.0 if levels is CUR else 1100.0)
             for seq, levels in enumerate([CUR, BASE] * 3, start=1)]
    judged = strategy.judge(PRODUCTION, apart)
    assert judged.state == "measuring" and judged.trials == 3  # no pair among them
    # each trial's partner on its own pool, its number named
    assert [(dict(p), p.mate) for p in judged.needed if isinstance(p, Beside)][:2] == [
        (BASE, 1), (CUR, 2)]
    # pairs on one pool each, p2's pairs 10% slower on both sides: no difference
    speed = {"p1": 1000.0, "p2": 900.0}
    paired = [on(pool, seq, levels, speed[pool] * (1.0 + 0.001 * seq))
              for seq, (pool, levels) in enumerate(
                  [("p1", CUR), ("p2", BASE), ("p1", BASE), ("p2", CUR)] * 3, start=1)]
    judged = strategy.judge(PRODUCTION, paired)
    assert judged.state == "clean", judged
    assert not judged.suspected


def test_on_the_campaign_loop_every_pair_ran_on_one_pool(tmp_path: Any) -> None:
    """The real driver, placement and SQLite store, two simulated pools 10% apart in speed
    (bench/sweep_pools.py): every trial with its partner on its pool, and no alert. (Placed
    by the fewest restarts alone, on main at 2adb202, each build of this run kept to its own
    pool, and it alerted: "regression: production: throughput -8%".)"""
    with Store.open(str(tmp_path / "b.db")) as store:
        row = one_run(store, 7, 2, (0.9, 1.0), variants=1)
        trials = store.trials("run-2")
    assert row["status"] != "culprit", row["reason"]
    assert row["unpartnered"] == 0
    by_pool: dict[str, list[str]] = {}
    for t in sorted(trials, key=lambda t: t.seq):
        by_pool.setdefault(t.pool, []).append(t.levels["build"])
    assert set(by_pool) == {"pool-1", "pool-2"}  # both pools ran pairs
    for builds in by_pool.values():  # each pool's trials two by two: one of each build
        assert all({a, b} == {"current", "baseline"}
                   for a, b in zip(builds[::2], builds[1::2], strict=True))


def test_a_trial_whose_control_has_not_run_gets_its_partner_first() -> None:
    strategy = sweep()
    first = [on("p1", 1, CUR, 1000.0)]
    needed = strategy.judge(PRODUCTION, first).needed
    assert isinstance(needed[0], Beside) and (dict(needed[0]), needed[0].mate) == (BASE, 1)
    # then two fresh pairs (three in all), the first of them in the reverse order
    assert [dict(p) for p in needed[1:]] == [BASE, CUR, CUR, BASE]
    assert [isinstance(p, Beside) for p in needed[1:]] == [False, True, False, True]
