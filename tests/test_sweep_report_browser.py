"""The sweep report in a real headless Chromium (test_report_browser.py's), opened as a
file with every request but the file itself aborted.

The regression run of tests/sweep_report_support.py's sweep, written by `bisect sweep-report`
with its hunt's own report beside it: the answer first, the comparisons with the regressed
metric marked, every chart drawn with the baseline run and this run marked, the hunt linking
its own report, the history sortable by keyboard; a commit subject, a node fact and a run's
reason that would run script if the page did not escape them run nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

import orchestrator.cli.sweep_report_view  # noqa: F401 - registers `bisect sweep-report`
from orchestrator.cli import app
from orchestrator.reports.sweep.html import hunt_file_name
from tests.support.browser import (
    HEIGHT,
    Loaded,
    browser_fixture,  # noqa: F401 - its headless Chromium
    opened,
    overflows,
)
from tests.sweep_report_support import (
    HOSTILE_FACT,
    HOSTILE_REASON,
    HOSTILE_SUBJECT,
    SWEEP,
    SweepStore,
    sweep_store_fixture,  # noqa: F401 - the store of six runs
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.real

TYPEOF_PWNED = "typeof window.PWNED"


@pytest.fixture(scope="module")
def pages(sweep_store: SweepStore, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run 5's report (and its hunt's beside it) and run 3's, as the command writes them."""
    directory = tmp_path_factory.mktemp("sweep-pages")
    for seq, name in ((5, "run5.html"), (3, "run3.html")):
        done = CliRunner().invoke(app, ["sweep-report", SWEEP, "--run", str(seq), "--store",
                                        sweep_store.store_arg, "-o", str(directory / name)])
        assert done.exit_code == 0, done.output
    return directory


@pytest.fixture(scope="module")
def regression(browser: Browser, pages: Path) -> Iterator[Loaded]:
    seen = opened(browser, pages / "run5.html")
    yield seen
    seen.page.close()


def test_the_page_loads_nothing_but_itself_and_logs_no_error(regression: Loaded) -> None:
    assert regression.requests == [regression.url]
    assert regression.console == [] and regression.dialogs == []  # the CSP let it all be
    assert regression.page.evaluate(
        "performance.getEntriesByType('resource').map(entry => entry.name)") == []


def test_the_answer_comes_first(regression: Loaded) -> None:
    page = regression.page
    answer = page.locator("#answer")
    assert answer.is_visible() and (answer.bounding_box() or {"y": 1e9})["y"] < HEIGHT
    assert page.locator("#status").inner_text() == "REGRESSION confirmed"
    assert page.locator("#exit").inner_text().startswith("exit 1")
    assert "hicache-on: corruption" in page.locator("#sentence").inner_text()
    assert page.locator("#baseline").inner_text().startswith("Baseline: run 2")


def test_the_comparisons_mark_the_regressed_metric(regression: Loaded) -> None:
    page = regression.page
    rows = page.locator("#comparisons tbody tr")
    assert rows.count() == 12
    marked = page.locator("#comparisons tbody tr.regressed")
    assert marked.count() == 1
    assert (marked.get_attribute("data-variant"), marked.get_attribute("data-metric")) == (
        "hicache-on", "corruption")
    assert "different" in marked.locator("td.different").first.inner_text()


def test_every_chart_is_drawn_with_the_baseline_and_this_run_marked(regression: Loaded) -> None:
    page = regression.page
    history = page.locator("#history-charts svg")
    assert history.count() == 4
    for i in range(4):
        chart = history.nth(i)
        assert chart.is_visible()
        box = chart.bounding_box()
        assert box is not None and box["width"] > 200 and box["height"] > 100
        assert chart.locator("g.baseline-run").count() == 1
        assert chart.locator("g.current-run").count() == 1
        assert chart.locator("g.unmeasured").count() == 3  # skipped, missed, unreadable
    assert page.locator("#history-charts svg g.regressed").count() == 1  # corruption's line
    changes = page.locator("#change-charts svg")
    assert changes.count() == 4 and all(changes.nth(i).is_visible() for i in range(4))
    assert page.locator("#change-charts circle.change").count() == 8  # two variants compared


def test_the_hunt_links_its_own_report(regression: Loaded, browser: Browser,
                                       sweep_store: SweepStore, pages: Path) -> None:
    link = regression.page.locator("#hunt-report")
    assert link.is_visible()
    assert link.get_attribute("href") == hunt_file_name(sweep_store.hunt_campaign)
    hunt = opened(browser, pages / (link.get_attribute("href") or ""))
    try:
        assert hunt.console == [] and hunt.requests == [hunt.url]
        assert hunt.page.locator("#status").inner_text() == "culprit"
        assert HOSTILE_SUBJECT in hunt.page.locator("#first-bad").inner_text()
        assert hunt.page.evaluate(TYPEOF_PWNED) == "undefined"
    finally:
        hunt.page.close()


def test_the_history_sorts_by_keyboard(regression: Loaded) -> None:
    page = regression.page

    def column(index: int) -> list[str]:
        return page.locator("#history tbody tr").evaluate_all(
            f"rows => rows.map(r => r.cells[{index}].getAttribute('data-sort') ?? "
            "r.cells[" + str(index) + "].textContent.trim())")

    button = page.locator("#history thead th button", has_text="corruption")
    button.focus()
    page.keyboard.press("Enter")
    shown = [float(v) for v in column(6) if v]
    assert shown == sorted(shown) and max(shown) > 0.5
    assert column(6)[-3:] == ["", "", ""]  # the runs that measured nothing sort last
    page.keyboard.press("Enter")
    shown = [float(v) for v in column(6) if v]
    assert shown == sorted(shown, reverse=True)


def test_hostile_text_is_text_and_nothing_runs(regression: Loaded, browser: Browser,
                                               pages: Path) -> None:
    page = regression.page
    assert page.evaluate(TYPEOF_PWNED) == "undefined"
    assert page.locator("script").count() == 1  # ours, allowed by its hash
    assert page.locator("img").count() == 0 and page.locator("body svg svg").count() == 0
    assert HOSTILE_SUBJECT in page.locator("#hunt").inner_text()
    assert HOSTILE_FACT in page.locator("#changes").inner_text()
    assert HOSTILE_REASON in page.locator("#history").inner_text()
    notes = page.locator("#history-charts g.unmeasured title").all_text_contents()
    assert any(HOSTILE_REASON in note for note in notes)
    skipped = opened(browser, pages / "run3.html")
    try:
        assert skipped.page.evaluate(TYPEOF_PWNED) == "undefined" and skipped.console == []
        assert skipped.page.locator("#status").inner_text() == "Skipped"
        assert HOSTILE_REASON in skipped.page.locator("#sentence").inner_text()
        assert skipped.page.locator("#exit").inner_text().startswith("exit 4")
    finally:
        skipped.page.close()


def test_no_table_scrolls_sideways_or_overflows_at_1280_px(regression: Loaded) -> None:
    assert overflows(regression.page) == []
