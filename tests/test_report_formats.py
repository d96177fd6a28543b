"""`bisect report`'s formats on real campaigns (twins, Ray, SQLite:
tests/support/report_campaigns.py): Markdown, JUnit XML, JSON, two campaigns compared, the index
of a store; and bad input, which exits 2 with one line and writes nothing."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from db import Store
from experiments.campaign import Campaign
from orchestrator.cli import app
from orchestrator.cli.report_view import write_beside
from orchestrator.reports.campaign.answers import DIFFERENT, UNKNOWN, variant_answers
from orchestrator.reports.campaign.build import build_report
from orchestrator.reports.campaign.model import Report
from orchestrator.stored import create_campaign
from tests.support.html_checks import assert_inert_html, assert_tables_intact, tags
from tests.support.report_campaigns import (
    CULPRIT,
    REPORT_SECRET,
    WEDGE_CULPRIT,
    ReportCampaigns,
    report_campaigns_fixture,  # noqa: F401 - the fixture, by its name
)
from tests.support.stored import campaign_spec

pytestmark = pytest.mark.real

BISECT = str(Path(sys.executable).parent / "bisect")
runner = CliRunner()


def report(campaigns: ReportCampaigns, *args: str) -> str:
    done = runner.invoke(app, ["report", *args, "--store", campaigns.store_arg])
    assert done.exit_code == 0, done.output
    assert REPORT_SECRET not in done.stdout
    return done.stdout


def key(levels: dict[str, str]) -> str:
    return ",".join(f"{f}={levels[f]}" for f in sorted(levels))


def test_markdown_puts_the_verdict_first_then_culprits_then_what_differs(
        report_campaigns: ReportCampaigns) -> None:
    markdown = report(report_campaigns, report_campaigns.culprit, "--format", "md")
    first = markdown.splitlines()[0]
    assert first.startswith("**Culprit found:** Corruption follows index\\_k=bf16 AND "
                            "hicache=on"), first
    tables = assert_tables_intact(markdown)
    culprits, different, full = tables
    assert [row[:2] for row in culprits[1:]] == [
        ["corruption", "index\\_k=bf16, hicache=on"], ["wedging", "index\\_k=fp8, hicache=on"]]
    # known-bad fails against known-good; the wedging culprit differs in wedging
    assert [row[0] for row in different[1:]] == ["index\\_k=fp8, hicache=on **culprit**",
                                                 "index\\_k=bf16, hicache=on **known-bad, "
                                                 "culprit**"]
    # its counts are the campaign's (how many trials its strategy ran), its words the report's
    assert re.match(r"holds the wedging culprit index\\_k=fp8 AND hicache=on: [1-9]\d* of "
                    r"\d+ sessions with it, 0 of \d+ without", different[1][-1]), different[1]
    assert different[2][-1].startswith("fail")
    assert len(full) == 5 and markdown.index("<details>") < markdown.index(full[1][0])
    text = "".join(tags(MarkdownIt("commonmark").enable("table").render(markdown)).text)
    assert "index_k=bf16, hicache=on known-bad, culprit" in text  # the rows are marked


def test_junit_has_a_testcase_per_variant_failing_where_it_differs(
        report_campaigns: ReportCampaigns, tmp_path: Path) -> None:
    out = tmp_path / "bisect.xml"  # the suffix chooses the format
    report(report_campaigns, report_campaigns.culprit, "-o", str(out))
    assert out.stat().st_mode & 0o777 == 0o600 and REPORT_SECRET not in out.read_text()
    root = ET.parse(out).getroot()
    [suite] = root.findall("testsuite")
    assert suite.get("name") == "race under load" and suite.get("tests") == "4"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {key({"index_k": i, "hicache": h}) for i in ("fp8", "bf16")
                          for h in ("off", "on")}
    assert {c.get("classname") for c in cases.values()} == {"race under load"}
    failed = {name for name, c in cases.items() if c.find("failure") is not None}
    assert failed == {key(CULPRIT), key(WEDGE_CULPRIT)} and suite.get("failures") == "2"
    failure = cases[key(CULPRIT)].find("failure")
    assert failure is not None and failure.text is not None
    assert "judged sessions failing (corruption), p = " in (failure.get("message") or "")
    # the counts are the variant's as the report has them (the race's are the machine's: 21
    # or 22 of 40 as load shifts it)
    with Store.open(report_campaigns.store_arg, create=False) as store:
        [culprit] = [v for v in build_report(store, report_campaigns.culprit).variants
                     if v.levels == CULPRIT]
    assert culprit.failed > 0 and failure.text.startswith("answer: fail")
    assert f"{culprit.failed} of {culprit.judged} judged sessions failing" in failure.text
    wedged = cases[key(WEDGE_CULPRIT)].find("failure")
    assert wedged is not None and "holds the wedging culprit" in (wedged.text or "")
    assert cases[key({"index_k": "fp8", "hicache": "off"})].find("system-out") is not None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["campaign.id"] == report_campaigns.culprit
    assert properties["verdict.status"] == "culprit"
    assert properties["factor.index_k"] == "fp8,bf16"


def test_a_narrowing_fail_is_no_difference_from_known_good(
        report_campaigns: ReportCampaigns) -> None:
    # delta debugging's FAILs at p <= 0.05 only say where to look next: undecided, not different
    with Store.open(str(report_campaigns.db_path)) as store:
        built = build_report(store, report_campaigns.culprit)
    [step] = [s for s in built.trail if s.levels == CULPRIT and s.answer == "fail"][-1:]
    narrowed = dataclasses.replace(built, trail=[
        dataclasses.replace(s, answer="fail (narrowing)") if s.levels == CULPRIT else s
        for s in built.trail])
    answers = {key(a.variant.levels): a for a in variant_answers(narrowed)}
    assert answers[key(CULPRIT)].answer == UNKNOWN and step.p_fail is not None
    assert answers[key(CULPRIT)].said.startswith("fail (narrowing)")
    assert {key(a.variant.levels): a.answer for a in variant_answers(built)}[
        key(CULPRIT)] == DIFFERENT


def test_json_is_the_report_model_versioned(report_campaigns: ReportCampaigns) -> None:
    printed = report(report_campaigns, report_campaigns.culprit, "--format", "json")
    document = json.loads(printed, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert document["report_version"] == 1
    with Store.open(report_campaigns.store_arg, create=False) as store:
        built = build_report(store, report_campaigns.culprit)
    assert document == json.loads(json.dumps(built.to_json()))
    assert Report.from_json(document).to_json() == document


def test_compare_gives_each_variant_s_change_and_what_changed(
        report_campaigns: ReportCampaigns, tmp_path: Path) -> None:
    c = report_campaigns
    compared = json.loads(report(c, c.culprit, "--compare", c.clean, "--format", "json"))
    assert (compared["a"]["id"], compared["b"]["id"]) == (c.culprit, c.clean)
    rows = {v["key"]: v for v in compared["variants"]}
    fixed = rows[key(CULPRIT)]  # the race fixed in B: its rate falls
    assert fixed["answer"] == "better" and fixed["change"] < 0 and fixed["ci95"][1] < 0
    assert fixed["failed_a"] > 0 and fixed["failed_b"] == 0
    assert rows[key({"index_k": "fp8", "hicache": "off"})]["answer"] == "no clear change"
    diff = compared["campaign_diff"]
    assert "-name: race under load" in diff and "+name: race fixed" in diff
    assert REPORT_SECRET not in json.dumps(compared)
    page = tmp_path / "compare.html"
    report(c, c.culprit, "--compare", c.clean, "-o", str(page))
    text = assert_inert_html(page.read_text(), shown_braces=False)
    assert "race fixed" in text and "better" in text
    markdown = report(c, c.culprit, "--compare", c.clean, "--format", "md")
    assert markdown.startswith("**Compared:** B race fixed")
    assert_tables_intact(markdown)


def test_campaigns_over_other_factors_are_refused(report_campaigns: ReportCampaigns,
                                                  tmp_path: Path) -> None:
    spec = campaign_spec("other factors")
    spec["factors"][1]["name"] = "radix_cache"
    with Store.open(str(tmp_path / "other.db")) as store:
        other = create_campaign(store, Campaign.model_validate(spec), "test")
        saved = tmp_path / "other.json"
        saved.write_text(json.dumps(build_report(store, other).to_json()))
    done = subprocess.run([BISECT, "report", report_campaigns.culprit, "--compare", str(saved),
                           "--store", report_campaigns.store_arg, "-o",
                           str(tmp_path / "c.html")], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"error: campaigns {report_campaigns.culprit} and {other} "
                                  "are not over the same factors (only")
    assert "'hicache'" in done.stderr and "'radix_cache'" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and not (tmp_path / "c.html").exists()


def test_the_index_links_every_campaign_s_report(report_campaigns: ReportCampaigns,
                                                 tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = json.loads(report(report_campaigns, "--index", "-o", str(site), "--json"))
    assert done["index"] == str(site / "index.html")
    files = sorted(p.name for p in site.iterdir())
    assert files == sorted(["index.html", f"{report_campaigns.culprit}.html",
                            f"{report_campaigns.clean}.html"])
    assert all((site / f).stat().st_mode & 0o777 == 0o600 for f in files)
    index = (site / "index.html").read_text()
    text = assert_inert_html(index, shown_braces=False)
    links = [a.get("href") for t, a in tags(index).tags if t == "a"]
    assert links == [f"{report_campaigns.clean}.html", f"{report_campaigns.culprit}.html"]
    assert "race under load" in text and "race fixed" in text and "not reproduced" in text
    assert "corruption: index_k=bf16 AND hicache=on" in text
    assert "wedging: index_k=fp8 AND hicache=on" in text
    for name in links:
        assert REPORT_SECRET not in (site / str(name)).read_text()


def test_the_demo_s_files_beside_its_html(report_campaigns: ReportCampaigns,
                                          tmp_path: Path) -> None:
    with Store.open(report_campaigns.store_arg, create=False) as store:
        written = write_beside(store, report_campaigns.culprit, tmp_path / "report.html")
    assert written == {"html": tmp_path / "report.html", "markdown": tmp_path / "report.md",
                       "junit": tmp_path / "report.xml"}
    assert (tmp_path / "report.md").read_text().startswith("**Culprit found:**")
    ET.parse(tmp_path / "report.xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.md",
                                                           "report.xml"]


@pytest.mark.parametrize(("args", "said"), [
    (["last", "--format", "pdf"], "error: unknown report format 'pdf': html, md, junit or json"),
    (["nope"], "error: no campaign 'nope' in "),
    (["last", "-o", "blocker/report.md"], "error: cannot write blocker/report.md: Not a "
                                          "directory"),
    (["--index"], "error: --index writes a directory: give it with -o DIR"),
    (["last", "--compare", "last", "--format", "junit"],
     "error: --compare writes html, md or json, not junit"),
    ([], "error: give a campaign ID (or `last`), or --index -o DIR"),
])
def test_bad_input_is_one_line_and_writes_nothing(report_campaigns: ReportCampaigns,
                                                   tmp_path: Path, args: list[str],
                                                   said: str) -> None:
    (tmp_path / "blocker").write_text("a file where a directory is needed")
    done = subprocess.run([BISECT, "report", *args, "--store", report_campaigns.store_arg],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(said) and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stdout == "" and [p.name for p in tmp_path.iterdir()] == ["blocker"]
