"""A search's HTML report in a real headless Chromium (test_report_browser.py's), opened
as a file with every request but the file itself aborted: the answer first, the ranked table
with the best configuration marked and sortable, the Pareto chart drawn with its front and
the rejected configurations, and a screenshot with content.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from db.store import Store
from orchestrator.reports.campaign.build import build_report
from orchestrator.reports.campaign.model import Report
from tests.support.browser import (
    HEIGHT,
    WIDTH,
    Loaded,
    browser_fixture,  # noqa: F401 - its headless Chromium
    decode_png,
    overflows,
    written_and_opened,
)
from tests.support.optimize_campaigns import (
    OptimizeCampaigns,
    optimize_campaigns_fixture,  # noqa: F401 - the stored searches
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser


pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def model(optimize_campaigns: OptimizeCampaigns) -> Report:
    with Store.open(optimize_campaigns.store_arg) as store:
        return build_report(store, optimize_campaigns.optimum)


@pytest.fixture(scope="module")
def search(browser: Browser, optimize_campaigns: OptimizeCampaigns,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    yield from written_and_opened(
        browser, optimize_campaigns.store_arg, optimize_campaigns.optimum, tmp_path_factory)


def test_the_page_loads_nothing_but_itself_and_logs_no_error(search: Loaded) -> None:
    assert search.requests == [search.url]
    assert search.console == [] and search.dialogs == []
    assert search.page.evaluate(
        "performance.getEntriesByType('resource').map(entry => entry.name)") == []


def test_the_answer_comes_first(search: Loaded, model: Report) -> None:
    assert model.optimize is not None and model.optimize.winner is not None
    page = search.page
    assert page.locator("#status").inner_text() == "optimum"
    box = page.locator("#headline").bounding_box()
    assert box is not None and box["y"] < HEIGHT
    verdict = page.locator("#verdict").inner_text()
    best = model.optimize.winner
    assert ", ".join(f"{f}={lvl}" for f, lvl in best.levels.items()) in verdict
    assert "tok/s" in verdict and "95% CI" in verdict
    assert page.locator("#culprits-corruption").count() == 0


def test_the_ranked_table_marks_the_best_and_sorts(search: Loaded, model: Report) -> None:
    assert model.optimize is not None
    page = search.page
    rows = page.locator("#ranked tbody tr")
    assert rows.count() == len(model.optimize.ranked)
    assert rows.first.locator(".tag.best").count() == 1
    assert rows.first.get_attribute("data-key") == model.optimize.ranked[0].key
    assert page.locator("#ranked").is_visible()

    def throughput() -> list[float]:
        return [float(v) for v in page.locator("#ranked tbody tr").evaluate_all(
            "rows => rows.map(r => r.cells[6].getAttribute('data-sort'))")]

    button = page.locator("#ranked thead th button", has_text="output_throughput")
    button.focus()
    page.keyboard.press("Enter")
    assert throughput() == sorted(throughput())
    page.keyboard.press("Enter")
    assert throughput() == sorted(throughput(), reverse=True)
    rejected = page.locator("#rejected tbody tr:not(.follows)")
    assert rejected.count() == len(model.optimize.rejected)
    # why, in a full-width row under its configuration, which moves with it when sorted
    why = page.locator("#rejected tbody tr.follows")
    assert why.count() == rejected.count()
    assert "upper bound" in why.first.locator("td.why").inner_text()
    for header in ("output_throughput", "trials"):
        page.locator("#rejected thead th button", has_text=header).click()
        assert page.locator("#rejected tbody tr.follows").evaluate_all(
            "rows => rows.every(r => r.previousElementSibling.dataset.key === "
            "r.dataset.follows)")


def test_the_pareto_chart_draws_the_front_and_the_rejected(search: Loaded,
                                                           model: Report) -> None:
    assert model.optimize is not None
    chart = search.page.locator("#chart-pareto svg")
    assert chart.count() == 1 and chart.is_visible()
    box = chart.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 200
    assert chart.locator("g.point.front").count() == len(model.optimize.pareto)
    assert chart.locator("g.point.best circle.best-ring").count() == 1
    assert chart.locator("g.point.rejected").count() == len(model.optimize.rejected)
    assert chart.locator("polyline.front-line").count() == (len(model.optimize.pareto) > 1)
    for mark in ("front", "rejected"):
        point = chart.locator(f"g.point.{mark}").first.bounding_box()
        assert point is not None and box["x"] <= point["x"] <= box["x"] + box["width"]


def test_a_screenshot_has_content(search: Loaded, tmp_path: Path) -> None:
    search.page.locator("#unproven summary").click()
    shot = tmp_path / "optimize.png"
    search.page.screenshot(path=str(shot), full_page=True)
    width, height, pixels = decode_png(shot.read_bytes())
    assert width == WIDTH and height > HEIGHT
    assert len(set(pixels)) > 32
    figure = tmp_path / "pareto.png"
    search.page.locator("#chart-pareto").screenshot(path=str(figure))
    assert len(set(decode_png(figure.read_bytes())[2])) > 16


def test_no_table_scrolls_sideways_or_overflows_at_1280_px(search: Loaded) -> None:
    assert overflows(search.page) == []
