"""The sweep report in Markdown, for a pull request or an issue: the answer first, each variant
against the baseline, what changed, the hunt, the decision trail and the history (folded)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.reports.renderer import Writes
from orchestrator.reports.sweep.model import SweepReport
from orchestrator.reports.sweep.words import (
    cells,
    change,
    commit_text,
    history_rows,
    interval,
    shown_facts,
    value,
    when,
)
from orchestrator.reports.text import p_text, table, text

MAX_MD_HISTORY = 30  # runs in the Markdown's history table: a comment stays readable


def render_sweep_markdown(report: SweepReport) -> str:
    a, run = report.answer, report.run
    lines = [f"**{text(a.title)}:** {text(a.sentence.removeprefix(a.title + ': '), 1000)}", "",
             f"{text(a.exit_meaning)}. Sweep {text(report.sweep)}, run {run.seq} "
             f"({text(run.trigger)}, started {when(run.started_at)}"
             + (f", campaign {text(run.campaign_id)}" if run.campaign_id else "") + ")."]
    b = report.baseline
    lines += ["", f"Baseline: run {b.seq}, started {when(b.started_at)}, accepted "
                  f"{when(b.accepted_at)}." if b else "Baseline: none yet."]
    lines += [f"\nNote: {text(note, 1000)}" for note in report.notes]
    if report.variants:
        lines += ["", "### Variants against the baseline", ""]
        lines += table(
            ["variant", "state", "metric", "baseline#", "now#", "change (interval)#", "p#",
             "answer", "confirmation", "min effect#"],
            [[text(v.name) + (" **regressed**" if m.regressed else ""), text(v.state_text),
              text(c["metric"]), text(c["baseline"]), text(c["now"]),
              text(f"{c['change']} ({c['interval']})" if c["interval"] else c["change"]),
              text(c["p"]), text(c["answer"]), text(c["confirmation"]), text(c["min_effect"])]
             for v in report.variants for m in v.metrics for c in [cells(m)]])
    changed = [["source tree commit", text(commit_text(report.commit_baseline)),
                text(commit_text(report.commit_now))]] \
        if report.commit_baseline != report.commit_now else []
    changed += [[f"{text(f.node)}: {text(f.fact)}", text(f.baseline or "–"),
                 text(f.now or "–")] for f in shown_facts(report)]
    changed += [[f"variant {text(c.variant)}", text(_levels(c.baseline)), text(_levels(c.now))]
                for c in report.changed_variants]
    changed += [[text(c.what), text(c.baseline or "–"), text(c.now or "–")]
                for c in report.changed_settings]
    if report.baseline is not None:
        lines += ["", "### What changed since the baseline", ""]
        lines += table(["what", "baseline", "now"], changed) if changed else \
            ["Nothing: the same commit, node facts, variants and settings."]
    if (h := report.hunt) is not None:
        lines += ["", "### Hunt", ""]
        if h.first_bad:
            lines.append("First bad commit: " + "; ".join(text(commit_text(c))
                                                          for c in h.first_bad)
                         + (f" (posterior {h.posterior:.3f})" if h.posterior is not None
                            else ""))
        lines.append(f"{text(h.status)}: {text(h.reason, 1000)}"
                     + (f" (campaign {text(h.campaign_id)}: its own report is "
                        f"`bisect report {text(h.campaign_id)}`)" if h.campaign_id else ""))
    if report.trail:
        lines += ["", f"<details><summary>Decision trail ({len(report.trail)} "
                      "comparisons)</summary>", ""]
        lines += table(["##", "step", "variant", "metric", "trials#", "baseline#", "now#",
                        "change (interval)#", "p worse#", "p same#", "answer"],
                       [[str(i), text(t.phase), text(t.variant), text(t.metric),
                         str(t.trials if t.trials is not None else "–"),
                         text(value(t.metric, t.comparison.baseline)),
                         text(value(t.metric, t.comparison.current)),
                         text(f"{change(t.metric, t.comparison.change)} ("
                              f"{interval(t.metric, t.comparison.interval, t.comparison.alpha)})"),
                         text(p_text(t.comparison.p_worse)), text(p_text(t.comparison.p_same)),
                         text(t.comparison.answer)]
                        for i, t in enumerate(report.trail, start=1)])
        lines += ["", "</details>"]
    history = history_rows(report)
    runs = sorted({r["seq"] for r in history}, key=int)[-MAX_MD_HISTORY:]
    lines += ["", f"<details><summary>History ({len(report.history)} runs"
                  + (f", the last {len(runs)} shown" if len(runs) < len(report.history) else "")
                  + (f"; {report.omitted_runs} more left out" if report.omitted_runs else "")
                  + ")</summary>", ""]
    lines += table(["run#", "status", "marks", "variant", "trials#", "corruption#", "wedging#",
                    "tokens/s#", "p99#", "note"],
                   [[r["seq"], text(r["status"]), text(r["marks"]), text(r["variant"]),
                     r["trials"], text(r["corruption"]), text(r["wedging"]),
                     text(r["throughput"]), text(r["p99_latency"]), text(r["note"] or "")]
                    for r in history if r["seq"] in runs])
    lines += ["", "</details>", "", f"<sub>{text(report.tool_version, 60)}, sweep report "
                                     f"version {report.version}</sub>", ""]
    return "\n".join(lines)


def _levels(levels: Mapping[str, str] | None) -> str:
    return "–" if levels is None else ", ".join(f"{f}={lvl}" for f, lvl in levels.items())


MARKDOWN = Writes("md", ".md", render_sweep_markdown)
