"""The HTML report of a search: the campaign's page (``campaign.html``) with the search's
answer in place of the culprits (``templates/optimize.html.j2``), its figures read as every
format reads them (``search.text``), and its Pareto front drawn."""

from __future__ import annotations

from experiments.optimize_config import MAXIMIZED
from orchestrator.reports import page
from orchestrator.reports.campaign.html import render_html
from orchestrator.reports.campaign.model import Report
from orchestrator.reports.renderer import Writes
from orchestrator.reports.search import text
from orchestrator.reports.search.charts import pareto_figure


def _direction(metric: str) -> str:
    return "higher is better" if metric in MAXIMIZED else "lower is better"


def render_search_html(report: Report) -> str:
    environment = page.environment(
        figure=text.number, objective=text.value, interval=text.interval, counts=text.counts,
        confidence=text.confidence, marks=text.marks, versus=text.versus_text,
        direction=_direction)
    pareto = pareto_figure(report.optimize) if report.optimize is not None else None
    return render_html(report, environment, pareto=pareto)


HTML = Writes("html", ".html", render_search_html)
