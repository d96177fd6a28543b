"""The HTML report of a campaign: one self-contained file rendered from the report model by
Jinja (autoescaped, ``page.environment``), with inline SVG charts (``charts``) and the pages'
one small inline script (sorting the variants table), allowed by its hash in the CSP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment
from markupsafe import Markup

from db.store import Store
from experiments.outcomes import CORRUPTION
from orchestrator.reports import charts, page
from orchestrator.reports.campaign.build import build_report
from orchestrator.reports.campaign.model import Report, VariantRow
from orchestrator.reports.files import write_private
from orchestrator.reports.page import CSP, SORT_SCRIPT, label
from orchestrator.reports.renderer import Writes, render


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


def _named(variant: VariantRow, report: Report) -> str:
    """A variant as a sentence names it: as the charts label it, with its role."""
    short = _short(variant.levels, report)
    return f"{short} ({variant.role})" if variant.role and variant.role != short else short


def _charts(report: Report) -> dict[str, Any]:
    variants: list[VariantRow] = report.variants
    named = {v.key: _short(v.levels, report) for v in variants}
    rates = charts.rate_chart([  # the rate's own counts: failing over judged
        charts.RateBar(_short(v.levels, report), v.rate, v.ci95, v.failed, v.judged,
                       v.role, v.culprit, v.lower_bound, v.stopped_early) for v in variants])
    latency = charts.latency_chart([
        charts.Latency(_short(v.levels, report), v.ttft_p50_ms, v.ttft_p99_ms, v.itl_p50_ms,
                       v.itl_p99_ms, v.culprit) for v in variants])
    interaction = None
    if report.interaction is not None:
        interaction = charts.interaction_chart(
            report.interaction.row_factor, report.interaction.line_factor,
            [charts.Point(p["row_level"], p["line_level"], p["rate"], p["ci95"], p["sessions"],
                          p.get("failed"))
             for p in report.interaction.points])
    series = [
        charts.series_chart(
            f"trial {s.trial_id} · {named.get(s.variant, s.variant)} · {s.pool}/{s.service}",
            s.running, s.queued, [charts.Event(e["t_s"], e["kind"], e["text"]) for e in s.events])
        for s in sorted(report.series, key=lambda s: (s.trial_id, s.pool, s.service))]
    return {"rates": rates, "latency": latency, "interaction": interaction, "series": series}


def render_html(report: Report, environment: Environment | None = None,
                **figures: Markup | None) -> str:
    """The page of ``report``; a family that shows more (a search) gives its own filters in
    ``environment`` and its own ``figures`` (a search's Pareto front)."""
    template = (environment or page.environment()).get_template("report.html.j2")
    return template.render(
        report=report, csp=CSP, script=Markup(SORT_SCRIPT),
        charts={**_charts(report), **figures},
        factors=list(report.campaign.factors),
        variant_labels={v.key: _ordered(v.levels, report) for v in report.variants},
        variant_names={v.key: _named(v, report) for v in report.variants},
        against_good=bool(report.campaign.known_good) and report.commits is None,
        # a search lists its own undeployable configurations (templates/optimize.html.j2)
        unresolvable=report.unresolvable if report.optimize is None else [],
        outcome_classes=sorted({o for v in report.variants for o, n in v.outcomes.items()
                                if n and o in CORRUPTION}),
        evidence_classes=list(dict.fromkeys(e.outcome for e in report.evidence)))


def render_report(store: Store, campaign_id: str) -> str:
    """The campaign's HTML report, of its family (a search's is the search's)."""
    return render(build_report(store, campaign_id), "html")


def write_report(store: Store, campaign_id: str, path: Path) -> Path:
    """The campaign's HTML report at ``path``: owner-only, replaced in one step."""
    return write_private(path, render_report(store, campaign_id))


HTML = Writes("html", ".html", render_html)
