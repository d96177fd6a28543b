"""Noise between trials for the simulated pools of bench/ (issue 27), drawn as the twin draws it.

Every figure of verdict truth used to come from trials whose sessions are independent draws given
the variant. Real fleets are not like that: a restart lands in a better or a worse state, a node
runs hotter than its neighbour, the load drifts between a baseline and a later run. A simulated
trial strays from the scenario's rates as the twin's fault model ``noise:`` makes a twin stray
(experiments/twin/variation.py, the same log-normal draw):

- ``rate_spread``: per trial (a restart), one multiplier of every failure rate of the trial, of
  mean 1 and sd of its log ``rate_spread`` (ln 2: a restart halves or doubles the rate at +-1
  sd); a rate is clamped at 1;
- ``speed_spread``: the same of the trial's speed, where a pool has one (throughput times it,
  latency divided by it);
- ``pool_spread``: per pool, one multiplier of rate and one of speed, drawn once for the run
  (stable per seed and pool name), or given in ``pools`` as ``(name, rate, speed)``;
- ``drift``: a random walk of the log of rate and of speed over simulated time, sd ``drift`` per
  square root of an hour, kept within +-``drift_bound``. Simulated time: each pool's own clock,
  its trials' restart and workload seconds added up, on one walk shared by the pools.

The noise has random sources of its own: ``IID`` (all 0, the constructors' default) draws
nothing and leaves every session draw as it was; a noisy run draws the same sessions' uniforms
against other rates. ``REAL_WORLD`` is the benchmarks' default (``--trial-noise real``; ``iid``
gives the figures measured before issue 27).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from experiments.twin.variation import lognormal

DRIFT_STEP_S = 600.0  # the walk moves every 10 simulated minutes
DEFAULT_POOL = "pool-1"  # a trial run without a pool name (the contenders' baselines)
K = TypeVar("K")


@dataclass(frozen=True)
class TrialNoise:
    rate_spread: float = 0.0  # sd of the log of a trial's rate multiplier (mean 1)
    speed_spread: float = 0.0  # the same of its speed
    pool_spread: float = 0.0  # sd of the log of a pool's offsets, drawn once per run
    pools: tuple[tuple[str, float, float], ...] = ()  # given offsets: (pool, rate, speed)
    drift: float = 0.0  # sd of the walk of the log per sqrt(hour) of simulated time
    drift_bound: float = math.log(2)  # |log| of the walk at most

    @property
    def iid(self) -> bool:
        return not (self.rate_spread or self.speed_spread or self.pool_spread or self.pools
                    or self.drift)

    def describe(self) -> str:
        if self.iid:
            return "i.i.d. trials"
        parts = [f"rate spread {self.rate_spread:.2g}", f"speed spread {self.speed_spread:.2g}",
                 f"pool spread {self.pool_spread:.2g}"]
        parts += [f"pool {name} x{rate:g}/x{speed:g}" for name, rate, speed in self.pools]
        if self.drift:
            parts.append(f"drift {self.drift:.2g}/sqrt(h) within x{math.exp(self.drift_bound):.2g}")
        return "trial noise: " + ", ".join(parts)


IID = TrialNoise()
# A restart halves or doubles the failure rates at one sd; 5% of speed; pools 20% apart; the
# load drifting about 5% in an hour, 25% in a day, at most a factor 2.
REAL_WORLD = TrialNoise(rate_spread=math.log(2), speed_spread=0.05, pool_spread=0.2,
                        drift=0.05)
NOISES: dict[str, TrialNoise] = {"real": REAL_WORLD, "iid": IID}


@dataclass(frozen=True)
class Draw:
    """One trial's multipliers: of its failure rates and of its speed."""

    rate: float = 1.0
    speed: float = 1.0
    steady: float = 1.0  # the part of ``rate`` every trial of the pool shares now (offset, drift)


class Fleet:
    """The noise of one simulated run (a seed): the pools' offsets, their clocks, the walk, and
    each trial's restart draw."""

    def __init__(self, noise: TrialNoise, seed: object) -> None:
        self.noise, self.seed = noise, seed
        self._restarts = random.Random(f"trial noise {seed}: restarts")
        self._walk_rng = random.Random(f"trial noise {seed}: drift")
        self._walk: list[tuple[float, float]] = [(0.0, 0.0)]  # log (rate, speed) per step
        self._offsets: dict[str, tuple[float, float]] = {
            name: (rate, speed) for name, rate, speed in noise.pools}
        self.clocks: dict[str, float] = {}  # simulated seconds of each pool's trials
        self.epoch_s = 0.0  # time passed for every pool besides (between runs)

    def offset(self, pool: str) -> tuple[float, float]:
        """The pool's (rate, speed) offsets: given, else drawn once per (seed, pool)."""
        if pool not in self._offsets:
            rng = random.Random(f"trial noise {self.seed}: pool {pool}")
            spread = self.noise.pool_spread
            self._offsets[pool] = (lognormal(rng, spread), lognormal(rng, spread))
        return self._offsets[pool]

    def drifted(self, at_s: float) -> tuple[float, float]:
        """The walk's (rate, speed) factors at simulated second ``at_s``."""
        if not self.noise.drift:
            return 1.0, 1.0
        step = max(0, int(at_s // DRIFT_STEP_S))
        sd = self.noise.drift * math.sqrt(DRIFT_STEP_S / 3600.0)
        bound = self.noise.drift_bound
        while len(self._walk) <= step:
            rate, speed = self._walk[-1]
            rate = min(bound, max(-bound, rate + self._walk_rng.gauss(0.0, sd)))
            speed = min(bound, max(-bound, speed + self._walk_rng.gauss(0.0, sd)))
            self._walk.append((rate, speed))
        rate, speed = self._walk[step]
        return math.exp(rate), math.exp(speed)

    def trial(self, pool: str | None = None) -> Draw:
        """A trial starting now on ``pool``: its restart's draw, the pool's offsets, the drift
        at the pool's clock."""
        if self.noise.iid:
            return Draw()
        name = pool or DEFAULT_POOL
        rate = lognormal(self._restarts, self.noise.rate_spread)
        speed = lognormal(self._restarts, self.noise.speed_spread)
        off_rate, off_speed = self.offset(name)
        drift_rate, drift_speed = self.drifted(self.epoch_s + self.clocks.get(name, 0.0))
        return Draw(rate * off_rate * drift_rate, speed * off_speed * drift_speed,
                    off_rate * drift_rate)

    def elapse(self, pool: str | None, seconds: float) -> None:
        name = pool or DEFAULT_POOL
        self.clocks[name] = self.clocks.get(name, 0.0) + max(0.0, seconds)

    def elapse_all(self, seconds: float) -> None:
        """Time passing for every pool (between a baseline run and the next)."""
        self.epoch_s += max(0.0, seconds)


def scaled(probability: float, factor: float) -> float:
    """A rate times the trial's multiplier, clamped at 1 (exactly the rate at factor 1)."""
    return probability if factor == 1.0 else min(1.0, probability * max(0.0, factor))


def scaled_shares(shares: Mapping[K, float], factor: float) -> dict[K, float]:
    """Outcome shares times the multiplier; where they then pass 1, in proportion to 1."""
    if factor == 1.0:
        return dict(shares)
    out = {key: share * max(0.0, factor) for key, share in shares.items()}
    total = sum(out.values())
    return {key: share / total for key, share in out.items()} if total > 1.0 else out
