"""A real headless Chromium (Debian's, driven by Playwright) for the report tests, and a report
opened in it as a file with every request but the file itself recorded and aborted.

Use: ``from tests.support.browser import browser_fixture  # noqa: F401`` in a test module, then a
test or fixture takes ``browser: Browser`` (one Chromium per module that imports it).
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
from orchestrator.reports.campaign.html import write_report
from tests.postgres_fixture import unavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, Route

CHROMIUM = Path("/usr/bin/chromium")  # Debian's (`make system-packages`); Playwright's own
# browser download cannot work here. The flags keep it from calling home.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDTH, HEIGHT = 1200, 900


@pytest.fixture(scope="module", name="browser")
def browser_fixture() -> Iterator[Browser]:
    """A headless Chromium for the module that imports this fixture."""
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


@dataclass
class Loaded:
    page: Page
    url: str
    requests: list[str] = field(default_factory=list)  # every request the page made
    console: list[str] = field(default_factory=list)  # console errors and page errors
    dialogs: list[str] = field(default_factory=list)


def opened(browser: Browser, report: Path) -> Loaded:
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
    return seen


def written_and_opened(browser: Browser, store_arg: str, campaign_id: str,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    """A module fixture's body: the campaign's report written by ``write_report``, opened."""
    path = tmp_path_factory.mktemp("report") / "report.html"
    with Store.open(store_arg) as store:
        write_report(store, campaign_id, path)
    seen = opened(browser, path)
    yield seen
    seen.page.close()


def decode_png(data: bytes) -> tuple[int, int, bytes]:
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
