"""Every report format on hostile content: a campaign stored through the Store API whose name,
campaign file, leaked content, log lines and node facts carry ``<script>``, ``</textarea>``,
``{{ }}``, ``]]>``, invalid UTF-8 (as decoded) and control characters; and the same report with
hostile factor and level names and lone surrogates (which a campaign file's validation and the
store keep out, but a renderer must survive all the same).

The Markdown tables stay tables (a GFM parser reads every row with its own cells), no markup
comes from content; the JUnit file is well-formed XML (expat reads it); the HTML pages (report,
index, compare) hold no tag, attribute or script that the content brought. (Whether anything
runs in a browser is tests/test_report_browser.py's part.)
"""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from db import LogRow, StepRow, Store, TrialTiming
from experiments.campaign import Campaign
from orchestrator.cli import app
from orchestrator.reports.build import build_report
from orchestrator.reports.compare import compare, render_compare_html, render_compare_markdown
from orchestrator.reports.files import clean
from orchestrator.reports.html import render_html
from orchestrator.reports.junit import render_junit
from orchestrator.reports.markdown import render_markdown
from orchestrator.reports.model import Report
from orchestrator.stored import create_campaign
from tests.test_store import AT, campaign_spec, metrics, sessions

BAD_UTF8 = b"\xff\xfe\xc3( \xed\xa0\x80".decode("utf-8", "replace")  # as a server's bytes decode
CONTROL = "\x01\x08\x0b\x0c\x1b[31m\x7f\x85"
HOSTILE = ("<script>window.PWNED=1</script></textarea><img src=x onerror=alert(1)>{{ 7*7 }}"
           "{% raw %}]]><![CDATA[x]]>|a|b| `code` [link](javascript:alert(1)) *em* $x$ & "
           f"{BAD_UTF8}{CONTROL}\nsecond line\r\n")
HOSTILE_FACTOR = "idx|<script>f</script>`"
HOSTILE_LEVEL = "bf16</textarea>]]>{{x}}|\n"
LONE = "\udcff\ud800"  # undecodable bytes kept as text (surrogateescape)
CULPRIT = {"index_k": "bf16", "hicache": "on"}
# What content could bring into a page as markup: a tag of these (escaped, it is text).
INJECTED = re.compile(r"<(script|img|textarea|svg|iframe)[\s>/]", re.I)
FORBIDDEN = {"img", "iframe", "textarea", "object", "embed", "link", "base", "svg", "a", "form"}


def hostile_campaign(store: Store) -> str:
    """tests/test_store.py's culprit campaign, hostile wherever a store takes text."""
    spec = campaign_spec(HOSTILE)
    spec["factors"][0]["levels"]["bf16"]["env"]["BF16_INDEX_K"] = HOSTILE
    campaign_id = create_campaign(store, Campaign.model_validate(spec), HOSTILE)
    facts = [StepRow("facts", "gpu-a", AT, 0.1, "ok", {
        "host": HOSTILE, "gpu": HOSTILE, "driver": None, "server_version": HOSTILE,
        "server_build": HOSTILE, "commit": HOSTILE})]
    seq = 0
    for index_k in ("fp8", "bf16"):
        for hicache in ("off", "on"):
            levels = {"index_k": index_k, "hicache": hicache}
            variant = store.variant(campaign_id, levels)
            for _ in range(2):
                trial = store.start_trial(campaign_id, variant.id, seq, "pool-1", seed=seq)
                leaks = 12 if levels == CULPRIT else 0
                rows = [dataclasses.replace(row, evidence=f"{HOSTILE} #{i}")
                        if i < leaks else row for i, row in enumerate(sessions(80, leaks))]
                logs = [LogRow("sglang", 7, "abort", f"Abort request {HOSTILE}")]
                store.finish_trial(trial, TrialTiming(wall_s=20.0, restart_s=5.0,
                                                      workload_s=14.0, restarts=1),
                                   rows, metrics(6), logs, steps=facts)
                seq += 1
    store.set_campaign_status(campaign_id, "done", finished=True)
    return campaign_id


def renamed(value: Any) -> Any:
    """The report's JSON with hostile factor and level names (and lone surrogates)."""
    if isinstance(value, str):
        return (value.replace("index_k", HOSTILE_FACTOR).replace("bf16", HOSTILE_LEVEL)
                .replace("hicache", f"hi{LONE}cache"))
    if isinstance(value, dict):
        return {renamed(k): renamed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v) for v in value]
    return value


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Report, Report]:
    """The store, its report as built, and that report with hostile names everywhere."""
    db_path = tmp_path_factory.mktemp("hostile") / "bisect.db"
    with Store.open(str(db_path)) as store:
        report = build_report(store, hostile_campaign(store))
    return db_path, report, Report.from_json(renamed(report.to_json()))


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
    if shown_braces:  # the hostile campaign's: shown, never run as a template
        assert "{{ 7*7 }}" in text and "49" not in text.replace("0.49", "")
    return text


def test_the_markdown_tables_stay_tables(stored: tuple[Path, Report, Report]) -> None:
    _, report, hostile = stored
    for shown in (report, hostile):
        markdown = render_markdown(shown)
        assert markdown.startswith("**Culprit found:**")
        tables = assert_tables_intact(markdown)
        full = tables[-1]
        assert len(full) == 1 + len(shown.variants)  # the header and a row a variant
        assert all(len(row) == len(full[0]) for row in full)
        assert all(row[-1] in {"different", "like known-good", "unknown", "known-good",
                               "vs known-good"} for row in full), full
    # the names are all there, as text: a pipe, a newline and a tag inside one cell
    markdown = render_markdown(hostile)
    assert_tables_intact(markdown)
    text = "".join(tags(MarkdownIt("commonmark").enable("table").render(markdown)).text)
    assert "idx|<script>f</script>`=bf16</textarea>]]>{{x}}| ⏎" in text  # one cell's text
    assert "\ufffd" in markdown and not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]",
                                                   markdown)


def test_the_junit_file_is_well_formed_xml(stored: tuple[Path, Report, Report]) -> None:
    _, report, hostile = stored
    for shown in (report, hostile):
        document = render_junit(shown)
        root = ET.fromstring(document.encode("utf-8"))  # expat: strict XML 1.0
        [suite] = root.findall("testsuite")
        cases = suite.findall("testcase")
        assert len(cases) == len(shown.variants) == len({c.get("name") for c in cases})
        assert {c.get("classname") for c in cases} == {clean(shown.campaign.name)}
        properties = {p.get("name"): p.get("value") or "" for p in suite.iter("property")}
        assert "<script>window.PWNED=1</script></textarea>" in properties["campaign.name"]
        assert "]]><![CDATA[x]]>" in properties["campaign.name"]  # as text, parsed back
        failures = [f for c in cases for f in c.findall("failure")]
        assert len(failures) == 1 and "24 of 160" in (failures[0].get("message") or "")
    names = {c.get("name") for c in ET.fromstring(render_junit(hostile).encode()).iter(
        "testcase")}
    assert any(name and "<script>f</script>" in name and "\ufffd" in name for name in names)


def test_the_html_report_index_and_compare_hold_no_markup_from_content(
        stored: tuple[Path, Report, Report], tmp_path: Path) -> None:
    db_path, report, hostile = stored
    for shown in (report, hostile):
        text = assert_inert_html(render_html(shown))
        assert "<script>window.PWNED=1</script>" in text  # shown, as text
        compared = compare(shown, shown)
        assert_inert_html(render_compare_html(compared))
        assert_tables_intact(render_compare_markdown(compared))
    out = tmp_path / "site"
    done = CliRunner().invoke(app, ["report", "--index", "-o", str(out), "--store",
                                    str(db_path)])
    assert done.exit_code == 0, done.output
    index = (out / "index.html").read_text()
    text = assert_inert_html(index)
    assert "<script>window.PWNED=1</script>" in text
    [linked] = re.findall(r'href="([^"]+)"', index)
    assert (out / linked).is_file() and "/" not in linked
    assert_inert_html((out / linked).read_text())


def test_every_format_through_the_cli(stored: tuple[Path, Report, Report],
                                      tmp_path: Path) -> None:
    db_path = stored[0]
    runner = CliRunner()
    for fmt, name in (("md", "r.md"), ("junit", "r.xml"), ("json", "r.json"),
                      ("html", "r.html")):
        done = runner.invoke(app, ["report", "last", "--store", str(db_path), "-o",
                                   str(tmp_path / name)])
        assert done.exit_code == 0, done.output
        written = (tmp_path / name).read_text(encoding="utf-8")
        {"md": assert_tables_intact, "junit": lambda d: ET.fromstring(d.encode()),
         "json": json.loads, "html": assert_inert_html}[fmt](written)
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
