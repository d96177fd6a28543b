"""Checks that a report's Markdown and HTML carry no markup from their content: every Markdown
table stays a table (a GFM parser reads each row with its own cells), and an HTML page holds no
tag, attribute or script that content brought."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from markdown_it import MarkdownIt

# What content could bring into a page as markup: a tag of these (escaped, it is text).
INJECTED = re.compile(r"<(script|img|textarea|svg|iframe)[\s>/]", re.I)
FORBIDDEN = {"img", "iframe", "textarea", "object", "embed", "link", "base", "svg", "a", "form"}


def unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def assert_tables_intact(markdown: str) -> list[list[list[str]]]:
    """Every table line has its header's number of cell separators, and a GFM parser reads
    every table back with one cell per column; no HTML comes out of content. The tables, as
    rows of cell texts."""
    for block in re.split(r"\n\s*\n", markdown):
        lines = [line for line in block.splitlines() if line.startswith("|")]
        if lines:
            assert len({unescaped_pipes(line) for line in lines}) == 1, block
    parser = MarkdownIt("commonmark").enable("table")
    tokens = parser.parse(markdown)
    own = {"<details><summary>", "</summary>", "</details>", "<sub>", "</sub>"}
    raw = [t.content for t in tokens if t.type == "html_block"]
    raw += [c.content for t in tokens for c in t.children or [] if c.type == "html_inline"]
    assert all(any(piece.strip().startswith(o) or piece.strip().endswith(o) for o in own)
               for piece in raw), raw
    rendered = parser.render(markdown)
    assert not INJECTED.search(rendered), INJECTED.search(rendered)
    for tag, attrs in tags(rendered).tags:  # no link, no image, no handler
        assert tag not in FORBIDDEN | {"script"}, (tag, attrs)
        # a number column's alignment, a diff's code block: nothing else
        assert attrs in ({}, {"style": "text-align:right"}, {"class": "language-diff"}), attrs
    tables: list[list[list[str]]] = []
    row: list[str] | None = None
    for token in tokens:
        if token.type == "table_open":
            tables.append([])
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append(token.content)
        elif token.type == "tr_close" and row is not None:
            tables[-1].append(row)
            row = None
    return tables


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def tags(page: str) -> Tags:
    parsed = Tags()
    parsed.feed(page)
    parsed.close()
    return parsed


def assert_inert_html(page: str, shown_braces: bool = True) -> str:
    """No tag or attribute from content: the only script is the page's own (no src), no
    event handler, no ``javascript:`` link; the CSP allows nothing from outside. Its text."""
    parsed = tags(page)
    scripts = 0
    for tag, attrs in parsed.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert not (attrs.get("href") or "").lower().strip().startswith("javascript"), attrs
        assert tag not in FORBIDDEN - {"a", "svg"}, (tag, attrs)
        if tag == "script":
            scripts += 1
            assert not attrs.get("src"), attrs
        if tag == "a":  # the index's links: a report's file beside it, or a fragment
            assert re.fullmatch(r"#[\w-]+|[\w.-]+\.html", attrs.get("href") or ""), attrs
    assert scripts <= 1
    [csp] = [a["content"] for t, a in parsed.tags if t == "meta"
             and (a.get("http-equiv") or "").lower() == "content-security-policy"]
    assert csp is not None and csp.startswith("default-src 'none'")
    text = "".join(parsed.text)
    if shown_braces:  # the hostile campaign's: shown, never run as a template (which prints
        # "range(0, 7)": a mark no figure of a report can make by chance, as "49" could)
        assert "{{ range(7) }}" in text and "range(0, 7)" not in text
    return text
