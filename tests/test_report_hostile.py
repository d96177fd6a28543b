"""Every report format on hostile content: a campaign stored through the Store API whose name,
campaign file, leaked content, log lines and node facts carry ``<script>``, ``</textarea>``,
``{{ }}``, ``]]>``, invalid UTF-8 (as decoded) and control characters; and the same report with
hostile factor and level names and lone surrogates (which a campaign file's validation and the
store keep out, but a renderer must survive all the same).

The Markdown tables stay tables (a GFM parser reads every row with its own cells), no markup
comes from content; the JUnit file is well-formed XML (expat reads it); the HTML pages (report,
index, compare) hold no tag, attribute or script that the content brought. (Whether anything
runs in a browser is test_report_browser.py's part.)
"""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from db import LogRow, StepRow, Store, TrialTiming
from experiments.campaign import Campaign
from orchestrator.cli import app
from orchestrator.reports.campaign.build import build_report
from orchestrator.reports.campaign.compare import (
    compare,
    render_compare_html,
    render_compare_markdown,
)
from orchestrator.reports.campaign.html import render_html
from orchestrator.reports.campaign.junit import render_junit
from orchestrator.reports.campaign.markdown import render_markdown
from orchestrator.reports.campaign.model import Report
from orchestrator.reports.files import clean
from orchestrator.stored import create_campaign
from tests.support.hostile_text import HOSTILE, HOSTILE_FACTOR, HOSTILE_LEVEL, LONE
from tests.support.html_checks import assert_inert_html, assert_tables_intact, tags
from tests.support.stored import AT, campaign_spec, metrics, sessions

pytestmark = pytest.mark.pure

CULPRIT = {"index_k": "bf16", "hicache": "on"}


def hostile_campaign(store: Store) -> str:
    """test_store.py's culprit campaign, hostile wherever a store takes text."""
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
