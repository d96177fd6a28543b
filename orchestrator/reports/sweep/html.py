"""The sweep report's HTML: a self-contained page (``templates/sweep.html.j2`` in
``page.html.j2``'s frame), inline SVG charts (``sweep.charts``), the pages' sorting script, its
own style allowed by its hash."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from functools import partial

from markupsafe import Markup

from orchestrator.core.strategies.sweep_judged import BINARY, METRICS
from orchestrator.reports import page
from orchestrator.reports.files import clean
from orchestrator.reports.page import SCRIPT_HASH, SORT_SCRIPT
from orchestrator.reports.renderer import Writes
from orchestrator.reports.sweep import charts
from orchestrator.reports.sweep.model import SweepReport
from orchestrator.reports.sweep.words import (
    WHAT,
    cells,
    change,
    commit_text,
    history_rows,
    interval,
    shown_facts,
    sides,
    value,
    variant_names,
)

CSS = {"clean": "good", "regression": "bad"}  # every other status: "warn"
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 90rem; padding: 0 1rem; color: #1d1d1f; line-height: 1.4; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; overflow-wrap: anywhere; }
h2 { font-size: 1.2rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
.meta, .note { color: #666; } .meta { margin-top: 0; }
#answer { border-left: .35rem solid #b7791f; padding: .6rem 1rem; background: #fdf8e6;
          border-radius: .3rem; }
#answer.good { border-color: #1e7b4f; background: #eef8f2; }
#answer.bad { border-color: #c0392b; background: #fdf2f1; }
#sentence { font-size: 1.15rem; font-weight: 600; margin: .3rem 0; overflow-wrap: anywhere; }
.status { display: inline-block; padding: .1rem .6rem; border-radius: .4rem; font-weight: 600;
          background: #fdf6b2; color: #723b13; }
.status.good { background: #def7ec; color: #03543f; }
.status.bad { background: #fde2e1; color: #9b1c1c; }
table { border-collapse: collapse; margin: .6rem 0 1.4rem; font-size: .88rem; }
th, td { border-bottom: 1px solid #e5e5e5; padding: .3rem .55rem; text-align: left;
         vertical-align: top; }
table.wide { width: 100%; } td.num { white-space: nowrap; } th { white-space: nowrap; }
td.text { overflow-wrap: anywhere; min-width: 12rem; }
th { background: #f4f4f4; } td.num, th.num { text-align: right;
                                             font-variant-numeric: tabular-nums; }
tr.regressed td { background: #fff1f0; } tr.regressed td:first-child {
  box-shadow: inset .25rem 0 #c0392b; }
.different { color: #9b1c1c; font-weight: 600; } .same { color: #03543f; }
.unknown { color: #723b13; } .ci { color: #666; font-size: .92em; }
tr.unmeasured td { color: #777; font-style: italic; }
code { background: #f3f3f3; padding: 0 .25rem; border-radius: .2rem; overflow-wrap: anywhere; }
figure { margin: 1rem 0 1.6rem; } figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: .85rem; font-weight: 600; margin-bottom: .3rem; }
.chart-row { display: flex; flex-wrap: wrap; gap: 0 2rem; align-items: flex-start; }
.chart-row figure { display: table; } td.when { white-space: nowrap; }
.chart-row figcaption { display: table-caption; caption-side: top; }
.scroll { overflow-x: auto; }
th button { font: inherit; font-weight: 600; color: inherit; background: none; border: 0;
            padding: 0; cursor: pointer; text-align: inherit; }
th button:focus-visible { outline: 2px solid #1f5fa8; outline-offset: 2px; }
th button::after { content: "\\00a0↕"; color: #aaa; }
th[aria-sort="ascending"] button::after { content: "\\00a0▲"; color: #1d1d1f; }
th[aria-sort="descending"] button::after { content: "\\00a0▼"; color: #1d1d1f; }
"""
STYLE_HASH = "sha256-" + base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
# As the campaign report: nothing fetched, framed, connected; only our script by its hash, our
# style by its hash (an injected one has another).
CSP = (f"default-src 'none'; script-src '{SCRIPT_HASH}'; style-src '{STYLE_HASH}'; "
       "base-uri 'none'; form-action 'none'")


def hunt_file_name(campaign_id: str) -> str:
    """The hunt's own report beside the sweep's: ``hunt-ID.html``, the id with anything but
    letters, digits, ``.``, ``-`` and ``_`` replaced (an id is a store's value, not a path)."""
    return "hunt-" + re.sub(r"[^A-Za-z0-9._-]", "_", campaign_id) + ".html"


def _history_charts(report: SweepReport) -> list[tuple[str, Markup]]:
    runs = [charts.RunMark(seq=h.run.seq, status=h.run.status, baseline=h.baseline,
                           current=h.current, accepted=h.run.accepted,
                           note="" if h.variants else (h.note or h.run.status))
            for h in report.history]
    names = variant_names(report)
    regressed = {(v.name, m.metric) for v in report.variants for m in v.metrics if m.regressed}
    made = []
    for metric in METRICS:
        lines = [charts.Line(name, [h.variants[name].of(metric) if name in h.variants else None
                                    for h in report.history], (name, metric) in regressed)
                 for name in names]
        title = f"{WHAT[metric].capitalize()} over the sweep's runs"
        made.append((title, charts.history_chart(
            title, runs, lines, partial(value, metric), metric,
            0.05 if metric in BINARY else 1.0)))
    return made


def axis(metric: str, c: float) -> str:
    """A change on a chart's axis: short (rate points, or a signed share)."""
    return f"{c * 100:+.3g}" if metric in BINARY else f"{c:+.0%}"


def _change_charts(report: SweepReport) -> list[tuple[str, Markup]]:
    made = []
    for metric in METRICS:
        rows = [charts.Change(v.name, d.change, (low, high), d.min_effect, d.answer,
                              m.regressed)
                for v in report.variants for m in v.metrics if m.metric == metric
                and (d := m.detection) is not None and d.change is not None
                and d.interval is not None and (low := d.interval[0]) is not None
                and (high := d.interval[1]) is not None]
        if rows:
            title = f"Change of the {WHAT[metric]} against the baseline" + (
                " (rate points)" if metric in BINARY else " (worse is positive)")
            made.append((title, charts.change_chart(title, rows, partial(change, metric),
                                                    partial(axis, metric))))
    return made


def render_sweep_html(report: SweepReport, hunt_links: Mapping[str, str] | None = None) -> str:
    """The page; ``hunt_links``: the hunt campaign's report file, by campaign id, where one
    was written beside this page."""
    environment = page.environment()
    environment.filters.update(commit=commit_text)
    written = environment.get_template("sweep.html.j2").render(
        r=report, csp=CSP, style=Markup(STYLE), script=Markup(SORT_SCRIPT),
        title=f"bisect sweep {report.sweep} — run {report.run.seq}",
        css=CSS.get(report.answer.status, "warn"),
        rows=[(v, m, cells(m), len(v.metrics) if i == 0 else 0)
              for v in report.variants for i, m in enumerate(v.metrics)],
        history=history_rows(report), history_charts=_history_charts(report),
        change_charts=_change_charts(report), hunt_links=dict(hunt_links or {}),
        facts=shown_facts(report), what=WHAT, fmt_value=value, fmt_change=change, fmt_sides=sides,
        fmt_interval=interval)
    return clean(written)


HTML = Writes("html", ".html", render_sweep_html)
