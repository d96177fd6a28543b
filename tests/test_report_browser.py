"""The HTML report in a real headless Chromium (Debian's, driven by Playwright), opened as a file
with every request but the file itself aborted.

The real campaign (tests/support/report_campaigns.py: twins, a corruption culprit and a wedging
culprit) must show its verdict, its tables and every chart, sort its variants table by mouse and
keyboard, and load nothing but itself. A hostile campaign, stored through the Store API with a
campaign name, a server's evidence and log lines that would run script if the report did not
escape them, must run nothing and show them as text.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from db import LogRow, StepRow, Store
from experiments.campaign import Campaign
from orchestrator.cli import app
from orchestrator.reports.campaign.build import build_report
from orchestrator.reports.campaign.html import write_report
from orchestrator.reports.campaign.model import Report
from orchestrator.stored import create_campaign
from tests.postgres_fixture import unavailable
from tests.support.browser import (
    HEIGHT,
    WIDTH,
    Loaded,
    browser_fixture,  # noqa: F401 - its headless Chromium
    decode_png,
    opened,
    overflows,
    written_and_opened,
)
from tests.support.report_campaigns import (
    CULPRIT,
    WEDGE_CULPRIT,
    ReportCampaigns,
    report_campaigns_fixture,  # noqa: F401 - the real campaigns
)
from tests.support.stored import TIMING, campaign_spec, metrics, sessions

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

HOSTILE_NAME = "<script>window.PWNED=1</script> </textarea> {{ range(7) }} ]]>"
HOSTILE_EVIDENCE = ('<img src=x onerror="window.PWNED=2"></textarea><script>window.PWNED=3'
                    '</script>{{ range(7) }}]]>' + b"\xff\xfe".decode("utf-8", "replace"))
HOSTILE_LOG = '<svg onload="window.PWNED=4"></svg> Abort request ]]>'


@pytest.fixture(scope="module")
def model(report_campaigns: ReportCampaigns) -> Report:
    """The real campaign's report model: what the page must show."""
    with Store.open(report_campaigns.store_arg) as store:
        return build_report(store, report_campaigns.culprit)


@pytest.fixture(scope="module")
def real(browser: Browser, report_campaigns: ReportCampaigns,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    yield from written_and_opened(browser, report_campaigns.store_arg,
                                  report_campaigns.culprit, tmp_path_factory)


def hostile_campaign(store: Store) -> str:
    """test_store's factorial campaign with its culprit, stored through the Store API, with a
    hostile name, a hostile leak in each corrupted session and a hostile wedge log line (with
    a time, so its chart marks it) in every trial. Its id."""
    spec = Campaign.model_validate(campaign_spec(HOSTILE_NAME))
    campaign_id = create_campaign(store, spec, "test")
    stress_at = datetime.now(UTC).replace(microsecond=0)
    stamp = (stress_at + timedelta(seconds=1)).astimezone().strftime("[%Y-%m-%d %H:%M:%S]")
    seq = 0
    for index_k in ("fp8", "bf16"):
        for hicache in ("off", "on"):
            levels = {"index_k": index_k, "hicache": hicache}
            variant = store.variant(campaign_id, levels)
            for _ in range(3):
                trial = store.start_trial(campaign_id, variant.id, seq, "pool-1", seed=seq)
                leaks = 12 if levels == CULPRIT else 0
                rows = [dataclasses.replace(row, evidence=HOSTILE_EVIDENCE) if row.evidence
                        else row for row in sessions(80, leaks=leaks)]
                logs = [LogRow("decode", 9, "abort", f"{stamp} {HOSTILE_LOG}")]
                store.finish_trial(trial, TIMING, rows, metrics(4), logs,
                                   steps=[StepRow("stress", None, stress_at, 2.0, "ok")])
                seq += 1
    store.set_campaign_status(campaign_id, "done", finished=True)
    return campaign_id


@pytest.fixture(scope="module")
def hostile(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    directory = tmp_path_factory.mktemp("hostile")
    with Store.open(str(directory / "bisect.db")) as store:
        path = write_report(store, hostile_campaign(store), directory / "report.html")
    seen = opened(browser, path)
    yield seen
    seen.page.close()


def _rows(page: Page, table: str) -> list[list[str]]:
    """The data rows (not the header) of a table, as the text of their cells."""
    rows = page.locator(f"{table} tbody tr")
    return [[cell.strip() for cell in rows.nth(i).locator("td").all_inner_texts()]
            for i in range(rows.count())]


def _column(page: Page, table: str, header: str) -> list[str]:
    """A column's cells, by its header's name (a sortable header's button text)."""
    heads = page.evaluate("table => Array.from(document.querySelectorAll(table + ' thead th'))"
                          ".map(th => (th.querySelector('button') || th).textContent.trim())",
                          table)
    return [row[heads.index(header)] for row in _rows(page, table)]


@pytest.mark.real
def test_the_page_loads_nothing_but_itself_and_logs_no_error(real: Loaded) -> None:
    assert real.requests == [real.url]
    assert real.console == [] and real.dialogs == []
    # and nothing waits to load later (a lazy image, a font, a prefetch)
    resources = real.page.evaluate(
        "performance.getEntriesByType('resource').map(entry => entry.name)")
    assert resources == []


@pytest.mark.real
def test_the_verdict_comes_first_with_its_confidence_culprits_and_cost(real: Loaded) -> None:
    page = real.page
    headline = page.locator("#headline")
    assert headline.is_visible() and headline.bounding_box() is not None
    assert (headline.bounding_box() or {"y": 1e9})["y"] < HEIGHT  # above the fold
    assert page.locator("#status").inner_text() == "culprit"
    verdict = page.locator("#verdict").inner_text()
    assert all(f"{f}={lvl}" in verdict for f, lvl in CULPRIT.items()), verdict
    assert re.search(r"p = [0-9.e-]+", page.locator("#confidence").inner_text())
    cost = page.locator("#cost-line").inner_text()
    assert re.search(r"\d+ trials, \d+ restarts, \d+ sessions", cost) and "GPU time" in cost
    [corruption] = _rows(page, "#culprits-corruption")
    assert corruption[0] == " AND ".join(f"{f}={lvl}" for f, lvl in CULPRIT.items())
    wedging = [row[0] for row in _rows(page, "#culprits-wedging")]
    assert " AND ".join(f"{f}={lvl}" for f, lvl in WEDGE_CULPRIT.items()) in wedging


@pytest.mark.real
def test_the_variants_table_marks_culprits_and_the_known_variants(real: Loaded) -> None:
    page = real.page
    assert page.locator("#variants").is_visible()
    rows = _rows(page, "#variants")
    assert sorted((row[0], row[1]) for row in rows) == [
        ("bf16", "off"), ("bf16", "on"), ("fp8", "off"), ("fp8", "on")]
    marked = {(r.locator("td").nth(0).inner_text(), r.locator("td").nth(1).inner_text())
              for r in page.locator("#variants tbody tr.culprit").all()}
    assert marked == {tuple(CULPRIT.values()), tuple(WEDGE_CULPRIT.values())}
    assert page.locator("#variants .tag.known-good").count() == 1
    assert page.locator("#variants .tag.known-bad").count() == 1


@pytest.mark.real
def test_every_chart_is_drawn_and_visible(real: Loaded) -> None:
    page = real.page
    for chart in ("#chart-rates svg", "#chart-interaction svg", "#chart-latency svg"):
        svg = page.locator(chart)
        assert svg.count() == 1 and svg.is_visible(), chart
        box = svg.bounding_box()
        assert box is not None and box["width"] > 200 and box["height"] > 80, chart
    assert page.locator("#chart-rates rect.bar").count() == 4
    assert page.locator("#chart-interaction polyline.line").count() == 2
    series = page.locator("#chart-series svg.series")
    assert series.count() > 0 and all(series.nth(i).is_visible() for i in range(series.count()))
    assert page.locator("#chart-series polyline.running").count() > 0
    # the wedging culprit's trials logged wedge events, marked on their time series
    assert page.locator("#chart-series g.event").count() > 0


@pytest.mark.real
def test_the_decision_trail_shows_counts_p_values_and_thresholds(real: Loaded,
                                                                  model: Report) -> None:
    page = real.page
    assert page.locator("#log").is_visible()
    rows = _rows(page, "#log")
    assert len(rows) == len(model.trail) > 0
    heads = [h.strip() for h in page.locator("#log thead th").all_text_contents()]
    shown = [dict(zip(heads, row, strict=True)) for row in rows]
    for step, row in zip(model.trail, shown, strict=True):
        assert row["answer"] == step.answer and row["step"] == step.phase
        assert row["failed"] == f"{step.failures}/{step.judged}"
        assert row["p (worse than good)"] == _p(step.p_fail)
        assert row["fails at ≤"] == _p(step.fail_at)
        assert row["p (better than bad)"] == _p(step.p_pass)
        assert row["passes at ≤"] == _p(step.pass_at)
    tested = [row for row in shown if row["p (worse than good)"] != "–"]
    assert tested and all(row["fails at ≤"] != "–" for row in tested)  # each with its threshold
    assert {"fail", "pass"} <= {row["answer"].split()[0] for row in shown}


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.2g}"


@pytest.mark.real
def test_sorting_by_a_header_orders_the_rows(real: Loaded) -> None:
    page = real.page

    def rates() -> list[float]:
        return [float(r.split("%")[0]) for r in _column(page, "#variants", "rate")]

    def order() -> list[str]:
        return [row.get_attribute("data-key") or "" for row in
                page.locator("#variants tbody tr").all()]

    before = order()
    button = page.locator("#variants thead th button", has_text="rate")
    button.click()
    assert rates() == sorted(rates())
    assert page.locator("#variants thead th[aria-sort]").get_attribute("aria-sort") == \
        "ascending"
    ascending = order()
    button.click()
    assert rates() == sorted(rates(), reverse=True) and rates() != sorted(rates())
    assert order() != ascending and sorted(order()) == sorted(before)  # moved, none lost
    # by keyboard: a header is a button, reached by focus and pressed by Enter
    sessions = page.locator("#variants thead th button", has_text="index_k")
    sessions.focus()
    page.keyboard.press("Enter")
    assert _column(page, "#variants", "index_k") == sorted(_column(page, "#variants",
                                                                   "index_k"))


@pytest.mark.real
def test_evidence_is_collapsed_until_opened_and_shows_its_triage(real: Loaded) -> None:
    page = real.page
    excerpts = page.locator("#evidence details.excerpt")
    assert excerpts.count() > 0
    first = excerpts.first
    assert first.get_attribute("open") is None and not first.locator("pre").is_visible()
    assert "markup" in first.locator(".triage").inner_text()
    first.locator("summary").click()
    assert first.locator("pre").is_visible() and first.locator("pre").inner_text()


@pytest.mark.real
def test_provenance_names_the_nodes_and_redacts_the_secret(real: Loaded) -> None:
    page = real.page
    assert page.locator("#provenance-facts").is_visible()
    assert page.locator("#nodes").is_visible()
    page.locator("#campaign-file summary").click()
    campaign_file = page.locator("#campaign-file pre").inner_text()
    assert "factors" in campaign_file and "sk-report-fixture" not in page.content()


@pytest.mark.real
def test_a_screenshot_of_the_whole_report(real: Loaded, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    real.page.screenshot(path=str(shot), full_page=True)
    width, height, pixels = decode_png(shot.read_bytes())
    assert width == WIDTH and height > HEIGHT  # the whole report, longer than the window
    assert len(set(pixels)) > 32  # text, tables and colours, not a blank page


@pytest.mark.real
def test_no_table_scrolls_sideways_or_overflows_at_1280_px(real: Loaded, hostile: Loaded) -> None:
    # the latency columns are in a table of their own, beside the failures' table
    for seen in (real, hostile):
        assert overflows(seen.page) == []
    assert real.page.locator("#variants-performance tbody tr").count() == 4


@pytest.mark.real
def test_the_compare_and_index_pages_fit_1280_px(browser: Browser,
                                                 report_campaigns: ReportCampaigns,
                                                 tmp_path: Path) -> None:
    store = ["--store", report_campaigns.store_arg]
    compared, site = tmp_path / "compare.html", tmp_path / "site"
    for args in (["report", report_campaigns.clean, "--compare", report_campaigns.culprit,
                  "-o", str(compared)], ["report", "--index", "-o", str(site)]):
        done = CliRunner().invoke(app, [*args, *store])
        assert done.exit_code == 0, done.output
    for path in (compared, site / "index.html"):
        seen = opened(browser, path)
        assert overflows(seen.page) == [], path
        assert seen.page.locator("th").count() > 5
        seen.page.close()


@pytest.mark.real
def test_hostile_names_and_evidence_are_text_and_nothing_runs(hostile: Loaded) -> None:
    page = hostile.page
    assert page.evaluate("typeof window.PWNED") == "undefined"
    assert hostile.dialogs == [] and hostile.console == []
    assert hostile.requests == [hostile.url]
    assert page.locator("script").count() == 1  # ours, allowed by its hash
    assert page.locator("img").count() == 0 and page.locator("textarea").count() == 0
    assert page.locator("body svg svg, foreignObject").count() == 0
    assert page.locator("h1").inner_text() == HOSTILE_NAME
    assert page.title() == f"bisect — {HOSTILE_NAME}"
    details = page.locator("#evidence details.excerpt")
    for i in range(details.count()):
        details.nth(i).locator("summary").click()
    shown = page.locator("#evidence pre").all_inner_texts()
    assert HOSTILE_EVIDENCE in shown
    assert "{{ range(7) }}" in page.locator("h1").inner_text()  # no template ran over it either
    events = page.locator("#chart-series g.event title").all_text_contents()
    assert events and all(HOSTILE_LOG in text for text in events)
    assert page.locator("#status").inner_text() == "culprit"  # and the page still renders
    assert page.locator("#chart-rates rect.bar").count() == 4


@pytest.mark.pure
def test_a_missing_browser_or_server_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing"):
        unavailable("missing")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="missing"):
        unavailable("missing")

