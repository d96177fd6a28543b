"""The HTML report: one self-contained file rendered from the report model by Jinja (autoescaped),
with inline SVG charts (``charts``) and one small inline script (sorting the variants table),
allowed by its sha256 hash in the page's Content-Security-Policy. Nothing is fetched."""

from __future__ import annotations

import base64
import hashlib
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from db.store import Store
from experiments.optimize_config import MAXIMIZED
from experiments.outcomes import CORRUPTION
from orchestrator.reports import charts, optimize_text
from orchestrator.reports.build import build_report
from orchestrator.reports.files import clean, write_private
from orchestrator.reports.model import Report, VariantRow
from orchestrator.reports.optimize_charts import pareto_figure

# Sorts a table.sortable by the column whose header button was pressed (a button: reachable by
# Tab, pressed by Enter or Space); a cell's data-sort holds its raw value, empty sorts last.
SORT_SCRIPT = """
(function () {
  "use strict";
  function key(row, column) {
    var cell = row.cells[column];
    var raw = !cell ? "" : cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort")
      : cell.textContent.trim();
    var number = raw === "" ? NaN : Number(raw);
    return { empty: raw === "", number: number, text: raw };
  }
  function compare(a, b) {
    if (a.empty || b.empty) { return (a.empty ? 1 : 0) - (b.empty ? 1 : 0); }
    if (!isNaN(a.number) && !isNaN(b.number)) { return a.number - b.number; }
    return a.text.localeCompare(b.text, undefined, { numeric: true });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
    heads.forEach(function (head, column) {
      var button = head.querySelector("button");
      if (!button) { return; }
      button.addEventListener("click", function () {
        var ascending = head.getAttribute("aria-sort") !== "ascending";
        heads.forEach(function (other) { other.removeAttribute("aria-sort"); });
        head.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows).map(function (row, index) {
          return { row: row, key: key(row, column), index: index };
        });
        rows.sort(function (a, b) {
          var order = compare(a.key, b.key);
          if (!a.key.empty && !b.key.empty && !ascending) { order = -order; }
          return order || a.index - b.index;
        });
        rows.forEach(function (item) { body.appendChild(item.row); });
      });
    });
  });
})();
"""
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(SORT_SCRIPT.encode()).digest()).decode()
# default-src 'none': no fetch, frame, font, image or connection of any kind; only our own
# script by its hash (an injected one has another), inline styles for the page and its charts.
CSP = (f"default-src 'none'; script-src '{SCRIPT_HASH}'; style-src 'unsafe-inline'; "
       "base-uri 'none'; form-action 'none'")


def label(levels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in levels.items())


def _pct(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value * 100:.1f}%"


def _p(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.2g}"


def _num(value: float | None, digits: int = 0) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


def _sort(value: float | None) -> str:
    """A cell's sort key: the raw number, or empty (sorted last)."""
    return "" if value is None or not math.isfinite(value) else repr(float(value))


def _duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours}h {rest // 60:02d}m" if hours else f"{rest // 60}m {rest % 60:02d}s"


def _clean(value: object) -> str:
    return clean(str(value))


def _environment() -> Environment:
    environment = Environment(
        loader=PackageLoader("templates", ""),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True),
        trim_blocks=True, lstrip_blocks=True)
    environment.filters.update(pct=_pct, p=_p, num=_num, sortkey=_sort, duration=_duration,
                               label=label, clean=_clean, when=when)
    # a search's figures, read as every format reads them (optimize_text)
    environment.filters.update(
        figure=optimize_text.number, objective=optimize_text.value,
        interval=optimize_text.interval, counts=optimize_text.counts,
        confidence=optimize_text.confidence, marks=optimize_text.marks,
        versus=optimize_text.versus_text,
        direction=lambda metric: "higher is better" if metric in MAXIMIZED
        else "lower is better")
    return environment


def when(value: str | None, seconds: bool = True) -> str:
    """An ISO time as a reader wants it (UTC, to the second or the minute); as stored when it
    is not one."""
    if not value:
        return "–"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC")


def _ordered(levels: dict[str, str], report: Report) -> str:
    """A variant's levels in the campaign's factor order."""
    order = [f for f in report.campaign.factors if f in levels]
    return label({f: levels[f] for f in [*order, *(f for f in levels if f not in order)]})


def _short(levels: dict[str, str], report: Report) -> str:
    """A variant as a chart labels it: a commit campaign's by 12 characters of its commit; one
    with a known-good variant by the levels where it differs from known-good (four factors
    spelled out do not fit beside a bar); else by all its levels."""
    if report.commits is not None and list(levels) == ["commit"]:
        return levels["commit"][:12]
    good = report.campaign.known_good
    if good and set(good) == set(levels):
        differ = {f: lvl for f, lvl in levels.items() if good[f] != lvl}
        return _ordered(differ, report) if differ else "known-good"
    return _ordered(levels, report)


def _charts(report: Report) -> dict[str, Any]:
    variants: list[VariantRow] = report.variants
    named = {v.key: _short(v.levels, report) for v in variants}
    rates = charts.rate_chart([
        charts.RateBar(_short(v.levels, report), v.rate, v.ci95, v.corrupted, v.sessions,
                       v.role, v.culprit, v.lower_bound) for v in variants])
    latency = charts.latency_chart([
        charts.Latency(_short(v.levels, report), v.ttft_p50_ms, v.ttft_p99_ms, v.itl_p50_ms,
                       v.itl_p99_ms, v.culprit) for v in variants])
    interaction = None
    if report.interaction is not None:
        interaction = charts.interaction_chart(
            report.interaction.row_factor, report.interaction.line_factor,
            [charts.Point(p["row_level"], p["line_level"], p["rate"], p["ci95"], p["sessions"])
             for p in report.interaction.points])
    series = [
        charts.series_chart(
            f"trial {s.trial_id} · {named.get(s.variant, s.variant)} · {s.pool}/{s.service}",
            s.running, s.queued, [charts.Event(e["t_s"], e["kind"], e["text"]) for e in s.events])
        for s in sorted(report.series, key=lambda s: (s.trial_id, s.pool, s.service))]
    pareto = pareto_figure(report.optimize) if report.optimize is not None else None
    return {"rates": rates, "latency": latency, "interaction": interaction, "series": series,
            "pareto": pareto}


def render_html(report: Report) -> str:
    template = _environment().get_template("report.html.j2")
    return template.render(
        report=report, csp=CSP, script=Markup(SORT_SCRIPT), charts=_charts(report),
        factors=list(report.campaign.factors),
        variant_labels={v.key: _ordered(v.levels, report) for v in report.variants},
        against_good=bool(report.campaign.known_good) and report.commits is None,
        # a search lists its own undeployable configurations (templates/optimize.html.j2)
        unresolvable=report.unresolvable if report.optimize is None else [],
        outcome_classes=sorted({o for v in report.variants for o, n in v.outcomes.items()
                                if n and o in CORRUPTION}),
        evidence_classes=list(dict.fromkeys(e.outcome for e in report.evidence)))


def render_report(store: Store, campaign_id: str) -> str:
    return render_html(build_report(store, campaign_id))


def write_report(store: Store, campaign_id: str, path: Path) -> Path:
    """The campaign's HTML report at ``path``: owner-only, replaced in one step."""
    return write_private(path, render_report(store, campaign_id))
