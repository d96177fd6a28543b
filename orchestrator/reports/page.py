"""What every HTML page of the reports shares: the Jinja environment (autoescaped, templates in
``templates/``) with the filters every family reads figures with, the one inline script (sorting
a table) allowed by its sha256 hash in a Content-Security-Policy, and the plain frame of the
index and compare pages (``page.html.j2``). No page fetches anything."""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from orchestrator.reports.files import clean
from orchestrator.reports.text import share

# Sorts a table.sortable by the column whose header button was pressed (a button: reachable by
# Tab, pressed by Enter or Space); a cell's data-sort holds its raw value, empty sorts last. A
# row of class "follows" (a wide note under its row) moves with the row before it.
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
        var rows = [];
        Array.prototype.slice.call(body.rows).forEach(function (row) {
          if (row.classList.contains("follows") && rows.length) {
            rows[rows.length - 1].after.push(row);
          } else {
            rows.push({ row: row, key: key(row, column), index: rows.length, after: [] });
          }
        });
        rows.sort(function (a, b) {
          var order = compare(a.key, b.key);
          if (!a.key.empty && !b.key.empty && !ascending) { order = -order; }
          return order || a.index - b.index;
        });
        rows.forEach(function (item) {
          body.appendChild(item.row);
          item.after.forEach(function (row) { body.appendChild(row); });
        });
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




def _pp(value: float | None) -> str:
    """A difference of two rates, in percentage points: +13.8 pp."""
    return "–" if value is None or not math.isfinite(value) else f"{value * 100:+.1f} pp"


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


def environment(**filters: Callable[..., Any]) -> Environment:
    """The reports' environment with every family's shared filters, and ``filters`` (a
    family's own: a search's figures)."""
    environment = Environment(
        loader=PackageLoader("templates", ""),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True),
        trim_blocks=True, lstrip_blocks=True)
    environment.filters.update(pct=share, pp=_pp, p=_p, num=_num, sortkey=_sort, duration=_duration,
                               label=label, clean=_clean, when=when, **filters)
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


# The style stays here, not in a template: its hash in the CSP is of these very bytes, and the
# page writes them unchanged (Markup, no escaping).
PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 76rem; color: #1d1d1f;
       padding: 0 1rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; width: 100%; margin: 1rem 0; font-size: .9rem; }
th, td { border-bottom: 1px solid #e5e5e5; padding: .35rem .6rem; text-align: left;
         vertical-align: top; }
td { overflow-wrap: anywhere; } /* a long name or id breaks; a header only between words */
th { background: #f6f6f6; } td.num, th.num { text-align: right;
                                             font-variant-numeric: tabular-nums; }
td.num { white-space: nowrap; }
.culprit, .worse { color: #9b1c1c; font-weight: 600; } .better, .no_culprit { color: #03543f; }
.inconclusive, .not_reproduced, .unknown { color: #723b13; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f6f6; padding: .6rem; }
.meta { color: #666; }
"""
PAGE_STYLE_HASH = "sha256-" + base64.b64encode(
    hashlib.sha256(PAGE_STYLE.encode()).digest()).decode()
PAGE_CSP = (f"default-src 'none'; style-src '{PAGE_STYLE_HASH}'; base-uri 'none'; "
            "form-action 'none'")


def _plain_environment() -> Environment:
    # Autoescaped: every page's templates are .html.j2. No trim_blocks (unlike
    # ``environment``'s): the pages keep the whitespace they have always had.
    environment = Environment(
        loader=PackageLoader("templates", ""),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True))
    environment.filters["clean"] = clean
    return environment


def render_page(title: str, template: str, **context: Any) -> str:
    """A self-contained page: ``template`` (one in ``templates/`` that extends
    ``page.html.j2``) rendered with ``context``, everything in it autoescaped, under the CSP."""
    return clean(_plain_environment().get_template(template).render(
        csp=PAGE_CSP, title=title, style=Markup(PAGE_STYLE), **context))


