"""A stress run for people and for files: rich tables and one JSON line per session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table

from experiments.secrets import redact
from experiments.workload.metrics import LATENCIES, STATS, latency_key
from experiments.workload.results import StressResult

LATENCY_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}


def outcome_table(result: StressResult, summary: dict[str, Any] | None = None) -> Table:
    """Outcome, count and share of one stress run."""
    summary = summary or result.summary()
    total = summary["sessions"]
    lo, hi = summary["ci95"]
    ended = (" (interrupted: the sessions finished until Ctrl-C)" if result.interrupted
             else " (stopped early)" if result.stopped_early else "")
    table = Table(
        title=f"{total} sessions in {result.wall_s:.1f} s{ended}",
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
    """bench_serving's statistics of each latency in ms, with throughputs below."""
    caption = (
        f"{summary['completed']}/{summary['requests']} requests completed in "
        f"{summary['duration']:.2f} s: {summary['request_throughput']:.2f} req/s; tokens/s "
        f"input {summary['input_throughput']:.1f}, output {summary['output_throughput']:.1f}, "
        f"total {summary['total_throughput']:.1f}; concurrency {summary['concurrency']:.1f} "
        f"on average, {summary['max_concurrent_requests']} requests in the busiest second"
    )
    if summary["goodput"] is not None:
        slo = ", ".join(f"{key}≤{value:g}" for key, value in summary["slo"].items())
        caption += (f"; goodput {summary['goodput']:.2f} req/s "
                    f"({summary['good_requests']} within {slo})")
    table = Table(title="latency (ms)", caption=caption)
    table.add_column("metric")
    for stat in STATS:
        table.add_column(stat, justify="right")
    for name in LATENCIES:
        table.add_row(LATENCY_LABELS[name],
                      *(_ms(summary[latency_key(stat, name)]) for stat in STATS))
    return table


def error_table(summary: dict[str, Any]) -> Table | None:
    """Failed sessions by reason (``StressResult.error_summary``), or None without any."""
    rows = summary["error_summary"]
    if not rows:
        return None
    table = Table(title="failures by reason")
    for column in ("outcome", "reason", "sessions"):
        table.add_column(column, justify="right" if column == "sessions" else "left")
    for row in rows:
        table.add_row(row["outcome"], row["reason"], str(row["sessions"]))
    return table


def summary_table(result: StressResult, summary: dict[str, Any] | None = None) -> Group:
    """Outcomes, latencies, then failures by reason: what ``bisect stress`` prints."""
    summary = result.summary() if summary is None else summary
    tables: list[Table] = [outcome_table(result, summary), latency_table(summary)]
    errors = error_table(summary)
    if errors is not None:
        tables.append(errors)
    return Group(*tables)


def write_jsonl(result: StressResult, path: str | Path) -> Path:
    """One JSON object per session, in session order (``SessionResult.to_json``); a secret
    this process read (an API key a server echoed into its evidence) is written redacted."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as handle:
        for session in result.sessions:
            record = session.to_json()
            if record["evidence"]:
                record["evidence"] = redact(record["evidence"])
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path
