"""Planted-fault scenarios and the simulated pool that runs their trials.

A simulated trial draws every session's outcome from the scenario (a per-variant failure rate,
or the twin's own fault model), its rate times the trial's draw of the noise between trials
(bench/noise.py: a restart's multiplier, its pool's offset, the drift over simulated time; a
scenario's ``noise``, ``REAL_WORLD`` unless told, ``IID`` for the draws before issue 27), then
replays the run in time: all sessions start at once, a
session ends at its first failing turn (a turn drawn uniformly among the rounds) and a clean one
at the end of the workload. A strategy's stop rule sees sessions in that order, as the real
trial's ``on_session`` callback does, so a trial stopped early costs only the workload it ran and
stores only the sessions that had finished — both exactly as a real trial would.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.noise import IID, REAL_WORLD, Fleet, TrialNoise, scaled, scaled_shares
from experiments.outcomes import Outcome
from orchestrator.core.evidence import CORRUPTING, Failing, TrialEvidence, variant_key
from orchestrator.core.stats.compare import StopRule
from orchestrator.core.verdict import CostModel

if TYPE_CHECKING:
    from experiments.twin.conditions import RoleView

SESSIONS = 80
ROUNDS = 4
ALPHA = 0.01
# The seed investigation's real-world figures: a trial is 90 s of restart and 485 s of workload
# on a pool of 16 GPUs, so one full trial costs 9,200 GPU-s.
COST = CostModel(restart_s=90, workload_s=485, gpus=16)
FULL_TRIAL_GPU_S = (COST.restart_s + COST.workload_s) * COST.gpus

Levels = dict[str, str]
Rate = Callable[[Mapping[str, str]], float]
# Per-variant probabilities of each failing outcome, for scenarios whose culprits cause
# different outcomes (a leak here, a wedge there); the rest of the sessions are ok.
Mix = Callable[[Mapping[str, str]], Mapping[Outcome, float]]


@dataclass(frozen=True)
class Scenario:
    name: str
    factors: dict[str, list[str]]
    good: Levels
    bad: Levels
    rate: Rate  # per-session probability that the variant fails
    culprits: list[Levels]  # the planted truth; [] when nothing is to blame
    fault_model: bool = False  # sessions drawn by the twin's fault model instead of ``rate``
    target: str = "corruption"  # or "wedging": failing sessions hang and time out
    mix: Mix | None = None  # which outcome each failure is, where not the target's own
    wedges: list[Levels] = field(default_factory=list)  # of ``culprits``, those that hang
    noise: TrialNoise = REAL_WORLD  # between trials (bench/noise.py); IID: independent trials

    @property
    def planted_wedges(self) -> list[Levels]:
        return self.culprits if self.target == "wedging" else self.wedges

    def pool(self, seed: int, noise: TrialNoise | None = None) -> Pool:
        """The simulated pools of one seed, with the scenario's noise unless told another."""
        noise = self.noise if noise is None else noise
        if self.fault_model:
            return FaultModelPool(seed, noise)
        return Pool(self.rate, seed, Outcome.TIMEOUT if self.target == "wedging" else Outcome.LEAK,
                    self.mix, noise)


class Pool:
    """Runs simulated trials; adds up their real-world cost. ``noise``: between trials (IID,
    the default here: every trial of a variant draws from the same rate)."""

    def __init__(self, rate: Rate, seed: int, failure: Outcome = Outcome.LEAK,
                 mix: Mix | None = None, noise: TrialNoise = IID) -> None:
        self.rate, self.failure, self.mix = rate, failure, mix
        self.rng = random.Random(seed)
        self.fleet = Fleet(noise, seed)
        self.trials = 0
        self.gpu_s = 0.0

    def outcomes(self, levels: Levels, rate_scale: float = 1.0) -> list[Outcome]:
        """The sessions of a trial whose rates are the scenario's times ``rate_scale``."""
        if self.mix is not None:
            shares = scaled_shares(self.mix(levels), rate_scale)
            return [self._drawn(shares) for _ in range(SESSIONS)]
        p = scaled(self.rate(levels), rate_scale)
        return [self.failure if self.rng.random() < p else Outcome.OK for _ in range(SESSIONS)]

    def _drawn(self, shares: Mapping[Outcome, float]) -> Outcome:
        draw = self.rng.random()
        for outcome, share in shares.items():
            if draw < share:
                return outcome
            draw -= share
        return Outcome.OK

    def trial(self, levels: Levels, rule: StopRule | None = None,
              failing: Failing = CORRUPTING, pool: str | None = None) -> TrialEvidence:
        """One trial of ``levels`` on ``pool`` (its offset and clock; None: the first pool);
        ``rule`` may end it once its answer is decided, counting the sessions whose outcome is
        in ``failing``."""
        self.trials += 1
        draw = self.fleet.trial(pool)
        ended = sorted((self._end_time(o), self.rng.random(), o)
                       for o in self.outcomes(levels, draw.rate))
        finished: list[Outcome] = []
        share, early, failed = 1.0, False, 0
        for at, _, outcome in ended:
            finished.append(outcome)
            failed += outcome in failing
            if rule is not None and rule.decided(failed, SESSIONS):
                share, early = at, at < 1.0
                break
        if not early:
            finished = [o for _, _, o in ended]
        self.gpu_s += (COST.restart_s + share * COST.workload_s) * COST.gpus
        self.fleet.elapse(pool, COST.restart_s + share * COST.workload_s)
        return TrialEvidence(dict(levels), dict(Counter(o.value for o in finished)), restarts=1,
                             workload_s=share * COST.workload_s, stopped_early=early,
                             planned=SESSIONS, failing=failing)

    def _end_time(self, outcome: Outcome) -> float:
        """When a session ends, as a share of the workload: a failing turn (a corrupt reply, or a
        hung request once its timeout, about a turn's length, has passed) ends it there; a clean
        session runs to the end."""
        if outcome is Outcome.OK:
            return 1.0
        return self.rng.randint(1, ROUNDS) / ROUNDS


class FaultModelPool(Pool):
    """Every session drawn by the twin's own fault model (experiments/twin/simulate.py) from the
    flags and env the demo campaign renders for the variant: what a real twin would return
    (tests/test_simulate.py checks it session by session against a twin over HTTP)."""

    def __init__(self, seed: int, noise: TrialNoise = IID) -> None:
        from experiments.twin.faults import FaultModel
        from orchestrator.demo import DEMO_FACTORS, FAULT_MODEL

        # the rate is unused: the model decides (its rates times the trial's draw)
        super().__init__(lambda levels: 0.0, seed, noise=noise)
        self.model = FaultModel.model_validate(FAULT_MODEL)
        self.factors = DEMO_FACTORS
        self.seed = seed
        # each variant's server view, made once: it parses the twin's whole command line (a
        # hundred options), which took half of a trial's time here
        self.views: dict[str, RoleView] = {}

    def outcomes(self, levels: Levels, rate_scale: float = 1.0) -> list[Outcome]:
        from experiments.twin.simulate import session_outcomes

        return session_outcomes(self.model, self.view(levels), sessions=SESSIONS,
                                seed=self.seed * 1_000_003 + self.trials, rounds=ROUNDS,
                                rate_scale=rate_scale)

    def view(self, levels: Levels) -> RoleView:
        """The twin of the variant, as its fault rules see it: the flags and env the demo
        campaign renders for its levels."""
        from experiments.twin.simulate import server_view

        key = variant_key(levels)
        if key not in self.views:
            flags: list[str] = []
            env: dict[str, str] = {}
            for factor in self.factors:
                level = factor["levels"][levels[factor["name"]]] or {}
                flags += level.get("flags", [])
                env.update(level.get("env", {}))
            self.views[key] = server_view(flags, env)
        return self.views[key]


def _two_level(n: int) -> tuple[dict[str, list[str]], Levels, Levels]:
    factors = {f"f{i}": ["a", "b"] for i in range(n)}
    return factors, dict.fromkeys(factors, "a"), dict.fromkeys(factors, "b")


def _seed_scenario() -> Scenario:
    factors = {"index_k": ["fp8", "bf16"], "hicache": ["off", "on"], "topk_v2": ["off", "on"],
               "cuda_graph": ["on", "off"]}
    good = {"index_k": "fp8", "hicache": "on", "topk_v2": "off", "cuda_graph": "on"}
    bad = {"index_k": "bf16", "hicache": "on", "topk_v2": "on", "cuda_graph": "off"}
    return Scenario("seed: bf16 x HiCache among 4", factors, good, bad,
                    lambda lv: 0.15 if lv["index_k"] == "bf16" and lv["hicache"] == "on" else 0,
                    [{"index_k": "bf16", "hicache": "on"}])


def _fault_model_scenario() -> Scenario:
    seed = _seed_scenario()
    return Scenario("seed, drawn by the twin's fault model", seed.factors,
                    {"index_k": "fp8", "hicache": "on", "topk_v2": "on", "cuda_graph": "on"},
                    {"index_k": "bf16", "hicache": "on", "topk_v2": "on", "cuda_graph": "on"},
                    seed.rate, seed.culprits, fault_model=True)


def _either(*shares: tuple[Callable[[Mapping[str, str]], bool], float]) -> Rate:
    """Independent culprits: a session fails when any active one hits it."""
    def rate(lv: Mapping[str, str]) -> float:
        clean = 1.0
        for active, p in shares:
            clean *= 1.0 - p if active(lv) else 1.0
        return 1.0 - clean
    return rate


def _issue_13_scenarios() -> list[Scenario]:
    """The classes of issue 13, with the luck that defeats a single trial: at 5% a trial of 80
    sessions sees none 1.6% of the time, so a scan of a dozen flips meets such a PASS often."""
    f5, g5, b5 = _two_level(5)
    f4, g4, b4 = _two_level(4)
    two = _either((lambda lv: lv["f0"] == "b", 0.05),
                  (lambda lv: lv["f2"] == "b" and lv["f3"] == "b", 0.05))

    def wedge(lv: Mapping[str, str]) -> float:
        return 0.20 if lv["f3"] == "b" else 0.0

    def leak(lv: Mapping[str, str]) -> float:
        return 0.10 if lv["f1"] == "b" else 0.0

    def lost(lv: Mapping[str, str]) -> float:
        return 0.08 if lv["f0"] == "b" and lv["f2"] == "b" else 0.0

    return [
        Scenario("two culprits at 5%: f0, and f2 x f3 (5 factors)", f5, g5, b5, two,
                 [{"f0": "b"}, {"f2": "b", "f3": "b"}]),
        # the default target (corruption): the campaign must see the wedge by itself
        Scenario("wedge-only, default target: f3 hangs 20%", f4, g4, b4, wedge, [{"f3": "b"}],
                 mix=lambda lv: {Outcome.TIMEOUT: wedge(lv)}, wedges=[{"f3": "b"}]),
        Scenario("wedge f3 20% and leak f1 10%", f4, g4, b4,
                 lambda lv: wedge(lv) + leak(lv), [{"f1": "b"}, {"f3": "b"}],
                 mix=lambda lv: {Outcome.TIMEOUT: wedge(lv), Outcome.LEAK: leak(lv)},
                 wedges=[{"f3": "b"}]),
        Scenario("lost-plot only: f0 x f2 at 8%", f4, g4, b4, lost,
                 [{"f0": "b", "f2": "b"}], mix=lambda lv: {Outcome.LOST_PLOT: lost(lv)}),
    ]


def scenarios() -> list[Scenario]:
    f4, g4, b4 = _two_level(4)
    f8, g8, b8 = _two_level(8)
    return [
        _seed_scenario(),
        _fault_model_scenario(),
        Scenario("single factor, 6%", f4, g4, b4,
                 lambda lv: 0.06 if lv["f2"] == "b" else 0.0, [{"f2": "b"}]),
        Scenario("no culprit (0.3% noise, as the demo's twins)", f4, g4, b4,
                 lambda lv: 0.003, []),
        Scenario("8 factors, one 2-way at 15%", f8, g8, b8,
                 lambda lv: 0.15 if lv["f2"] == "b" and lv["f5"] == "b" else 0.0,
                 [{"f2": "b", "f5": "b"}]),
        Scenario("3-way interaction at 15%", f8, g8, b8,
                 lambda lv: 0.15 if all(lv[f] == "b" for f in ("f0", "f4", "f7")) else 0.0,
                 [{"f0": "b", "f4": "b", "f7": "b"}]),
        Scenario("1% noise + 6% 2-way (4 factors)", f4, g4, b4,
                 lambda lv: 0.01 + (0.06 if lv["f1"] == "b" and lv["f3"] == "b" else 0.0),
                 [{"f1": "b", "f3": "b"}]),
        # The investigation's worst variant hung 75 of 80 sessions; a milder wedge here.
        Scenario("wedge-only: f3 hangs 20%", f4, g4, b4,
                 lambda lv: 0.20 if lv["f3"] == "b" else 0.0, [{"f3": "b"}], target="wedging"),
        *_issue_13_scenarios(),
    ]
