"""Noise between trials in the simulated pools of bench/ (issue 27, bench/noise.py): a restart's
multiplier of the rate, a pool's offset, a drift over simulated time. Noisy trials of one
variant are overdispersed (their rates vary well beyond the binomial's), i.i.d. ones are not
and draw exactly what they drew before; the benchmarks default to the noisy kind."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from bench import sweep_world, sweeps
from bench.knob_space import BEST, KnobPools, corruption
from bench.noise import IID, NOISES, REAL_WORLD, Fleet, TrialNoise, scaled, scaled_shares
from bench.scenarios import SESSIONS, FaultModelPool, Pool, scenarios
from experiments.outcomes import Outcome

pytestmark = pytest.mark.pure

LN2 = math.log(2)


def _dispersion(rates: list[float], p: float, n: int = SESSIONS) -> float:
    """The variance of per-trial rates over the binomial's at their mean rate."""
    return statistics.variance(rates) / (p * (1 - p) / n)


def _rates(pool: Pool, trials: int, levels: dict[str, str] | None = None,
           pool_name: str | None = None) -> list[float]:
    out = []
    for _ in range(trials):
        seen = pool.trial(levels or {}, pool=pool_name)
        out.append(seen.failures / seen.judged)
    return out


def test_iid_draws_exactly_what_a_pool_drew_before() -> None:
    assert IID.iid and not REAL_WORLD.iid and NOISES == {"real": REAL_WORLD, "iid": IID}
    fleet = Fleet(IID, 3)
    assert (fleet.trial("pool-2").rate, fleet.trial().speed) == (1.0, 1.0)
    # the session stream of the pool is the one it was: the first trial's draws by hand
    rng = random.Random(7)
    by_hand = sum(rng.random() < 0.3 for _ in range(SESSIONS))
    assert Pool(lambda _: 0.3, 7).trial({}).failures == by_hand
    assert Pool(lambda _: 0.3, 7, noise=IID).trial({}, pool="pool-2").failures == by_hand
    # ... and a noisy pool draws the same uniforms against its trial's rate
    noise = TrialNoise(rate_spread=LN2)
    multiplier = Fleet(noise, 7).trial().rate
    assert multiplier != 1.0
    rng = random.Random(7)
    by_hand = sum(rng.random() < scaled(0.3, multiplier) for _ in range(SESSIONS))
    assert Pool(lambda _: 0.3, 7, noise=noise).trial({}).failures == by_hand
    assert scaled(0.3, 1.0) == 0.3 and scaled(0.3, 5.0) == 1.0 and scaled(0.3, 0.5) == 0.15
    shares = {Outcome.LEAK: 0.5, Outcome.TIMEOUT: 0.25}
    assert scaled_shares(shares, 1.0) == shares
    assert scaled_shares(shares, 2.0) == {Outcome.LEAK: 2 / 3, Outcome.TIMEOUT: 1 / 3}


def test_noisy_trials_are_overdispersed_and_iid_ones_binomial() -> None:
    p, trials = 0.1, 400
    iid = _rates(Pool(lambda _: p, 1), trials)
    restart = _rates(Pool(lambda _: p, 1, noise=TrialNoise(rate_spread=LN2)), trials)
    real = _rates(Pool(lambda _: p, 1, noise=REAL_WORLD), trials)
    assert 0.75 < _dispersion(iid, p) < 1.3
    # the restart's multiplier: Var(p_t) = p^2 (e^{s^2} - 1) ~ 6x the binomial's here
    assert _dispersion(restart, p) > 3
    assert _dispersion(real, p) > 3
    # mean 1: the scenario's rate stays the rate averaged over restarts
    assert statistics.fmean(restart) == pytest.approx(p, abs=0.015)
    # the log of the multipliers has the sd set
    fleet = Fleet(TrialNoise(rate_spread=LN2), 5)
    logs = [math.log(fleet.trial().rate) for _ in range(4000)]
    assert statistics.stdev(logs) == pytest.approx(LN2, abs=0.03)


def test_pools_have_offsets_of_their_own() -> None:
    fleet = Fleet(TrialNoise(pool_spread=0.3), 11)
    one, two = fleet.offset("pool-1"), fleet.offset("pool-2")
    assert one == fleet.offset("pool-1") == Fleet(TrialNoise(pool_spread=0.3), 11).offset(
        "pool-1")  # stable per (seed, pool)
    assert one != two
    assert fleet.trial("pool-1").rate == one[0]  # no restart spread, no drift: the offset
    spread = [math.log(Fleet(TrialNoise(pool_spread=0.3), s).offset("p")[0])
              for s in range(2000)]
    assert statistics.stdev(spread) == pytest.approx(0.3, abs=0.02)
    # given offsets: a hot pool and a cool one, every trial of one variant
    given = TrialNoise(pools=(("hot", 2.0, 1.0), ("cool", 0.5, 1.0)))
    pool = Pool(lambda _: 0.1, 3, noise=given)
    hot = statistics.fmean(_rates(pool, 150, pool_name="hot"))
    cool = statistics.fmean(_rates(pool, 150, pool_name="cool"))
    assert hot == pytest.approx(0.2, abs=0.02) and cool == pytest.approx(0.05, abs=0.012)


def test_drift_walks_with_simulated_time_within_its_bound() -> None:
    noise = TrialNoise(drift=0.3, drift_bound=math.log(1.5))
    fleet = Fleet(noise, 2)
    assert fleet.drifted(0.0) == (1.0, 1.0)
    later = fleet.drifted(20 * 3600.0)
    assert later != (1.0, 1.0)
    # the walk is one process: the same values whatever order the times are asked in
    other = Fleet(noise, 2)
    assert other.drifted(20 * 3600.0) == later and other.drifted(3600.0) == fleet.drifted(3600.0)
    walked = [fleet.drifted(h * 600.0) for h in range(600)]
    assert all(1 / 1.5 - 1e-12 <= f <= 1.5 + 1e-12 for pair in walked for f in pair)
    assert len({pair for pair in walked}) > 100
    # each pool's own clock: a pool that ran 10 hours of trials meets the walk there
    fleet.elapse("pool-1", 10 * 3600.0)
    assert fleet.trial("pool-1").rate == fleet.drifted(10 * 3600.0)[0]
    assert fleet.trial("pool-2").rate == 1.0
    fleet.elapse_all(24 * 3600.0)  # a day between runs, for every pool
    assert fleet.trial("pool-2").rate == fleet.drifted(24 * 3600.0)[0]
    # a simulated pool's clock moves with its trials' restart and workload
    pool = Pool(lambda _: 0.0, 1, noise=noise)
    pool.trial({}, pool="pool-1")
    assert pool.fleet.clocks["pool-1"] == 90 + 485


def test_the_twins_fault_model_pool_draws_the_same_way() -> None:
    bad = {"index_k": "bf16", "hicache": "on", "topk_v2": "off", "cuda_graph": "on"}
    iid = _rates(FaultModelPool(1), 120, bad)
    noisy = _rates(FaultModelPool(1, TrialNoise(rate_spread=LN2)), 120, bad)
    p = statistics.fmean(iid)
    assert 0.05 < p < 0.3
    assert _dispersion(noisy, p) > 2 * max(1.0, _dispersion(iid, p))


def test_the_knob_space_draws_rate_and_speed_per_trial() -> None:
    unsafe = {**BEST, "max_running": "128"}
    assert corruption(unsafe) == 0.3

    def run(pools: KnobPools, trials: int) -> tuple[list[float], list[float]]:
        rates, speeds = [], []
        for index in range(trials):
            order: Any = SimpleNamespace(trial_id=index, levels=unsafe, stop_rule=None)
            pools.submit("pool-1", order)
            _, report = pools.next_report()
            rates.append(sum(s.outcome == "leak" for s in report.sessions) / 60)
            assert report.performance is not None
            speeds.append(report.performance["output_throughput"])
        return rates, speeds

    iid_rates, iid_speeds = run(KnobPools(4), 150)
    assert (iid_rates, iid_speeds) == run(KnobPools(4, IID), 150)
    rates, speeds = run(KnobPools(4, TrialNoise(rate_spread=LN2, speed_spread=0.2)), 150)
    assert _dispersion(rates, 0.3, 60) > 2 * _dispersion(iid_rates, 0.3, 60)
    assert statistics.stdev(np.log(speeds)) > 3 * statistics.stdev(np.log(iid_speeds))


def test_the_sweep_machine_draws_between_trials_and_a_day_between_runs() -> None:
    clean, scenario = sweep_world.Rates(), sweep_world.SCENARIOS[0]
    assert clean.noise is IID
    plain = sweep_world.Machine(np.random.default_rng(3), clean, scenario)
    assert plain.fleet is None
    noisy = sweep_world.Rates(corruption=0.1, noise=TrialNoise(rate_spread=LN2, drift=0.1))
    machine = sweep_world.Machine(np.random.default_rng(3), noisy, scenario)
    machine.current = False  # the baseline run
    before = [machine.trial({"config": "production"}, "pool-1") for _ in range(200)]
    machine.current = True
    machine.trial({"config": "production"}, "pool-2")
    assert machine.fleet is not None and machine.fleet.epoch_s == sweep_world.RUN_GAP_S
    rates = [t.counts.get("leak", 0) / t.judged for t in before]
    assert _dispersion(rates, 0.1) > 3
    iid_machine = sweep_world.Machine(np.random.default_rng(3),
                                      sweep_world.Rates(corruption=0.1), scenario)
    iid = [iid_machine.trial({"config": "production"}) for _ in range(200)]
    assert 0.7 < _dispersion([t.counts.get("leak", 0) / t.judged for t in iid], 0.1) < 1.4


def test_the_benchmarks_default_to_real_world_noise(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert all(s.noise is REAL_WORLD for s in scenarios())
    assert REAL_WORLD.rate_spread == pytest.approx(0.69, abs=0.01)  # halves or doubles at 1 sd
    scenario = scenarios()[2]
    assert scenario.pool(1).fleet.noise is REAL_WORLD
    assert scenario.pool(1, IID).fleet.noise is IID
    # the constructors' default stays i.i.d. (the unit tests' pools)
    assert Pool(lambda _: 0.0, 1).fleet.noise is IID and KnobPools(1).fleet.noise is IID
    from bench.optimize_runs import Settings

    assert Settings().trial_noise is REAL_WORLD
    # the heading names the noise; one scenario says it (test_bench_sweeps runs them all),
    # with the fewest trials a plan takes (the default plan's cost 2 s of CPU a run)
    few = ["--runs", "1", "--workers", "1", "--scenarios", "clean", "--trials", "2,2,2",
           "--baseline-trials", "2"]
    sweeps.main([*few, "--json", str(tmp_path / "s.json")])
    assert REAL_WORLD.describe() in capsys.readouterr().out
    sweeps.main([*few, "--trial-noise", "iid"])
    assert "i.i.d. trials" in capsys.readouterr().out
