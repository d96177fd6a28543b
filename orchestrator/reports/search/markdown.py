"""The Markdown report of a search (`bisect optimize`): the verdict line first (the best safe
configuration), the top safe configurations, the unsafe ones that looked fast with why, then
every configuration in a ``<details>``. Everything from the store goes through
``reports.text.text``: no name can end a cell, a row, or open markup."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.reports.campaign.model import Report
from orchestrator.reports.renderer import Writes
from orchestrator.reports.search.model import Configuration, Search
from orchestrator.reports.search.text import (
    bound_text,
    confidence,
    interval,
    marks,
    number,
    percent,
    slo_text,
    value,
    versus_text,
)
from orchestrator.reports.text import levels_text, table, text

SHOWN = 5  # rows above the fold, of the safe and of the rejected
HEADLINES = {"optimum": "Optimum", "inconclusive": "Inconclusive"}


def _header(search: Search, why: bool) -> list[str]:
    ci = confidence(search.limits.alpha)
    header = ["rank#", "configuration", "marks"]
    header += [f"{text(o)} ({ci} CI)#" for o in search.objectives]
    header += [f"corruption (limit {percent(search.limits.corruption)})#",
               f"wedging (limit {percent(search.limits.wedging)})#"]
    header += [f"{text(m)} (SLO {number(limit)} ms)#" for m, limit in search.limits.slo.items()]
    header += ["trials#"] + (["why"] if why else [])
    return header


def _rows(rows: Sequence[Configuration], why: bool) -> list[list[str]]:
    shown = []
    for i, row in enumerate(rows, 1):
        cells = [str(i), levels_text(row.levels), text(", ".join(marks(row))) or "–"]
        cells += [text(f"{value(o)} ({interval(o)})") for o in row.objectives]
        cells += [text(bound_text(row.corruption)), text(bound_text(row.wedging))]
        cells += [text(slo_text(s)) for s in row.slo]
        stopped = f" ({row.stopped_early} stopped early)" if row.stopped_early else ""
        cells.append(f"{row.trials}{stopped}")
        if why:
            cells.append(text("; ".join(row.why), 600) or "–")
        shown.append(cells)
    return shown


def _section(title: str, search: Search, rows: Sequence[Configuration], why: bool,
             limit: int | None = None) -> list[str]:
    if not rows:
        return []
    shown = rows[:limit] if limit else rows
    more = f" (the first {len(shown)} of {len(rows)})" if len(shown) < len(rows) else ""
    return ["", f"### {title}{more}", "", *table(_header(search, why), _rows(shown, why))]


def render_optimize_markdown(report: Report) -> str:
    """The Markdown summary of a search's report (``report.optimize`` set)."""
    search = report.optimize
    if search is None:
        raise ValueError("not a search's report: markdown.render_markdown renders it")
    facts, head, cost = report.campaign, report.headline, report.cost
    lines = [f"**{HEADLINES.get(head.status, text(head.status))}:** {text(head.sentence, 2000)}",
             "", f"Confidence: {text(head.confidence, 2000)}", ""]
    trials = search.trials
    lines.append(
        f"Campaign {text(facts.name)} ({text(facts.id, 80)}), {text(facts.status)}, "
        f"{text(facts.strategy)} strategy ({text(search.sampler)}) {text(report.aim)}: "
        f"{trials.total} trials "
        f"({trials.search} searching, {trials.confirmation} confirming, "
        f"{trials.final} in the final pairs with production, "
        f"{trials.stopped_early} stopped early), {cost.sessions:,} sessions, "
        f"{cost.gpu_s_equivalent:,.0f} GPU-s equivalent spent; {len(search.ranked)} safe, "
        f"{len(search.rejected)} rejected, {len(search.unproven)} unproven, "
        f"{len(search.undeployable)} undeployable configurations.")
    if search.production:
        lines += ["", f"Production: {levels_text(search.production)}."]
    versus = search.versus_production
    if versus is not None:
        compared = f"{levels_text(versus.production)}: " if versus.production else ""
        said = text(versus_text(versus, search.limits.alpha), 2000)
        standing = "shown better" if versus.shown_better else "no better"
        lines += ["", f"Against production ({standing}): {compared}{said}."]
    lines += _section("Safe configurations, best first", search, search.ranked, False, SHOWN)
    top = [c.key for c in search.ranked[:SHOWN]]
    if len(search.objectives) > 1 and [c.key for c in search.pareto] != top[:len(search.pareto)]:
        lines += _section("Pareto front", search, search.pareto, False)
    lines += _section("Rejected: unsafe configurations that looked fast", search,
                      search.rejected, True, SHOWN)
    everything = len(search.ranked) + len(search.rejected) + len(search.unproven)
    lines += ["", f"<details><summary>All {everything} configurations</summary>"]
    lines += _section("Safe", search, search.ranked, False)
    lines += _section("Rejected", search, search.rejected, True)
    lines += _section("Unproven: not shown unsafe, measured too little to prove safe", search,
                      search.unproven, True)
    if search.undeployable:
        lines += ["", "### Undeployable", ""]
        lines += table(["configuration", "attempts#", "last error"],
                       [[levels_text(u.levels), str(u.attempts), text(u.error, 600)]
                        for u in search.undeployable])
    lines += ["", "</details>", ""]
    return "\n".join(lines)


MARKDOWN = Writes("md", ".md", render_optimize_markdown)
