"""Strategy benchmark: correct verdicts, false accusations and real-world cost, per scenario.

Each scenario plants culprits among factors with per-session corruption rates; a simulated pool
draws every session of every trial from those rates (80 sessions per trial). Every strategy runs
to its own end on the same seeds, beside two baselines (full factorial with fixed repeats, and
one-factor-at-a-time from known-bad) and an oracle that tests only the culprit and its
neighbours. Cost is reported as `gpu_s_equivalent` with the real-world durations of the seed
investigation (90 s restart + 485 s workload, 16 GPUs per pool).

    .venv/bin/python bench/strategies.py [--seeds 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.evidence import TrialEvidence
from orchestrator.stats.exact import fisher_greater
from orchestrator.strategies.adaptive import Adaptive, Outcome
from orchestrator.strategies.factorial import Factorial
from orchestrator.verdict import CostModel, Status, decide

SESSIONS = 80
ALPHA = 0.01
COST = CostModel(restart_s=90, workload_s=485, gpus=16)
Levels = dict[str, str]
Rate = Callable[[Mapping[str, str]], float]


@dataclass(frozen=True)
class Scenario:
    name: str
    factors: dict[str, list[str]]
    good: Levels
    bad: Levels
    rate: Rate
    culprits: list[Levels]  # the planted truth; [] when nothing is to blame
    fault_model: bool = False  # sessions drawn by the twin's fault model instead of ``rate``

    def pool(self, seed: int) -> Pool:
        return FaultModelPool(seed) if self.fault_model else Pool(self.rate, seed)


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


def scenarios() -> list[Scenario]:
    f4, g4, b4 = _two_level(4)
    f8, g8, b8 = _two_level(8)
    return [
        _seed_scenario(),
        _fault_model_scenario(),
        Scenario("single factor, 6%", f4, g4, b4,
                 lambda lv: 0.06 if lv["f2"] == "b" else 0.0, [{"f2": "b"}]),
        Scenario("no culprit", f4, g4, b4, lambda lv: 0.0, []),
        Scenario("8 factors, one 2-way at 15%", f8, g8, b8,
                 lambda lv: 0.15 if lv["f2"] == "b" and lv["f5"] == "b" else 0.0,
                 [{"f2": "b", "f5": "b"}]),
        Scenario("3-way interaction at 15%", f8, g8, b8,
                 lambda lv: 0.15 if all(lv[f] == "b" for f in ("f0", "f4", "f7")) else 0.0,
                 [{"f0": "b", "f4": "b", "f7": "b"}]),
        Scenario("1% noise + 6% 2-way (4 factors)", f4, g4, b4,
                 lambda lv: 0.01 + (0.06 if lv["f1"] == "b" and lv["f3"] == "b" else 0.0),
                 [{"f1": "b", "f3": "b"}]),
    ]


class Pool:
    """Draws sessions from the scenario's rates; counts trials."""

    def __init__(self, rate: Rate, seed: int) -> None:
        self.rate, self.rng, self.trials = rate, random.Random(seed), 0

    def trial(self, levels: Levels) -> TrialEvidence:
        self.trials += 1
        corrupt = sum(self.rng.random() < self.rate(levels) for _ in range(SESSIONS))
        return TrialEvidence(dict(levels), {"ok": SESSIONS - corrupt, "leak": corrupt},
                             restarts=1)


class FaultModelPool(Pool):
    """Every session drawn by the twin's own fault model (experiments/twin/simulate.py) from the
    flags and env the demo campaign renders for the variant: what a real twin would return
    (tests/test_simulate.py checks it session by session against a twin over HTTP)."""

    def __init__(self, seed: int) -> None:
        from experiments.twin.faults import FaultModel
        from orchestrator.demo import DEMO_FACTORS, FAULT_MODEL

        super().__init__(lambda levels: 0.0, seed)  # the rate is unused: the model decides
        self.model = FaultModel.model_validate(FAULT_MODEL)
        self.factors = DEMO_FACTORS
        self.seed = seed

    def trial(self, levels: Levels) -> TrialEvidence:
        from experiments.twin.simulate import server_view, trial_counts

        self.trials += 1
        flags: list[str] = []
        env: dict[str, str] = {}
        for factor in self.factors:
            level = factor["levels"][levels[factor["name"]]] or {}
            flags += level.get("flags", [])
            env.update(level.get("env", {}))
        counts = trial_counts(self.model, server_view(flags, env), sessions=SESSIONS,
                              seed=self.seed * 1_000_003 + self.trials)
        return TrialEvidence(dict(levels), counts, restarts=1)


def run_adaptive(s: Scenario, pool: Pool) -> list[Levels] | None:
    strategy = Adaptive(s.factors, s.good, s.bad, alpha=ALPHA)
    evidence: list[TrialEvidence] = []
    while proposals := strategy.propose(evidence, []):
        evidence.extend(pool.trial(levels) for levels in proposals)
    replay = strategy.replay(evidence)
    if replay.outcome is Outcome.CULPRIT:
        return [dict(c) for c in replay.culprits]
    return [] if replay.outcome is Outcome.NOT_REPRODUCED else None


def run_factorial(s: Scenario, pool: Pool, repeats: int = 2) -> list[Levels] | None:
    evidence = [pool.trial(levels) for levels in Factorial(s.factors, repeats).plan]
    verdict = decide(evidence, s.factors, alpha=ALPHA, clean_rate=0.02, cost=COST,
                     known_bad=s.bad)
    if verdict.status is Status.CULPRIT:
        return [dict(c.factors) for c in verdict.culprits]
    return [] if verdict.status in (Status.NO_CULPRIT, Status.NOT_REPRODUCED) else None


def _flip(levels: Levels, factor: str, s: Scenario) -> Levels:
    other = s.good[factor] if s.good[factor] != levels[factor] else next(
        lvl for lvl in s.factors[factor] if lvl != levels[factor])
    return {**levels, factor: other}


def run_one_at_a_time(s: Scenario, pool: Pool, trials: int = 2) -> list[Levels] | None:
    """Flip each factor of known-bad alone; blame those whose flip clears the corruption."""
    def counts(levels: Levels) -> tuple[int, int]:
        runs = [pool.trial(levels) for _ in range(trials)]
        return sum(t.corrupted for t in runs), sum(t.judged for t in runs)

    bad, good = counts(s.bad), counts(s.good)
    if fisher_greater(*bad, *good) > ALPHA:
        return []
    blamed = {f: s.bad[f] for f in s.factors
              if fisher_greater(*bad, *counts(_flip(s.bad, f, s))) <= ALPHA}
    return [blamed] if blamed else None


def run_oracle(s: Scenario, pool: Pool) -> list[Levels] | None:
    """Knows the answer: reproduces, then tests only each culprit's neighbours, sequentially."""
    strategy = Adaptive(s.factors, s.good, s.bad, alpha=ALPHA)
    good: list[TrialEvidence] = []
    bad: list[TrialEvidence] = []
    for _ in range(2):
        good.append(pool.trial(s.good))
        bad.append(pool.trial(s.bad))
    def pair(ts: Sequence[TrialEvidence]) -> tuple[int, int]:
        return sum(t.corrupted for t in ts), sum(t.judged for t in ts)
    if fisher_greater(*pair(bad), *pair(good)) > ALPHA:
        return []
    from orchestrator.stats.compare import Answer, judge
    for culprit in s.culprits:
        for factor in culprit:
            neighbour = _flip(s.bad, factor, s)
            runs: list[TrialEvidence] = []
            while len(runs) < strategy.max_trials_per_variant:
                runs.append(pool.trial(neighbour))
                if judge(pair(runs), pair(good), pair(bad), ALPHA).answer is not Answer.UNKNOWN:
                    break
    return s.culprits


STRATEGIES: dict[str, Callable[[Scenario, Pool], list[Levels] | None]] = {
    "adaptive": run_adaptive,
    "factorial x2 (baseline)": run_factorial,
    "one-at-a-time x2 (baseline)": run_one_at_a_time,
    "oracle": run_oracle,
}


def _key(culprits: list[Levels]) -> list[tuple[tuple[str, str], ...]]:
    return sorted(tuple(sorted(c.items())) for c in culprits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    started = time.monotonic()
    for scenario in scenarios():
        truth = _key(scenario.culprits)
        planted = {(f, lvl) for c in scenario.culprits for f, lvl in c.items()}
        for name, run in STRATEGIES.items():
            correct = accused = 0
            costs = []
            for seed in range(args.seeds):
                pool = scenario.pool(seed)
                found = run(scenario, pool)
                correct += found is not None and _key(found) == truth
                accused += found is not None and any(
                    (f, lvl) not in planted for c in found for f, lvl in c.items())
                costs.append(pool.trials * (COST.restart_s + COST.workload_s) * COST.gpus)
            rows.append({"scenario": scenario.name, "strategy": name,
                         "correct": correct / args.seeds, "false_accusation": accused / args.seeds,
                         "median_trials": statistics.median(c / 575 / 16 for c in costs),
                         "median_gpu_s": statistics.median(costs)})
            print(f"{scenario.name:34} {name:28} correct {rows[-1]['correct']:5.0%}  "
                  f"false {rows[-1]['false_accusation']:4.0%}  trials "
                  f"{rows[-1]['median_trials']:5.1f}  GPU-s {rows[-1]['median_gpu_s']:9.0f}",
                  flush=True)
    print(f"({args.seeds} seeds per cell, {time.monotonic() - started:.0f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
