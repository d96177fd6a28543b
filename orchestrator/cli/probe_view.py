"""The runs of a campaign's own probe (``workload: {command: ...}``) as `bisect show` gives them:
each run's exit status and its output, from the store.

A judged run (exit 0, or 1-127 but 125) is one session, its output the session's evidence; the
run that failed a trial (exit 125, a signal, a timeout, a probe that never started) is in the
probe step's details with its output, since a failed trial stores no sessions.
"""

from __future__ import annotations

from typing import Any

from db.records import SessionRecord, StepRecord


def is_probe(spec: dict[str, Any]) -> bool:
    """The stored campaign's workload is its own probe."""
    workload = spec.get("workload")
    return isinstance(workload, dict) and "command" in workload


def probe_runs(steps: list[StepRecord], sessions: list[SessionRecord]) -> list[dict[str, Any]]:
    """Every run of one trial, in order: run number, exit code, judgement, status and output
    (the status line, then the output's last 64 KiB)."""
    step = next((s for s in steps if s.name == "probe"), None)
    if step is None:
        return []
    output: dict[Any, str] = {s.idx + 1: s.evidence or "" for s in sessions}
    runs = [dict(run) for run in step.details.get("runs", []) if isinstance(run, dict)]
    if runs and step.outcome == "failed":
        output[runs[-1].get("run")] = str(step.details.get("output", ""))
    for run in runs:
        run["output"] = output.get(run.get("run"), "")
    return runs


def run_lines(trial_line: str, runs: list[dict[str, Any]]) -> list[str]:
    """A trial's runs for people: a line per run, then its output indented."""
    if not runs:
        return [f"{trial_line}: no probe run stored"]
    lines = []
    for run in runs:
        text = str(run.get("output", ""))
        status, _, rest = text.partition("\n")
        lines.append(f"{trial_line} run {run.get('run')}: {run.get('judgement')}, "
                     f"{run.get('status') or status}")
        lines += [f"    {_printable(line)}" for line in rest.splitlines()]
    return lines


def _printable(line: str) -> str:
    """A line of the probe's output with what would drive the terminal (escape sequences,
    carriage returns) shown as escapes."""
    return "".join(c if c.isprintable() or c == "\t" else f"\\x{ord(c):02x}" if ord(c) < 256
                   else f"\\u{ord(c):04x}" for c in line)
