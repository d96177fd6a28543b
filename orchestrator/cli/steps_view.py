"""A trial's stored steps for people (`bisect show ID --steps`) and for tools (``--json``)."""

from __future__ import annotations

from typing import Any

from db.records import StepRecord

_SHOW = 100  # a command line or a value is cut to this many characters


def _cut(text: str) -> str:
    return text if len(text) <= _SHOW else text[:_SHOW - 1] + "…"


def step_json(step: StepRecord) -> dict[str, Any]:
    return {"name": step.name, "service": step.service,
            "started_at": step.started_at.isoformat(), "duration_s": step.duration_s,
            "outcome": step.outcome, "details": step.details}


def proof_lines(checks: dict[str, Any]) -> list[str]:
    """The proof of load's checks, one observation a line."""
    lines = []
    if "argv" in checks:
        lines.append("argv " + _cut(" ".join(checks["argv"])))
    proved = checks.get("proved") or {}
    if proved.get("launcher"):  # the server a launcher exec'd or spawned, not the command
        lines.append(f"proved process {proved.get('pid')}, started by the launcher "
                     + _cut(" ".join(proved["launcher"])))
    for key, value in (checks.get("env") or {}).items():
        lines.append(f"env {key}=" + ("(not set)" if value is None else _cut(str(value))))
    started, deployed = checks.get("started_at"), checks.get("deployed_at")
    if isinstance(started, int | float) and isinstance(deployed, int | float):
        # btime is whole seconds: a start computed up to 1 s before the deploy is after it
        lines.append("started after the deploy (node clock, to the second)"
                     if started > deployed - 1.0
                     else f"started {deployed - started:.0f} s BEFORE the deploy")
    for marker, seen in (checks.get("markers") or {}).items():
        lines.append(f"log marker {marker!r} " + ("present" if seen else "MISSING"))
    for marker, gone in (checks.get("absent_markers") or {}).items():
        lines.append(f"log marker {marker!r} " + ("absent" if gone else "PRESENT"))
    for path, seen in (checks.get("files") or {}).items():
        lines.append(f"file {path} sha256 {str(seen.get('sha256', ''))[:12]}")
    if git := checks.get("git"):
        lines.append(f"git {git.get('tree')} at {str(git.get('head', ''))[:12]}")
    return lines


def step_lines(step: StepRecord) -> list[str]:
    """One line for the step, then what it observed, indented."""
    name = f"{step.name} {step.service}" if step.service else step.name
    lines = [f"  {name:<24} {step.duration_s:8.3f} s  {step.outcome}"]
    details = step.details
    if step.outcome == "skipped" and "reason" in details:
        lines[0] += f" ({details['reason']})"
    if "checks" in details:
        lines += [f"      {line}" for line in proof_lines(details["checks"])]
    for problem in details.get("problems", []):
        lines.append(f"      problem: {_cut(str(problem))}")
    if step.outcome == "failed" and "error" in details:
        lines.append(f"      {details.get('failure', 'variant')} failure: "
                     + _cut(str(details["error"]).splitlines()[0] if details["error"] else ""))
    for run in details.get("runs", []) if step.name == "probe" else ():  # the user's own probe
        lines.append(f"      run {run.get('run')}: {run.get('judgement')}, {run.get('status')}")
    if step.name == "stress" and step.outcome == "ok":
        early = ", stopped early" if details.get("stopped_early") else ""
        lines.append(f"      {details.get('sessions', 0)} sessions{early}")
    return lines
