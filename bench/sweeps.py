"""Sweep benchmark: how often a regression sweep alerts on nothing, finds a regression, and what
it costs (issue 16), against a naive sweep on the same draws.

A sweep of 3 variants (production and 2 risky neighbours), 80 sessions a trial, the defaults of
``SweepConfig`` and ``Thresholds`` (the table's heading says them). Each simulated trial draws
its sessions (1% corruption, 1% wedging: errors and timeouts) and two per-trial figures with
lognormal noise (output throughput, p99 e2e latency; sd of the log 4%). With ``--trial-noise
real`` (the default; ``iid``: as before issue 27) each trial also draws the noise between trials
(bench/noise.py): a restart's multiplier of both rates and of the speed (throughput times it,
p99 divided by it), the pool's offsets (a sweep watches one deployment: one pool, drawn
once per run) and a drift over simulated time, each trial 575 s on the pool's clock and
``RUN_GAP_S`` (a day) between the baseline run and the current one. The baseline run is
simulated too: the first run of the sweep (no baseline, so ``min_trials`` trials per variant),
whose trials become ``BaselineTrial`` entries as orchestrator/sweeps/baseline.py copies them.
Then ``SweepStrategy`` is replayed on the current run: propose, simulate those trials on the
sweep's one pool in the order proposed, until it proposes nothing; ``conclude`` gives the exit
code (0 clean, 1 regression, 3 inconclusive).

Each run is replayed twice: the source tree's commit *not moved* (nothing can be put back:
session counts are compared with the baseline run's trials, performance is shown, uncontrolled)
and *moved* (``confirm_build``: every trial beside a fresh trial of the baseline's build, which
runs at the clean rates, alternated).

The naive sweep is what one writes by hand: the first 2 trials of each variant of the same run
against the first 2 of the same baseline run, a one-sided Fisher test at 0.05 per binary metric
and Welch's t at 0.05 per continuous one, no minimum effect, no confirmation. Cost: trials x
(restart_s + workload_s) x gpus at the ``Cost`` defaults (90 s, 485 s, 8 GPUs: 1.28 GPU-h a
trial), the current run's trials only (the baseline run is paid once per accepted baseline).

    .venv/bin/python -m bench.sweeps [--runs 1000] [--seed 1] [--workers 2] [--json FILE]
        [--sigma 0.04] [--drift 0] [--trial-noise real|iid]
        [--thresholds corruption=0.05,...] [--trials MIN,MAX,CONFIRM] [--baseline-trials N]
        [--scenarios 'clean;corruption 1% -> 6%']

The last line measures other settings than the defaults; the heading of the output names them.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from scipy.special import stdtr
from scipy.stats import beta

from bench.noise import IID, NOISES, Draw, Fleet, TrialNoise, scaled
from bench.sweep_fast import fast_comparisons
from experiments.campaign import Cost
from experiments.strategy_config import BaselineTrial, NamedVariant, SweepConfig, Thresholds
from orchestrator.core.evidence import Latency, Performance, TrialEvidence, variant_key
from orchestrator.core.stats.exact import fisher_greater
from orchestrator.core.stats.regression import Difference
from orchestrator.core.strategies.base import Status
from orchestrator.core.strategies.sweep import BUILD, SweepStrategy, of_trial

FACTOR = "config"
VARIANTS = tuple(NamedVariant(name=name, levels={FACTOR: name})
                 for name in ("production", "risky-1", "risky-2"))
SESSIONS = 80
COST = Cost()
TRIAL_GPU_H = (COST.restart_s + COST.workload_s) * COST.gpus / 3600
NAIVE_ALPHA = 0.05
NAIVE_TRIALS = 2
EXIT = {Status.NO_CULPRIT: "clean", Status.CULPRIT: "regression",
        Status.INCONCLUSIVE: "inconclusive"}
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


@dataclass(frozen=True)
class RunResult:
    scenario: str
    moved: bool  # confirm_build: a suspect confirmed against fresh trials of the baseline build
    index: int
    status: str  # clean | regression | inconclusive
    alerts: tuple[tuple[str, str], ...]  # (variant, metric) confirmed as regressions
    undecided: tuple[tuple[str, str], ...]  # UNKNOWN comparisons of variants left inconclusive
    trials: int  # of the current run, confirmation trials of both builds included
    suspected: bool  # some variant was a suspect (the replays of both cases differ)
    naive: tuple[tuple[str, str], ...] = ()  # what the naive sweep alerted on
    rise: float | None = None  # the planted corruption's rise as the pool stood (Machine.rise)


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


def naive(plan: SweepConfig, done: Sequence[TrialEvidence], baseline: Sequence[BaselineTrial]
          ) -> tuple[tuple[str, str], ...]:
    """The naive sweep on the first ``NAIVE_TRIALS`` trials of each variant of the run and of
    its baseline run."""
    alerts = []
    for variant in plan.variants:
        mine = [of_trial(t) for t in done if t.levels[FACTOR] == variant.name
                and t.levels.get(BUILD) != "baseline"][:NAIVE_TRIALS]
        then = [b for b in baseline if b.variant == variant.name][:NAIVE_TRIALS]
        for metric, wedge in (("corruption", False), ("wedging", True)):
            k1, n1 = _binary([s.counts for s in mine], wedge)
            k2, n2 = _binary([b.counts for b in then], wedge)
            if fisher_greater(k1, n1, k2, n2) <= NAIVE_ALPHA:
                alerts.append((variant.name, metric))
        for metric in ("throughput", "p99_latency"):
            now = [s.output_throughput if metric == "throughput" else s.p99_e2e_ms for s in mine]
            base = [b.output_throughput if metric == "throughput" else b.p99_e2e_ms for b in then]
            if welch_p(now, base, lower_is_worse=metric == "throughput") <= NAIVE_ALPHA:
                alerts.append((variant.name, metric))
    return tuple(alerts)


def welch_p(current: Sequence[float | None], baseline: Sequence[float | None],
            lower_is_worse: bool) -> float:
    """One-sided p of Welch's t on the raw values, towards worse (scipy's ttest_ind, less its
    overhead)."""
    a = np.asarray(current, dtype=float)
    b = np.asarray(baseline, dtype=float)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    if va + vb == 0:
        return 1.0
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    t = (a.mean() - b.mean()) / math.sqrt(va + vb)
    return float(stdtr(df, t if lower_is_worse else -t))


def _binary(counts: Sequence[Any], wedge: bool) -> tuple[int, int]:
    infra = sum(c.get("timeout", 0) + c.get("error", 0) for c in counts)
    total = sum(sum(c.values()) for c in counts)
    return (infra, total) if wedge else (sum(c.get("leak", 0) for c in counts), total - infra)


def run_case(plan: SweepConfig, clean: Rates, scenario: Scenario, seed: int, index: int,
             moved: bool, baseline_trials: int | None = None) -> RunResult:
    """One run: its baseline run and the current run drawn from ``[seed, index]``."""
    machine = Machine(np.random.default_rng([seed, index]), clean, scenario)
    baseline = baseline_run(plan, machine, baseline_trials)
    strategy = SweepStrategy(plan.model_copy(update={"baseline": baseline, "baseline_run": 1,
                                                     "confirm_build": moved}))
    done = replay(strategy, machine)
    conclusion = strategy.conclude(done, [])
    judged = strategy.judged(done)
    alerts = tuple((j.variant.name, metric) for j in judged for metric in j.regressed)
    undecided = tuple((j.variant.name, c.metric) for j in judged if j.state == "inconclusive"
                      for c in (j.confirmation or j.comparisons) if c.answer == Difference.UNKNOWN)
    return RunResult(scenario.name, moved, index, EXIT[conclusion.status], alerts, undecided,
                     len(done), any(j.suspected for j in judged), naive(plan, done, baseline),
                     machine.rise())


@dataclass(frozen=True)
class Job:
    plan: SweepConfig
    clean: Rates
    scenario: Scenario
    seed: int
    indices: range
    baseline_trials: int | None = None


def run_job(job: Job) -> list[RunResult]:
    """Both cases of each run of ``job`` (with the build moved, every trial has a control)."""
    with fast_comparisons():
        return [run_case(job.plan, job.clean, job.scenario, job.seed, index, moved,
                         job.baseline_trials)
                for index in job.indices for moved in (False, True)]


def sweep_runs(plan: SweepConfig, clean: Rates, runs: int, seed: int, workers: int = 1,
               baseline_trials: int | None = None,
               scenarios: Sequence[Scenario] = SCENARIOS) -> list[RunResult]:
    chunk = max(1, runs // max(1, 4 * workers))
    jobs = [Job(plan, clean, s, seed, range(start, min(runs, start + chunk)), baseline_trials)
            for s in scenarios for start in range(0, runs, chunk)]
    if workers <= 1:
        return [r for job in jobs for r in run_job(job)]
    with ProcessPoolExecutor(workers) as executor:
        return [r for batch in executor.map(run_job, jobs) for r in batch]


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval of a binomial rate."""
    tail = (1 - confidence) / 2
    low = float(beta.ppf(tail, k, n - k + 1)) if k else 0.0
    high = float(beta.ppf(1 - tail, k + 1, n - k)) if k < n else 1.0
    return low, high


def share(k: int, n: int) -> dict[str, Any]:
    return {"k": k, "n": n, "rate": k / n if n else None, "cp95": list(clopper_pearson(k, n))}


def summary(results: Sequence[RunResult], scenarios: Sequence[Scenario] = SCENARIOS,
            threshold: float | None = None) -> list[dict[str, Any]]:
    """Per scenario and case, and the naive sweep per scenario. ``threshold``: of corruption;
    ``due`` counts the runs whose planted corruption rose by at least it as the pool stood
    (the runs a sweep must catch: a day's drift may shrink a planted rise below it)."""
    rows = []
    for scenario in scenarios:
        planted = (scenario.variant, scenario.metric)
        mine = [r for r in results if r.scenario == scenario.name]
        for moved in (False, True):
            group = [r for r in mine if r.moved == moved]
            n, trials = len(group), [r.trials for r in group]
            undecided = [r for r in group if r.status == "inconclusive"]
            due = [r for r in group if threshold is not None and r.rise is not None
                   and r.rise >= threshold]
            rows.append({
                "sweep": "sweep strategy", "scenario": scenario.name, "moved": moved, "runs": n,
                "alert": share(sum(r.status == "regression" for r in group), n),
                "detected": share(sum(planted in r.alerts for r in group), n),
                "due": share(sum(planted in r.alerts for r in due), len(due)),
                "wrong": share(sum(any(a != planted for a in r.alerts) for r in group), n),
                "clean": share(sum(r.status == "clean" for r in group), n),
                "inconclusive": share(len(undecided), n),
                "undecided_by_metric": {m: sum(any(u[1] == m for u in r.undecided)
                                               for r in undecided)
                                        for m in ("corruption", "wedging", "throughput",
                                                  "p99_latency")},
                "trials_median": statistics.median(trials) if trials else None,
                "trials_mean": statistics.fmean(trials) if trials else None,
                "gpu_h_mean": statistics.fmean(trials) * TRIAL_GPU_H if trials else None})
        group = [r for r in mine if not r.moved]
        n = len(group)
        rows.append({
            "sweep": "naive", "scenario": scenario.name, "moved": None, "runs": n,
            "alert": share(sum(bool(r.naive) for r in group), n),
            "detected": share(sum(planted in r.naive for r in group), n),
            "wrong": share(sum(any(a != planted for a in r.naive) for r in group), n),
            "clean": share(sum(not r.naive for r in group), n), "inconclusive": share(0, n),
            "trials_median": NAIVE_TRIALS * len(VARIANTS),
            "trials_mean": NAIVE_TRIALS * len(VARIANTS),
            "gpu_h_mean": NAIVE_TRIALS * len(VARIANTS) * TRIAL_GPU_H})
    return rows


def _pct(figure: dict[str, Any]) -> str:
    low, high = figure["cp95"]
    return f"{figure['rate']:.2%} ({figure['k']}/{figure['n']}; {low:.2%}–{high:.2%})"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The Markdown table of BENCHMARKS.md."""
    head = ["sweep", "scenario", "runs", "alert (exit 1)", "the planted regression found",
            "found where its rise reached the threshold", "clean (exit 0)",
            "inconclusive (exit 3)", "trials per run, median / mean", "GPU-h per run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        name = row["sweep"] if row["moved"] is None else \
            f"{row['sweep']}, build {'moved' if row['moved'] else 'not moved'}"
        found = "–" if row["scenario"] == "clean" else _pct(row["detected"])
        due = _pct(row["due"]) if (row.get("due") or {}).get("n") else "–"
        lines.append("| " + " | ".join([
            name, row["scenario"], str(row["runs"]), _pct(row["alert"]), found, due,
            _pct(row["clean"]), _pct(row["inconclusive"]),
            f"{row['trials_median']:g} / {row['trials_mean']:.2f}",
            f"{row['gpu_h_mean']:.1f}"]) + " |")
    return "\n".join(lines)


FALSE_ALERTS = 1 / 200  # the targets: at most 1 clean run in 200 alerts,
DETECTED = 0.95  # and at least 95% of runs find a planted regression


def targets(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Each sweep-strategy row against the issue's targets: met where the whole 95%
    Clopper-Pearson interval is on the right side, estimated where only the rate is."""
    lines = []
    for row in rows:
        if row["sweep"] == "naive":
            continue
        case = f"{row['scenario']}, build {'moved' if row['moved'] else 'not moved'}"
        clean = row["scenario"] == "clean"
        due = row.get("due") or {"n": 0}
        figure = row["alert"] if clean else due if due["n"] else row["detected"]
        low, high = figure["cp95"]
        if clean:
            said = "met" if high <= FALSE_ALERTS else \
                "estimated only" if figure["rate"] <= FALSE_ALERTS else "missed"
            lines.append(f"{case}: false alerts {figure['k']}/{figure['n']} "
                         f"(95% up to {high:.2%}; target <= {FALSE_ALERTS:.1%}): {said}")
        else:
            said = "met" if low >= DETECTED else \
                "estimated only" if figure["rate"] >= DETECTED else "missed"
            where = f" of the {figure['n']} runs whose rise reached the threshold" \
                if due["n"] else ""
            lines.append(f"{case}: found {figure['rate']:.2%}{where} (95% from {low:.2%}; "
                         f"target >= {DETECTED:.0%}): {said}")
    return lines


def _thresholds(text: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for item in filter(None, text.split(",")):
        metric, _, value = item.partition("=")
        out[metric.strip()] = None if value.strip() in ("", "none") else float(value)
    return out


def plan_of(thresholds: dict[str, float | None] | None = None, **fields: Any) -> SweepConfig:
    """The sweep's plan: the defaults of ``SweepConfig`` unless told otherwise."""
    return SweepConfig(variants=list(VARIANTS), production="production",
                       thresholds=Thresholds(**(thresholds or {})), **fields)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs per scenario")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", default=None)
    parser.add_argument("--sigma", type=float, default=Rates.sigma_throughput,
                        help="trial-to-trial noise of throughput and p99 (sd of the log)")
    parser.add_argument("--drift", type=float, default=0.0,
                        help="a shift of throughput and p99 shared by a run's trials (sd of "
                             "the log), drawn per run: the baseline run and this one differ")
    parser.add_argument("--trial-noise", choices=list(NOISES), default="real",
                        help="noise between trials (bench/noise.py) of rates and speed: real "
                             "(default) or iid")
    parser.add_argument("--thresholds", default="",
                        help="e.g. corruption=0.03,wedging=0.03 (else the defaults)")
    parser.add_argument("--trials", default="",
                        help="MIN,MAX,CONFIRM trials per variant (else the defaults)")
    parser.add_argument("--baseline-trials", type=int, default=None,
                        help="trials per variant of the baseline run (else trials.max, as "
                             "`bisect sweep --accept` runs it)")
    parser.add_argument("--scenarios", default="",
                        help="the scenarios to run, by name, separated by ';' (else all)")
    args = parser.parse_args(argv)
    scenarios = [sc for sc in SCENARIOS if not args.scenarios
                 or sc.name in args.scenarios.split(";")]
    if not scenarios:
        parser.error(f"--scenarios: none of {args.scenarios!r}; the scenarios are: "
                     + "; ".join(sc.name for sc in SCENARIOS))
    try:
        trials = [int(n) for n in args.trials.split(",")] if args.trials else []
        plan = plan_of(_thresholds(args.thresholds), **dict(zip(
            ("min_trials", "max_trials", "confirm_trials"), trials, strict=False)))
    except (ValueError, TypeError) as exc:
        parser.error(f"--thresholds: {exc}")
    clean = Rates(sigma_throughput=args.sigma, sigma_p99=args.sigma, drift=args.drift,
                  noise=NOISES[args.trial_noise])
    started = time.monotonic()
    results = sweep_runs(plan, clean, args.runs, args.seed, args.workers, args.baseline_trials,
                         scenarios)
    rows = summary(results, scenarios, plan.thresholds.corruption)
    said = [f"thresholds {plan.thresholds.model_dump()}", f"alpha {plan.alpha}",
            f"trials {plan.min_trials}-{plan.max_trials}, confirm {plan.confirm_trials}",
            f"noise sd {args.sigma:g}", *([f"drift sd {args.drift:g}"] if args.drift else []),
            clean.noise.describe(),
            f"baseline {args.baseline_trials or plan.max_trials} trials per variant"]
    print(f"({args.runs} runs per scenario, seed {args.seed}; {'; '.join(said)}; "
          f"{time.monotonic() - started:.0f} s)\n")
    print(table(rows))
    print("\n" + "\n".join(targets(rows)))
    for row in rows:
        if row["sweep"] != "naive" and row["inconclusive"]["k"]:
            by = ", ".join(f"{m} {n}" for m, n in row["undecided_by_metric"].items())
            print(f"\n{row['scenario']}, build {'moved' if row['moved'] else 'not moved'}: "
                  f"inconclusive runs with an UNKNOWN metric: {by}", end="")
    print()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"settings": said, "rows": rows,
                       "runs": [asdict(r) for r in results]}, out, indent=2)


if __name__ == "__main__":
    main()
