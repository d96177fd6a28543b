"""A stress run for people and for files: rich tables and one JSON line per session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table

from experiments.workload.metrics import LATENCIES
from experiments.workload.results import StressResult

LATENCY_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}


def outcome_table(result: StressResult, summary: dict[str, Any] | None = None) -> Table:
    """Outcome, count and share of one stress run."""
    summary = summary or result.summary()
    total = summary["sessions"]
    lo, hi = summary["ci95"]
    table = Table(
        title=f"{total} sessions in {result.wall_s:.1f} s"
        + (" (stopped early)" if result.stopped_early else ""),
        caption=(
            f"corrupted {summary['corrupted']}/{summary['judged']} judged = "
            f"{summary['rate']:.1%} (95% CI {lo:.1%}–{hi:.1%}); infra {summary['infra']}"
        ),
    )
    table.add_column("outcome")
    table.add_column("count", justify="right")
    table.add_column("share", justify="right")
    for outcome, count in summary["counts"].items():
        share = f"{count / total:.1%}" if total else "-"
        table.add_row(outcome, str(count), share)
    return table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def latency_table(summary: dict[str, Any]) -> Table:
    """Mean, median, p90 and p99 of each latency in ms, with throughput and goodput below."""
    caption = (
        f"{summary['completed']}/{summary['requests']} requests completed; "
        f"{summary['request_throughput']:.2f} req/s, {summary['output_throughput']:.1f} "
        f"output tok/s"
    )
    if summary["goodput"] is not None:
        slo = ", ".join(f"{key}≤{value:g}" for key, value in summary["slo"].items())
        caption += (f"; goodput {summary['goodput']:.2f} req/s "
                    f"({summary['good_requests']} within {slo})")
    table = Table(title="latency (ms)", caption=caption)
    for column in ("metric", "mean", "median", "p90", "p99"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name in LATENCIES:
        table.add_row(LATENCY_LABELS[name], *(
            _ms(summary[f"{stat}_{name}_ms"]) for stat in ("mean", "median", "p90", "p99")
        ))
    return table


def summary_table(result: StressResult) -> Group:
    """Outcomes, then latencies: what ``bisect stress`` prints."""
    summary = result.summary()
    return Group(outcome_table(result, summary), latency_table(summary))


def write_jsonl(result: StressResult, path: str | Path) -> Path:
    """One JSON object per session, in session order (``SessionResult.to_json``)."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as handle:
        for session in result.sessions:
            handle.write(json.dumps(session.to_json(), ensure_ascii=False) + "\n")
    return path
