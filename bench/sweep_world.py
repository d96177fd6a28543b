"""The sweep benchmark's simulated world (bench/sweeps.py): what a trial draws, the scenarios,
and how the sweep strategy's trials are replayed on them.

It owns the rates (``Rates``), the scenarios (``SCENARIOS``), the ``Machine`` that draws the
trials of one run, ``replay`` (the strategy's trials on the sweep's one pool) and
``baseline_run`` (the sweep's first run, accepted, as the next run's baseline).

Each simulated trial draws its sessions (1% corruption, 1% wedging: errors and timeouts) and two
per-trial figures with lognormal noise (output throughput, p99 e2e latency; sd of the log 4%).
With ``--trial-noise real`` (the default; ``iid``: as before issue 27) each trial also draws the
noise between trials (bench/noise.py): a restart's multiplier of both rates and of the speed
(throughput times it, p99 divided by it), the pool's offsets (a sweep watches one deployment:
one pool, drawn once per run) and a drift over simulated time, each trial 575 s on the pool's
clock and ``RUN_GAP_S`` (a day) between the baseline run and the current one. The baseline run
is simulated too: the first run of the sweep (no baseline, so ``min_trials`` trials per
variant), whose trials become ``BaselineTrial`` entries as orchestrator/sweeps/baseline.py
copies them. Then ``SweepStrategy`` is replayed on the current run: propose, simulate those
trials on the sweep's one pool in the order proposed, until it proposes nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from bench.noise import IID, Draw, Fleet, TrialNoise, scaled
from experiments.campaign import Cost
from experiments.strategy_config import BaselineTrial, NamedVariant, SweepConfig
from orchestrator.core.evidence import Latency, Performance, TrialEvidence, variant_key
from orchestrator.core.strategies.sweep import BUILD, SweepStrategy, of_trial

FACTOR = "config"
VARIANTS = tuple(NamedVariant(name=name, levels={FACTOR: name})
                 for name in ("production", "risky-1", "risky-2"))
SESSIONS = 80
COST = Cost()
RUN_GAP_S = 86_400.0  # simulated time between the baseline run and the current one
POOL = "pool-1"  # a sweep watches one deployment


@dataclass(frozen=True)
class Rates:
    """What one trial of a variant draws from."""

    corruption: float = 0.01  # per judged session
    wedging: float = 0.01  # errors and timeouts, per session
    throughput: float = 2000.0  # output tokens/s, geometric mean
    p99_ms: float = 20_000.0
    sigma_throughput: float = 0.04  # standard deviation of the log, trial to trial
    sigma_p99: float = 0.04
    # standard deviation of the log of a shift shared by every trial of one run (another day,
    # another machine state): 0, trials of both runs vary around the same figure
    drift: float = 0.0
    # between trials (bench/noise.py): a restart's draw, a pool's offsets, the drift over
    # simulated time, of both rates and of the speed; IID: none
    noise: TrialNoise = IID


@dataclass(frozen=True)
class Scenario:
    name: str
    variant: str | None = None  # the risky variant that regressed in the current build
    metric: str | None = None
    change: dict[str, float] = field(default_factory=dict)  # its rates, changed


SCENARIOS = (
    Scenario("clean"),
    Scenario("corruption 1% -> 6%", "risky-1", "corruption", {"corruption": 0.06}),
    Scenario("throughput -30%", "risky-1", "throughput", {"throughput": 0.7}),
    Scenario("throughput -10%", "risky-1", "throughput", {"throughput": 0.9}),
)


class Machine:
    """Draws the trials of one run: the scenario's rates for its variant's current build, the
    clean rates for everything else (the baseline's build included)."""

    def __init__(self, rng: np.random.Generator, clean: Rates, scenario: Scenario) -> None:
        self.rng, self.clean, self.scenario = rng, clean, scenario
        self.current = True  # False while the baseline run draws its trials: all clean
        # each run's shift of throughput and p99 (baseline run, current run); drawn only where
        # asked, so that the draws without drift stay the same
        self.shifts = {phase: (float(np.exp(rng.normal(0.0, clean.drift))),
                               float(np.exp(rng.normal(0.0, clean.drift))))
                       if clean.drift else (1.0, 1.0) for phase in (False, True)}
        changed: dict[str, Any] = dict(scenario.change)
        if "throughput" in changed:  # a factor of the clean figure
            changed["throughput"] *= clean.throughput
        self.changed = replace(clean, **changed)
        # the noise between trials, with a source of its own (none drawn without it)
        self.fleet = None if clean.noise.iid else Fleet(clean.noise, int(rng.integers(2**62)))
        self._last_phase = self.current
        # the planted variant's corruption rate as its pool stood at each of its trials (the
        # offset and the drift, not a restart's luck), in the baseline run and this one
        self.steady: dict[bool, list[float]] = {False: [], True: []}

    def rise(self) -> float | None:
        """How far the planted variant's corruption rose from the baseline run to this one
        as the pool stood (a day's drift and the pool's offset scale the planted rate too):
        None where the scenario plants no corruption."""
        if self.scenario.metric != "corruption" or not all(self.steady.values()):
            return None
        return statistics.fmean(self.steady[True]) - statistics.fmean(self.steady[False])

    def rates(self, levels: dict[str, str]) -> Rates:
        if self.current and levels[FACTOR] == self.scenario.variant \
                and levels.get(BUILD) != "baseline":
            return self.changed
        return self.clean

    def draw(self, pool: str) -> Draw:
        """The noise between trials of a trial starting now on ``pool``; a day passes for every
        pool between the baseline run and the current one."""
        if self.fleet is None:
            return Draw()
        if self.current and not self._last_phase:
            self.fleet.elapse_all(RUN_GAP_S)
        self._last_phase = self.current
        drawn = self.fleet.trial(pool)
        self.fleet.elapse(pool, COST.restart_s + COST.workload_s)
        return drawn

    def trial(self, levels: dict[str, str], pool: str = "pool-1") -> TrialEvidence:
        r = self.rates(levels)
        noise = self.draw(pool)
        if levels[FACTOR] == self.scenario.variant and levels.get(BUILD) != "baseline":
            self.steady[self.current].append(scaled(r.corruption, noise.steady))
        wedging, corruption = scaled(r.wedging, noise.rate), scaled(r.corruption, noise.rate)
        wedged, corrupt, ok = (int(n) for n in self.rng.multinomial(SESSIONS, [
            wedging, (1 - wedging) * corruption, (1 - wedging) * (1 - corruption)]))
        shift_throughput, shift_p99 = self.shifts[self.current]
        throughput = r.throughput * shift_throughput * float(
            np.exp(self.rng.normal(0.0, r.sigma_throughput)))
        p99 = r.p99_ms * shift_p99 * float(np.exp(self.rng.normal(0.0, r.sigma_p99)))
        if noise.speed != 1.0:
            throughput, p99 = throughput * noise.speed, p99 / noise.speed
        performance = Performance(
            wall_s=COST.workload_s, requests=SESSIONS, completed=SESSIONS - wedged,
            output_tokens=int(throughput * COST.workload_s), good_sessions=ok,
            request_throughput=(SESSIONS - wedged) / COST.workload_s,
            output_throughput=throughput, goodput=ok / COST.workload_s,
            e2e=Latency(p99 / 4, p99 / 2, p99))
        counts = {"ok": ok, "leak": corrupt, "timeout": wedged}
        return TrialEvidence(dict(levels), {k: n for k, n in counts.items() if n},
                             planned=SESSIONS, performance=performance)


def replay(strategy: SweepStrategy, machine: Machine, limit: int = 10_000
           ) -> list[TrialEvidence]:
    """The strategy's trials as a sweep of one deployment runs them: on its one pool, in the
    order proposed (a control beside its trial), a round's proposals all before the next round
    is asked for (a variant's needs depend on its own trials only), until it proposes none."""
    done: list[TrialEvidence] = []
    while proposals := strategy.propose(done, []):
        done += [machine.trial(levels, POOL) for levels in proposals]
        if len(done) > limit:
            raise RuntimeError(f"the sweep strategy proposed over {limit} trials")
    return done


def baseline_run(plan: SweepConfig, machine: Machine, trials: int | None = None
                 ) -> list[BaselineTrial]:
    """The sweep's first run, accepted (no baseline: ``max_trials`` per variant, as `bisect
    sweep --accept` runs it, or ``trials``), its trials as the next run's ``baseline``
    (orchestrator/sweeps/baseline.py)."""
    first = plan.model_copy(update={"baseline": [], "baseline_run": None, "confirm_build": False,
                                    "min_trials": trials or plan.max_trials})
    names = {variant_key(v.levels): v.name for v in plan.variants}
    machine.current = False
    try:
        done = replay(SweepStrategy(first), machine)
    finally:
        machine.current = True
    return [BaselineTrial(variant=names[variant_key(t.levels)], counts=dict(t.counts),
                          output_throughput=s.output_throughput, p99_e2e_ms=s.p99_e2e_ms)
            for t in done if (s := of_trial(t))]
