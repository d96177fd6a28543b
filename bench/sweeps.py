"""Sweep benchmark: how often a regression sweep alerts on nothing, finds a regression, and what
it costs (issue 16), against a naive sweep on the same draws.

This module is the command: it runs the scenarios (bench/sweep_runs.py) and turns the runs into
figures per scenario and case (``summary``, with exact 95% intervals), the Markdown table of
BENCHMARKS.md (``table``) and the issue's targets (``targets``). The simulated trials, the
scenarios, the replay and the baseline run are bench/sweep_world.py's; the naive sweep is
bench/sweep_naive.py's.

A sweep of 3 variants (production and 2 risky neighbours), 80 sessions a trial, the defaults of
``SweepConfig`` and ``Thresholds`` (the table's heading says them), on simulated trials with
the noise between trials of ``--trial-noise`` (``real``, the default, or ``iid``: as before
issue 27). Each run simulates the sweep's baseline run, then replays ``SweepStrategy`` on the
current run; ``conclude`` gives the exit code (0 clean, 1 regression, 3 inconclusive).

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
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from scipy.stats import beta

from bench.noise import NOISES
from bench.sweep_naive import NAIVE_TRIALS
from bench.sweep_runs import RunResult, sweep_runs
from bench.sweep_world import COST, SCENARIOS, VARIANTS, Rates, Scenario
from experiments.strategy_config import SweepConfig, Thresholds

TRIAL_GPU_H = (COST.restart_s + COST.workload_s) * COST.gpus / 3600


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
