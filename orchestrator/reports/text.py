"""Text every format of every family writes alike: a figure in words (``percent``, ``p_text``)
and Markdown made inert (``text``: whatever came from a campaign file or a server can end no
table cell or row, open no link, code span, HTML tag or math), with its tables.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from orchestrator.reports.files import clean

MAX_CELL = 200  # characters of one name or level: a table stays a table

# What can open markup inside a line: a backslash (it would undo the escapes), a code span,
# emphasis, a link or image, a table cell's end, strikethrough, math. (A list marker, a heading
# or a setext line needs the line's start, and every line here starts with text of its own.)
_PUNCTUATION = re.compile(r"([\\`*_\[\]|~$])")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def text(value: object, limit: int = MAX_CELL) -> str:
    """``value`` as inert Markdown text on one line: HTML's three specials as entities, every
    punctuation that opens markup backslash-escaped (GFM reads ``\\|`` inside a table cell),
    line breaks as a visible mark, control characters as U+FFFD."""
    raw = clean(str(value))
    if len(raw) > limit:
        raw = raw[:limit - 1] + "…"
    raw = raw.replace("\r\n", "\n").replace("\r", "\n").replace("\n", " ⏎ ").replace("\t", " ")
    escaped = _PUNCTUATION.sub(r"\\\1", raw)
    return "".join(_ENTITIES.get(char, char) for char in escaped)


def levels_text(levels: dict[str, str]) -> str:
    return ", ".join(f"{text(f)}={text(lvl)}" for f, lvl in levels.items()) or "–"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GFM table; every cell already escaped (``text``). Numbers right-aligned."""
    align = ["---:" if h.endswith("#") else "---" for h in header]
    lines = ["| " + " | ".join(h.removesuffix("#") for h in header) + " |",
             "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def percent(rate: float) -> str:
    """17%, 0.42%, 0%: three significant figures at most, plainly."""
    return "0%" if rate == 0 else f"{rate * 100:.3g}%"


def share(rate: float | None) -> str:
    """A session rate as every table, chart and sentence of a page shows it: 14.4%, 0.6%
    (one decimal, so that the same rate reads the same in each); '–' where there is none."""
    return "–" if rate is None or not math.isfinite(rate) else f"{rate * 100:.1f}%"


def p_text(p: float | None) -> str:
    """1e-9 rather than 1e-09; '–' where no test was made."""
    if p is None:
        return "–"
    shown = f"{p:.2g}"
    if "e" in shown:
        mantissa, exponent = shown.split("e")
        shown = f"{mantissa}e{int(exponent)}"
    return shown
