"""A sweep's figures in words, once, for every format: a metric's value, change, interval and
effect; a variant's metric as cells; the history as rows. Plain text: each renderer escapes it
its own way (Jinja's autoescape, ``text.text``, ElementTree). Whatever came from a server, a
file or git (a reason, a node fact, a commit's subject) is text in every one."""

from __future__ import annotations

from orchestrator.core.strategies.sweep_judged import BINARY
from orchestrator.reports.page import when as page_when
from orchestrator.reports.sweep.model import (
    Commit,
    Comparison,
    FactChange,
    Measured,
    MetricRow,
    SweepReport,
)
from orchestrator.reports.text import p_text, share

WHAT = {"corruption": "corruption rate", "wedging": "wedging rate (errors and timeouts)",
        "throughput": "output throughput", "p99_latency": "p99 end-to-end latency"}
SORTED = ("sort_corruption", "sort_wedging", "sort_throughput", "sort_p99_latency")


def value(metric: str, v: float | None) -> str:
    if v is None:
        return "–"
    if metric in BINARY:
        return share(v)  # as the campaign's pages and the run's answer show a rate
    return f"{v:,.0f} tok/s" if metric == "throughput" else f"{v:,.0f} ms"


def change(metric: str, c: float | None) -> str:
    """A binary metric's change in rate points; a continuous one's relative, worse positive."""
    if c is None:
        return "–"
    if metric in BINARY:
        return f"{c * 100:+.1f} pts"
    if c == 0:
        return "no change"
    return f"{abs(c):.1%} {'worse' if c > 0 else 'better'}"


def interval(metric: str, ci: tuple[float | None, float | None] | None,
             alpha: float | None = None) -> str:
    """The change's interval, two-sided at 1 - 2 alpha (its level said where alpha is known)."""
    if ci is None:
        return ""
    if ci[0] is None or ci[1] is None:
        return "unbounded"
    level = f"{1 - 2 * alpha:.0%}: " if alpha is not None else ""
    if metric in BINARY:
        return f"{level}{ci[0] * 100:+.1f} … {ci[1] * 100:+.1f}"
    return f"{level}{ci[0]:+.0%} … {ci[1]:+.0%}"


def effect(metric: str, e: float | None) -> str:
    if e is None:
        return "–"
    return f"{e * 100:.3g} pts" if metric in BINARY else f"{e:.0%}"


def sides(metric: str, c: Comparison | None) -> str:
    """What each side's figure rests on: session counts, or the number of trials."""
    if c is None:
        return ""
    if c.counts_now and c.counts_baseline:
        return (f"{c.counts_baseline[0]}/{c.counts_baseline[1]} → "
                f"{c.counts_now[0]}/{c.counts_now[1]} sessions")
    if c.values_now or c.values_baseline:
        return f"{len(c.values_baseline)} → {len(c.values_now)} trials"
    return ""


def cells(row: MetricRow) -> dict[str, str]:
    """One variant's metric in words, for every format."""
    d, c = row.detection, row.confirmation
    metric = row.metric
    confirmed = "–"
    if c is not None:
        confirmed = f"{c.answer}: {change(metric, c.change)} (p = {p_text(c.p_worse)})"
    elif row.suspected:
        confirmed = "confirming"
    return {
        "metric": metric, "what": WHAT.get(metric, metric),
        "baseline": value(metric, d.baseline if d else None),
        "now": value(metric, d.current if d else row.now),
        "change": change(metric, d.change) if d else "–",
        "interval": interval(metric, d.interval, d.alpha) if d else "",
        "p": p_text(d.p_worse) if d else "–",
        "answer": d.answer if d else ("not watched" if not row.watched else "not compared"),
        "confirmation": confirmed,
        "min_effect": effect(metric, d.min_effect if d else None),
        "sides": sides(metric, d),
    }


def when(value: str | None) -> str:
    return page_when(value, seconds=False)


def shown_facts(report: SweepReport) -> list[FactChange]:
    """The changed node facts but a node's commit where it is the source tree's, said once
    as the commits."""
    shas = {c.sha for c in (report.commit_baseline, report.commit_now) if c is not None}
    return [f for f in report.changed_facts
            if not (f.fact == "commit" and {f.baseline, f.now} <= shas | {None})]


def commit_text(c: Commit | None) -> str:
    if c is None:
        return "–"
    said = c.sha[:12]
    if c.subject:
        said += f" '{c.subject}'"
    return said + (f" ({c.author})" if c.author else "")


def variant_names(report: SweepReport) -> list[str]:
    """The variants in the report's order; a run that compared none (skipped): as the history
    first measured them (production first, as every run runs it first)."""
    return [v.name for v in report.variants] or list(
        dict.fromkeys(n for h in report.history for n in h.variants))


def history_rows(report: SweepReport) -> list[dict[str, str]]:
    """A row per run and variant (a run that measured nothing: one row, with its reason)."""
    names = variant_names(report)
    rows = []
    for h in report.history:
        marks = ", ".join(m for m, on in (("baseline", h.baseline), ("this run", h.current),
                                          ("accepted", h.run.accepted)) if on)
        base = {"seq": str(h.run.seq), "status": h.run.status, "started": h.run.started_at or "",
                "marks": marks}
        shown = [n for n in names if n in h.variants] + sorted(set(h.variants) - set(names))
        if not shown:
            rows.append({**base, "variant": "–", "trials": "0", "corruption": "–",
                         "wedging": "–", "throughput": "–", "p99_latency": "–",
                         "note": h.note, **dict.fromkeys(SORTED, "")})
        for name in shown:
            m: Measured = h.variants[name]
            rows.append({**base, "variant": name, "trials": str(m.trials),
                         "corruption": _counted(m.corruption, m.corrupted, m.judged),
                         "wedging": _counted(m.wedging, m.wedged, m.sessions),
                         "throughput": value("throughput", m.throughput),
                         "p99_latency": value("p99_latency", m.p99_ms), "note": "",
                         **{f"sort_{k}": "" if raw is None else repr(float(raw)) for k, raw in (
                             ("corruption", m.corruption), ("wedging", m.wedging),
                             ("throughput", m.throughput), ("p99_latency", m.p99_ms))}})
    return rows


def _counted(rate: float | None, failing: int, of: int) -> str:
    """A run's rate beside the sessions it is of: failing/judged for corruption, errors and
    timeouts/all for wedging."""
    return "–" if rate is None else f"{share(rate)} {failing}/{of}"
