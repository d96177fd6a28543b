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


# Every table of a page at a laptop's width: the page must not scroll sideways, no table's
# scrolling wrapper may need to, and no header or cell may hold text wider than itself.
LAYOUT_WIDTH, LAYOUT_HEIGHT = 1280, 800
_OVERFLOWS = r"""() => {
  const found = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth) {
    found.push(`the page scrolls sideways: ${root.scrollWidth} > ${root.clientWidth} px`);
  }
  const closed = Array.from(document.querySelectorAll("details")).filter(d => !d.open);
  closed.forEach(d => { d.open = true; });
  document.querySelectorAll("table").forEach((table, at) => {
    const name = table.id || `table ${at + 1}`;
    const box = table.closest(".scroll");
    if (box && box.scrollWidth > box.clientWidth) {
      found.push(`${name} scrolls sideways: ${box.scrollWidth} > ${box.clientWidth} px`);
    }
    table.querySelectorAll("th, td").forEach(cell => {
      if (cell.scrollWidth > cell.clientWidth) {
        found.push(`${name}: "${cell.textContent.trim().slice(0, 60)}" overflows its cell ` +
                   `(${cell.scrollWidth} > ${cell.clientWidth} px)`);
      }
    });
    // a header wraps between its words, never inside one: each word fits its cell's width
    table.querySelectorAll("th").forEach(head => {
      const style = getComputedStyle(head);
      const room = head.clientWidth - parseFloat(style.paddingLeft) -
        parseFloat(style.paddingRight);
      for (const word of head.textContent.trim().split(/\s+/).filter(w => w)) {
        const probe = document.createElement("span");
        probe.style.cssText = "position:absolute;visibility:hidden;white-space:nowrap";
        probe.textContent = word;
        (head.querySelector("button") || head).appendChild(probe);
        const width = probe.getBoundingClientRect().width;
        probe.remove();
        if (width > room + 0.5) {
          found.push(`${name}: the header "${head.textContent.trim()}" breaks inside ` +
                     `"${word}" (${Math.round(width)} > ${Math.round(room)} px)`);
        }
      }
    });
  });
  closed.forEach(d => { d.open = false; });  // as the reader left them
  return found;
}"""


def overflows(page: Page) -> list[str]:
    """What overflows on ``page`` at 1280x800 (every ``details`` opened while it looks, so the
    tables inside count too): empty when nothing does. The viewport is restored after."""
    before = page.viewport_size
    page.set_viewport_size({"width": LAYOUT_WIDTH, "height": LAYOUT_HEIGHT})
    try:
        found: list[str] = page.evaluate(_OVERFLOWS)
        assert page.locator("table").count() > 0, "no table on the page"
    finally:
        if before is not None:
            page.set_viewport_size(before)
    return found
