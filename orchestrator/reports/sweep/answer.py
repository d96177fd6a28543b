"""A sweep run's answer: its title, one sentence saying what it found, and what `bisect sweep`
exited with; a regressed metric said as its confirmation measured it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from db.sweep_records import SweepRunRecord
from orchestrator.core.stats.regression import said_change
from orchestrator.reports.sweep.model import Answer, MetricRow, VariantResult
from orchestrator.reports.text import share

# What `bisect sweep` exits with (orchestrator/sweeps/run.py EXIT, the CLI's 130 on Ctrl-C)
EXITS: Mapping[str, tuple[int | None, str]] = {
    "clean": (0, "exit 0: clean, no variant differs from the baseline"),
    "regression": (1, "exit 1: a regression, confirmed on fresh trials"),
    "inconclusive": (3, "exit 3: inconclusive, undecided within the trial budget"),
    "skipped": (4, "exit 4: skipped, another run of the sweep held its lock"),
    "failed": (1, "exit 1: the run failed before its answer"),
    "interrupted": (130, "exit 130: interrupted before its answer"),
    "missed": (None, "no exit: no run started at its scheduled time"),
    "running": (None, "no exit yet: the run is under way"),
}
TITLES = {"clean": "Clean", "regression": "REGRESSION confirmed", "inconclusive": "Inconclusive",
          "skipped": "Skipped", "missed": "Missed", "failed": "Failed",
          "interrupted": "Interrupted", "running": "Running"}


def answer(status: str, reason: str, variants: Sequence[VariantResult],
           baseline: SweepRunRecord | None) -> Answer:
    """The run's answer in a title and one sentence, and what `bisect sweep` exited with."""
    code, meaning = EXITS.get(status, (None, f"no exit code: the run is {status}"))
    if status == "clean" and baseline is None:
        meaning = "exit 0: clean, with no baseline yet to differ from"
    title = TITLES.get(status, status.capitalize())
    against = (f"run {baseline.seq} (accepted {baseline.accepted_at:%Y-%m-%d %H:%M} UTC)"
               if baseline is not None and baseline.accepted_at is not None else
               f"run {baseline.seq}" if baseline is not None else "")
    if status == "regression":
        said = "; ".join(f"{v.name}: " + ", ".join(said_regressed(m, v.confirm_trials)
                                                            for m in v.metrics if m.regressed)
                         for v in variants if v.state == "regression")
        sentence = f"{title}: {said or reason}" + (f", against {against}" if against else "")
    elif status == "clean" and baseline is None:
        sentence = f"{title}: no baseline yet, nothing to compare with (`bisect sweep --accept` " \
                   "makes a run the baseline)"
    elif status == "clean":
        odd = [v.name for v in variants if v.state == "unconfirmed"]
        drifted = [v.name for v in variants if v.state == "uncontrolled"]
        sentence = f"{title}: every variant is the same as {against or 'the baseline'}" + (
            f" ({', '.join(odd)}: a difference the fresh trials did not show again)"
            if odd else "") + (
            f" ({', '.join(drifted)}: performance differs from the baseline's trials of "
            "another day, with no control beside it: not an alert)" if drifted else "")
    elif status == "inconclusive":
        open_ = [v.name for v in variants
                 if v.state not in ("clean", "unconfirmed", "uncontrolled", "new")]
        sentence = f"{title}: " + (f"{', '.join(open_)} undecided against "
                                   f"{against or 'the baseline'}" if open_ else reason)
    else:
        sentence = f"{title}: {reason}" if reason else title
    return Answer(status=status, title=title, sentence=sentence.rstrip(".") + ".",
                  exit_code=code, exit_meaning=meaning, reason=reason)


def said_regressed(row: MetricRow, fresh: int) -> str:
    """A regressed metric as its confirmation measured it, saying so (the comparisons table
    shows the detection beside it: two figures of different trials), with the counts."""
    c = row.confirmation or row.detection
    if c is None or c.change is None:
        return row.metric
    on = (f" on its {fresh} fresh trial{'s' if fresh != 1 else ''}"
          if row.confirmation is not None and fresh else "")
    if row.binary:
        counts = f" ({c.counts_now[0]}/{c.counts_now[1]})" if c.counts_now else ""
        return (f"{row.metric} {share(c.baseline)} -> {share(c.current)}{counts}{on} "
                f"({c.change * 100:+.1f} points)")
    return said_change(row.metric, c.change) + on  # a drop negative: "throughput -31%"
