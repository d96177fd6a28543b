"""The optimize benchmark's figures (bench/optimize.py): the searches' runs as tables and
verdicts.

It owns the per-search table of GPU-time to reach the right answer (``rows``, with the full
grid's cost computed from an oracle-stopped grid run: ``full_grid``), each search's GPU-time
against each grid's (``ratios``) and against the target (``verdicts``), the final answers
against production with their Clopper-Pearson intervals (``against_production``, ``Share``,
``better_verdict``), and the Markdown of both tables (``render``, ``render_against``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scipy.stats import binomtest

from bench.knob_space import BEST, GPUS, RESTART_S, WORKLOAD_S, knob_campaign, throughput
from bench.optimize_runs import CLAIMS, GRID, NEAR, PRODUCTIONS, Run, Settings
from orchestrator.core.strategies.optimize import Optimize
from orchestrator.core.strategies.registry import strategy_for

TARGET = 1 / 3  # of the grid's GPU-time at the same answer (issue 17)
TRIAL_GPU_S = (RESTART_S + WORKLOAD_S) * GPUS
BETTER_TARGET = 0.95  # of the answers said better than production, truly faster (issue 27)


def median(values: Sequence[float | None]) -> float | None:
    """None (never reached) counts as infinite; None when most never reached."""
    m = statistics.median([math.inf if v is None else v for v in values]) if values else None
    return None if m is None or math.isinf(m) else m


def full_budget() -> int:
    """The search trials of ``sampler: grid`` over the whole space (the strategy's budget)."""
    strategy = strategy_for(knob_campaign(Settings().strategy("grid", 0, 10_000)))
    assert isinstance(strategy, Optimize)
    return strategy.budget


def full_grid(run: Run) -> float:
    """GPU-s of ``sampler: grid`` over the whole space, from an oracle-stopped grid run."""
    per_trial = run.search_gpu_s / run.budget
    return per_trial * full_budget() + (run.gpu_s - run.search_gpu_s)


def rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    table = []
    for search in dict.fromkeys(r.search for r in runs):
        mine = [r for r in runs if r.search == search]
        table.append({
            "search": search, "seeds": len(mine),
            "reached": sum(r.reached is not None for r in mine),
            "trials_reach": median([r.reached for r in mine]),
            "gpu_h_reach": _hours(median([r.gpu_s_reach for r in mine])),
            "trials": statistics.median(r.trials for r in mine),
            "gpu_h": _hours(median([r.gpu_s for r in mine])),
            "final_true_min": min((r.best_true or 0.0) for r in mine),
            "final_true_median": statistics.median((r.best_true or 0.0) for r in mine),
            "final_right": sum(r.right for r in mine),
            "unsafe_best": sum(r.unsafe_best for r in mine),
            "wall_s": round(sum(r.wall_s for r in mine), 1)})
    grids = [r for r in runs if r.search == "grid, oracle-stopped"]
    if grids:
        full = [full_grid(r) for r in grids]
        table.append({
            "search": "grid, full (computed)", "seeds": len(grids), "reached": len(grids),
            "trials_reach": None, "gpu_h_reach": _hours(statistics.median(full)),
            "trials": full_budget() + statistics.median(r.trials - r.budget for r in grids),
            "gpu_h": _hours(statistics.median(full)), "final_true_min": None,
            "final_true_median": None, "final_right": None, "unsafe_best": None,
            "wall_s": None})
    return table


@dataclass(frozen=True)
class Share:
    """``k`` of ``n`` runs, with the share's two-sided 95% Clopper-Pearson interval."""

    k: int
    n: int

    @property
    def interval(self) -> tuple[float, float] | None:
        if not self.n:
            return None
        ci = binomtest(self.k, self.n).proportion_ci(0.95, method="exact")
        return float(ci.low), float(ci.high)

    def to_json(self) -> dict[str, Any]:
        interval = self.interval
        return {"k": self.k, "n": self.n, "share": self.k / self.n if self.n else None,
                "ci": None if interval is None else list(interval)}

    def __str__(self) -> str:
        interval = self.interval
        if interval is None:
            return "-"
        return (f"{self.k}/{self.n} ({self.k / self.n:.1%}; "
                f"{interval[0]:.1%}-{interval[1]:.1%})")


def against_production(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Each search's final answers against production, then all runs': how often each claim
    was made, and how often it was true (``Share`` as JSON)."""
    groups = {search: [r for r in runs if r.search == search]
              for search in dict.fromkeys(r.search for r in runs)}
    table = []
    for search, mine in [*groups.items(), ("all", list(runs))]:
        better = [r for r in mine if r.claim == "better"]
        worse = [r for r in mine if r.claim == "no better"]
        table.append({
            "search": search, "runs": len(mine),
            "claims": {c: sum(r.claim == c for r in mine) for c in CLAIMS},
            "better_truly_faster": Share(sum(bool(r.truly_faster) for r in better),
                                         len(better)).to_json(),
            "better_truly_safe": Share(sum(bool(r.truly_safe) for r in better),
                                       len(better)).to_json(),
            "no_better_untested": sum(not r.tested for r in worse),
            "no_better_right": Share(sum(not r.truly_faster for r in worse),
                                     len(worse)).to_json(),
            "production_trials": statistics.median(r.production_trials for r in mine)})
    return table


def _share(cell: dict[str, Any]) -> Share:
    return Share(cell["k"], cell["n"])


def better_verdict(table: Sequence[dict[str, Any]]) -> str:
    """All runs' answers said better than production, against the target."""
    total = _share(table[-1]["better_truly_faster"])
    interval = total.interval
    if interval is None:
        return (f"said better than production: no run (target >= {BETTER_TARGET:.0%} truly "
                "faster: not measurable)")
    if interval[0] >= BETTER_TARGET:
        reading = "met (the interval's lower end above it)"
    elif interval[1] < BETTER_TARGET:
        reading = "missed (the interval's upper end below it)"
    else:
        side = "at or above" if total.k / total.n >= BETTER_TARGET else "below"
        reading = f"the share {side} it, the interval across it"
    return (f"said better than production, truly faster: {total} "
            f"(target >= {BETTER_TARGET:.0%}): {reading}")


def render_against(table: Sequence[dict[str, Any]]) -> str:
    out = ["| search | runs | said better | truly faster (95% CI) | truly safe (95% CI) | "
           "said no better (untested) | no better, right (95% CI) | production best | "
           "production not measured | nothing named | production trials (median) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        claims = row["claims"]
        out.append(
            f"| {row['search']} | {row['runs']} | {claims['better']} | "
            f"{_share(row['better_truly_faster'])} | {_share(row['better_truly_safe'])} | "
            f"{claims['no better']} ({row['no_better_untested']}) | "
            f"{_share(row['no_better_right'])} | {claims['production best']} | "
            f"{claims['production not measured']} | {claims['nothing named']} | "
            f"{_cell(float(row['production_trials']), 1)} |")
    return "\n".join(out)


def _hours(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 3600, 2)


def ratios(table: Sequence[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each search's median GPU-time to reach against each grid's."""
    by = {row["search"]: row["gpu_h_reach"] for row in table}
    result: dict[str, dict[str, float | None]] = {}
    for grid in ("grid, oracle-stopped", "grid, full (computed)"):
        if by.get(grid):
            result[grid] = {s: None if h is None else round(h / by[grid], 3)
                            for s, h in by.items() if not s.startswith("grid")}
    return result


def verdicts(table: Sequence[dict[str, Any]], ratio: dict[str, dict[str, float | None]]
             ) -> list[str]:
    lines = []
    for grid, against in ratio.items():
        for search in ("tpe", "gp"):
            if search in against:
                value = against[search]
                said = "not reached" if value is None else f"{value:.2f}"
                met = value is not None and value <= TARGET
                lines.append(f"{search} against {grid}: {said} of its GPU-time (target <= 1/3): "
                             f"{'met' if met else 'missed'}")
    unsafe = sum(row["unsafe_best"] or 0 for row in table)
    lines.append(f"unsafe configurations ever reported as best: {unsafe} (must be 0)")
    return lines


def _cell(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}" if not value.is_integer() or digits == 0 else \
            f"{value:,.0f}"
    return str(value)


def render(table: Sequence[dict[str, Any]], ratio: dict[str, dict[str, float | None]],
           settings: Settings) -> str:
    heading = (f"optimize: {GRID} configurations, 11 right (within {NEAR:.0%} of BEST "
               f"{throughput(BEST):,.0f} tok/s, safe); trials={settings.trials}, "
               f"startup_trials={settings.startup_trials}, confirm_top={settings.confirm_top}, "
               f"confirm_trials={settings.confirm_trials}; a trial {TRIAL_GPU_S / 3600:.2f} "
               f"GPU-h (a stopped one less); {settings.noise.describe()}; production "
               f"{settings.production} ({throughput(PRODUCTIONS[settings.production]):,.0f} "
               "tok/s)")
    out = [heading, "",
           "| search | seeds | reached | trials to reach | GPU-h to reach | trials | GPU-h | "
           "final answer, true tok/s (min / median) | unsafe best | vs grid oracle | "
           "vs grid full |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        against = [ratio.get(g, {}).get(row["search"]) for g in
                   ("grid, oracle-stopped", "grid, full (computed)")]
        final = "-" if row["final_true_min"] is None else \
            f"{row['final_true_min']:,.0f} / {row['final_true_median']:,.0f}"
        out.append(f"| {row['search']} | {row['seeds']} | {row['reached']}/{row['seeds']} | "
                   f"{_cell(row['trials_reach'], 0)} | {_cell(row['gpu_h_reach'])} | "
                   f"{_cell(float(row['trials']), 0)} | {_cell(row['gpu_h'])} | {final} | "
                   f"{_cell(row['unsafe_best'])} | {_cell(against[0])} | {_cell(against[1])} |")
    return "\n".join(out)
