"""The HTML report in a real headless Chromium (Debian's, driven by Playwright).

A finished campaign with a culprit is stored through the Store API, with a campaign name and a
server's evidence that would run script if the report did not escape them. The page must show the
verdict, run nothing and load nothing but itself.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from db import Store
from orchestrator.reports.html import write_report
from tests.postgres_fixture import unavailable
from tests.test_store import culprit_campaign

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, Route

CHROMIUM = Path("/usr/bin/chromium")  # Debian's (`make system-packages`); Playwright's own
# browser download cannot work here. The flags keep it from calling home.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
HOSTILE_NAME = "<script>window.PWNED=1</script>"
HOSTILE_EVIDENCE = '<img src=x onerror="window.PWNED=2">'
WIDTH, HEIGHT = 1200, 900


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing (`make system-packages` installs chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (the `dev` extra has it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("report")
    with Store.open(str(directory / "bisect.db")) as store:
        campaign_id = culprit_campaign(store, name=HOSTILE_NAME, evidence=HOSTILE_EVIDENCE)
        return write_report(store, campaign_id, directory / "report.html")


@dataclass
class Loaded:
    page: Page
    url: str
    requests: list[str] = field(default_factory=list)  # every request the page made
    console: list[str] = field(default_factory=list)  # console errors and page errors
    dialogs: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def loaded(browser: Browser, report: Path) -> Iterator[Loaded]:
    """The report opened as a file; any request but the file itself is recorded and aborted."""
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    seen = Loaded(page, report.as_uri())

    def route(intercepted: Route) -> None:
        seen.requests.append(intercepted.request.url)
        if intercepted.request.url == seen.url:
            intercepted.continue_()
        else:
            intercepted.abort()

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            seen.console.append(message.text)

    def on_dialog(dialog: Dialog) -> None:
        seen.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.route("**/*", route)
    page.on("console", on_console)
    page.on("pageerror", lambda error: seen.console.append(f"page error: {error}"))
    page.on("dialog", on_dialog)
    page.goto(seen.url, wait_until="load")
    try:
        yield seen
    finally:
        page.close()


def _rows(page: Page, table: str) -> list[list[str]]:
    """The data rows (not the header) of a table, as the text of their cells."""
    rows = page.locator(f"{table} tr:has(td)")
    return [[cell.strip() for cell in rows.nth(i).locator("td").all_inner_texts()]
            for i in range(rows.count())]


def test_the_verdict_names_the_culprit(loaded: Loaded) -> None:
    page = loaded.page
    assert page.locator("#status").inner_text() == "culprit"
    assert "culprit" in (page.locator("#status").get_attribute("class") or "").split()
    [culprit] = _rows(page, "#culprits")
    assert culprit[0] == "index_k=bf16 AND hicache=on" and culprit[1] == "interaction"


def test_one_row_per_variant(loaded: Loaded) -> None:
    page = loaded.page
    rows = _rows(page, "#variants")
    assert sorted((row[0], row[1]) for row in rows) == [
        ("bf16", "off"), ("bf16", "on"), ("fp8", "off"), ("fp8", "on")]
    bad = page.locator("#variants tr.bad td").all_inner_texts()
    assert bad[:2] == ["bf16", "on"] and page.locator("#variants tr.bad").count() == 1


def test_names_and_evidence_are_shown_as_text_and_nothing_runs(loaded: Loaded) -> None:
    page = loaded.page
    assert page.evaluate("typeof window.PWNED") == "undefined"
    assert loaded.dialogs == [] and loaded.console == []
    assert page.locator("script").count() == 0 and page.locator("img").count() == 0
    assert page.locator("h1").inner_text() == HOSTILE_NAME
    assert page.title() == f"bisect — {HOSTILE_NAME}"
    evidence = [row[4] for row in _rows(page, "#evidence")]
    assert HOSTILE_EVIDENCE in evidence
    assert any("<｜DSML｜invoke" in text for text in evidence)


def test_the_page_loads_nothing_but_itself(loaded: Loaded) -> None:
    assert loaded.requests == [loaded.url]
    # and nothing waits to load later (a lazy image, a font, a prefetch)
    resources = loaded.page.evaluate(
        "performance.getEntriesByType('resource').map(entry => entry.name)")
    assert resources == []


def test_a_screenshot_of_the_whole_report(loaded: Loaded, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    loaded.page.screenshot(path=str(shot), full_page=True)
    width, height, pixels = _png(shot.read_bytes())
    assert width == WIDTH and height > HEIGHT  # the whole report, longer than the window
    assert len(set(pixels)) > 32  # text, tables and colours, not a blank page


def _png(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed image data of a PNG (stdlib only)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    chunks: dict[bytes, bytes] = {}
    at = 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind = data[at + 4:at + 8]
        chunks[kind] = chunks.get(kind, b"") + data[at + 8:at + 8 + length]
        at += 12 + length
    width, height = struct.unpack(">II", chunks[b"IHDR"][:8])
    return int(width), int(height), zlib.decompress(chunks[b"IDAT"])


def test_a_missing_browser_or_server_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing"):
        unavailable("missing")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="missing"):
        unavailable("missing")
