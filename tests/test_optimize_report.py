"""A search's report (`bisect optimize`) in every format, built from a real search's store
(tests/support/optimize_campaigns.py: the driver, the Optuna study and confirmation on the
knob space whose fastest configurations are corrupt).

The model holds the verdict's ranking with levels in the campaign's order, the answer and the
seeds marked; the JSON reads back equal; the Markdown puts the best configuration first and
keeps its tables tables; the JUnit file fails only where no safe configuration was named; the
HTML has the ranked table and the Pareto chart; the index names the best configuration; and
hostile factor names, levels, reasons and errors stay text in every format.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from db.store import Store
from orchestrator.cli import app
from orchestrator.core.strategies.base import Conclusion
from orchestrator.reports.campaign.build import build_report
from orchestrator.reports.campaign.index import write_index
from orchestrator.reports.campaign.model import Report
from orchestrator.reports.search.html import render_search_html
from orchestrator.reports.search.junit import BEST_CASE, render_optimize_junit
from orchestrator.reports.search.markdown import render_optimize_markdown
from orchestrator.stored import verdict_of
from tests.support.hostile_text import HOSTILE, HOSTILE_LEVEL
from tests.support.html_checks import assert_inert_html, assert_tables_intact, tags
from tests.support.optimize_campaigns import (
    OptimizeCampaigns,
    optimize_campaigns_fixture,  # noqa: F401 - the stored searches
)

pytestmark = pytest.mark.pure

ORDER = ["max_running", "chunk", "mem", "hicache"]  # bench/knob_space.py's factors
HOSTILE_KNOB = "hi|<script>k</script>`cache"


@pytest.fixture(scope="module")
def built(optimize_campaigns: OptimizeCampaigns) -> tuple[Report, Report, dict[str, Any]]:
    """The optimum's report, the undecided one's, and the optimum's verdict JSON."""
    with Store.open(optimize_campaigns.store_arg) as store:
        return (build_report(store, optimize_campaigns.optimum),
                build_report(store, optimize_campaigns.undecided),
                verdict_of(store, optimize_campaigns.optimum).to_json())


def hostile(report: Report) -> Report:
    """The report with a hostile factor name and level, campaign name, reasons and an
    undeployable configuration's error."""
    def renamed(value: Any, levels: bool = False) -> Any:
        if isinstance(value, str):
            value = value.replace("hicache", HOSTILE_KNOB)
            return HOSTILE_LEVEL if levels and value == "off" else value
        if isinstance(value, dict):
            return {renamed(k): renamed(v, k in ("levels", "best", "production")
                                        or (levels and isinstance(v, dict)))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [renamed(v) for v in value]
        return value

    data = renamed(report.to_json())
    data["campaign"]["name"] = HOSTILE
    search = data["optimize"]
    for row in search["rejected"] + search["unproven"]:
        row["why"] = [*row["why"], HOSTILE]
    search["undeployable"].append({"levels": {HOSTILE_KNOB: HOSTILE_LEVEL}, "attempts": 2,
                                   "error": HOSTILE})
    return Report.from_json(data)


def test_the_model_holds_the_ranking_best_first_in_the_campaigns_order(
        built: tuple[Report, Report, dict[str, Any]]) -> None:
    report, _, verdict = built
    search = report.optimize
    assert search is not None and report.headline.status == "optimum"
    assert [c.key for c in search.ranked] == [r["key"] for r in verdict["optimize"]["ranked"]]
    assert [c.key for c in search.rejected] == [r["key"]
                                                for r in verdict["optimize"]["rejected"]]
    best = search.winner
    assert best is not None and best is search.ranked[0] and best.confirmed
    assert best.levels == verdict["optimize"]["best"] and list(best.levels) == ORDER
    assert all(list(c.levels) == ORDER for c in [*search.ranked, *search.rejected])
    assert sum(c.best for c in search.ranked) == 1
    assert all(c.safe and not c.why for c in search.ranked)
    assert search.pareto and all(c.pareto and c.confirmed for c in search.pareto)
    # the trap: HiCache on above 96 running requests corrupts; never reported safe
    trapped = [c for c in search.ranked
               if c.levels["hicache"] == "on" and int(c.levels["max_running"]) > 96]
    assert trapped == []
    assert search.rejected and all(c.why and not c.safe for c in search.rejected)
    roles = {c.role for c in [*search.ranked, *search.rejected, *search.unproven]}
    assert {"production", "known-good"} <= roles
    assert search.trials.total == report.cost.trials


def test_the_headline_names_the_best_with_intervals_and_its_proof(
        built: tuple[Report, Report, dict[str, Any]]) -> None:
    report, undecided, _ = built
    assert report.optimize is not None and report.optimize.winner is not None
    best = report.optimize.winner
    sentence = report.headline.sentence
    assert sentence.startswith("Best safe configuration")
    assert ", ".join(f"{f}={lvl}" for f, lvl in best.levels.items()) in sentence
    assert re.search(r"output_throughput [\d,]+ tok/s \(95% CI [\d,]+ … [\d,]+\)", sentence)
    assert "against production" in sentence
    assert re.search(r"corruption 0/\d+, upper bound [\d.]+% < 5\.0%",
                     report.headline.confidence)
    assert undecided.headline.status == "inconclusive"
    assert undecided.headline.sentence.startswith("No safe configuration named")
    assert "not decided" in undecided.headline.confidence


def test_the_variants_of_numeric_knobs_sort_by_value(
        built: tuple[Report, Report, dict[str, Any]]) -> None:
    report = built[0]
    assert report.campaign.factors["max_running"] == []  # a range lists no levels
    running = [int(v.levels["max_running"]) for v in report.variants]
    assert running == sorted(running) and len(set(running)) > 3


def test_the_json_reads_back_equal(built: tuple[Report, Report, dict[str, Any]]) -> None:
    for report in built[:2]:
        saved = json.loads(json.dumps(report.to_json(), allow_nan=False))
        assert saved["report_version"] == 1 and "ranked" in saved["optimize"]
        assert Report.from_json(saved) == report


def test_the_markdown_says_the_best_first_then_the_top_rows_then_everything(
        built: tuple[Report, Report, dict[str, Any]]) -> None:
    report, undecided, _ = built
    assert report.optimize is not None
    markdown = render_optimize_markdown(report)
    first = markdown.splitlines()[0]
    assert first.startswith("**Optimum:** Best safe configuration")
    assert "max\\_running=" in first and "tok/s" in first
    tables = assert_tables_intact(markdown)
    top, rejected = tables[0], tables[1]
    assert len(top) == 1 + min(5, len(report.optimize.ranked))
    assert top[1][0] == "1" and "best" in top[1][2]
    assert "why" in rejected[0] and "upper bound" in rejected[1][-1]
    everything = len(report.optimize.ranked) + len(report.optimize.rejected) + len(
        report.optimize.unproven)
    assert f"<details><summary>All {everything} configurations</summary>" in markdown
    assert sum(len(t) - 1 for t in tables[-3:]) == everything  # safe, rejected, unproven
    assert render_optimize_markdown(undecided).startswith("**Inconclusive:** No safe configuration")


def test_the_junit_file_passes_the_safe_skips_the_rejected_and_fails_only_without_an_answer(
        built: tuple[Report, Report, dict[str, Any]]) -> None:
    report, undecided, _ = built
    search = report.optimize
    assert search is not None
    root = ET.fromstring(render_optimize_junit(report).encode("utf-8"))
    [suite] = root.findall("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert len(cases) == 1 + len(search.ranked) + len(search.rejected) + len(search.unproven)
    assert suite.get("failures") == "0" and not list(suite.iter("failure"))
    assert "Best safe configuration" in (cases[BEST_CASE].findtext("system-out") or "")
    for c in search.ranked:
        assert cases[f"safe: {c.key}"].find("skipped") is None
    for c in search.rejected:
        skipped = cases[f"rejected: {c.key}"].find("skipped")
        assert skipped is not None and "rejected as unsafe" in (skipped.get("message") or "")
    assert suite.get("skipped") == str(len(search.rejected) + len(search.unproven))
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["verdict.status"] == "optimum"
    assert properties["factor.max_running"] == "numeric"
    assert properties["optimize.objectives"] == "output_throughput,ttft_p99_ms"
    [other] = ET.fromstring(render_optimize_junit(undecided).encode("utf-8")).findall("testsuite")
    [failure] = list(other.iter("failure"))
    assert failure.get("type") == "no-safe-configuration" and other.get("failures") == "1"
    assert [c.get("name") for c in other.iter("testcase") if c.find("failure") is not None] \
        == [BEST_CASE]


def test_the_html_has_the_search_the_ranked_table_and_the_pareto_chart(
        built: tuple[Report, Report, dict[str, Any]]) -> None:
    report, undecided, _ = built
    search = report.optimize
    assert search is not None
    page = render_search_html(report)
    text = assert_inert_html(page, shown_braces=False)
    parsed = tags(page).tags
    ids = {a.get("id") for _, a in parsed}
    assert {"search", "ranked", "chart-pareto", "pareto", "rejected", "unproven"} <= ids
    assert "culprits-corruption" not in ids  # a search names no culprit
    classes = [a.get("class") or "" for t, a in parsed if t == "g"]
    assert classes.count("point front best") == 1
    assert sum(c.startswith("point front") for c in classes) == len(search.pareto)
    assert sum(c.startswith("point rejected") for c in classes) == len(search.rejected)
    rows = [a for t, a in parsed if t == "tr" and "data-key" in a]
    assert [a["data-key"] for a in rows][:len(search.ranked)] == [c.key for c in search.ranked]
    assert "GPU time spent" in text and "Rejected: unsafe configurations" in text
    other = render_search_html(undecided)
    assert 'id="ranked" class="none"' in other and 'id="chart-pareto"' not in other


def test_the_index_names_the_best_configuration(
        optimize_campaigns: OptimizeCampaigns, built: tuple[Report, Report, dict[str, Any]],
        tmp_path: Path) -> None:
    best = built[0].optimize.winner if built[0].optimize else None
    assert best is not None
    with Store.open(optimize_campaigns.store_arg) as store:
        written = write_index(store, tmp_path / "site", optimize_campaigns.store_arg)
    index = written[-1].read_text()
    assert_inert_html(index, shown_braces=False)
    assert "best: " + ", ".join(f"{f}={lvl}" for f, lvl in best.levels.items()) in index
    assert "no safe configuration named" in index


def test_hostile_names_reasons_and_errors_stay_text_in_every_format(
        built: tuple[Report, Report, dict[str, Any]]) -> None:
    shown = hostile(built[0])
    assert shown.optimize is not None and HOSTILE_KNOB in shown.optimize.factors
    markdown = render_optimize_markdown(shown)
    assert_tables_intact(markdown)
    rendered = "".join(tags(MarkdownIt("commonmark").enable("table").render(markdown)).text)
    assert f"{HOSTILE_KNOB}={HOSTILE_LEVEL.strip()}" in rendered.replace(" ⏎", "")
    root = ET.fromstring(render_optimize_junit(shown).encode("utf-8"))  # expat: strict XML 1.0
    names = [c.get("name") or "" for c in root.iter("testcase")]
    assert any("<script>k</script>" in n for n in names)
    assert any(n.startswith("undeployable: ") for n in names)
    text = assert_inert_html(render_search_html(shown), shown_braces=False)
    assert "<script>window.PWNED=1</script>" in text and "<script>k</script>" in text


def test_every_format_through_the_cli(optimize_campaigns: OptimizeCampaigns,
                                      tmp_path: Path) -> None:
    for name, check in (("r.md", assert_tables_intact),
                        ("r.xml", lambda d: ET.fromstring(d.encode())),
                        ("r.json", json.loads),
                        ("r.html", lambda d: assert_inert_html(d, shown_braces=False))):
        done = CliRunner().invoke(app, ["report", optimize_campaigns.optimum, "--store",
                                        optimize_campaigns.store_arg, "-o",
                                        str(tmp_path / name)])
        assert done.exit_code == 0, done.output
        check((tmp_path / name).read_text(encoding="utf-8"))
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600


# -- the answer against production in every format, pure: a conclusion on planted trials ---

def planted_report(values: Mapping[str, Sequence[float]], final: Sequence[tuple[str, float]]
                   ) -> tuple[Report, dict[str, Any]]:
    """``report_of`` the optimize strategy's conclusion on planted per-trial throughputs and
    its final phase's (tests/support/optimize_planted.py)."""
    from tests.support.optimize_planted import concluded

    return report_of(concluded(values, final)[0])


def report_of(conclusion: Conclusion) -> tuple[Report, dict[str, Any]]:
    """The report of an optimize conclusion, built as build_report builds it, with no store;
    and the verdict's optimize section."""
    from bench.knob_space import knob_campaign
    from orchestrator.reports.campaign.model import CampaignFacts, Cost, Provenance
    from orchestrator.reports.search.build import search_headline, search_section

    section = dict(conclusion.finding_json("optimize") or {})
    campaign = knob_campaign({})
    search = search_section(section, campaign)
    assert search is not None
    facts = CampaignFacts(id="planted", name="planted", status="done", target="corruption",
                          strategy="optimize", created_at=None, finished_at=None,
                          factors=campaign.level_names(), known_good=dict(campaign.known_good
                                                                          or {}),
                          known_bad={}, alpha=0.05)
    report = Report(
        campaign=facts, headline=search_headline(search, conclusion.status.value,
                                                 conclusion.reason),
        culprits=[], cost=Cost(trials=search.trials.total, restarts=0, sessions=0,
                               stopped_early=0, gpu_s_equivalent=0.0, wall_s=0.0),
        variants=[], interaction=None, trail=[], evidence=[], series=[],
        provenance=Provenance(campaign_file="", tool_version="test", started_at=None,
                              finished_at=None, nodes=[], trials=[]),
        optimize=search)
    return report, section


NOISE = {"production": [2400, 3156], "else": [2755, 2865]}  # issue 27's: within noise
NOISE_PAIRS = [("production", 2800.0), ("else", 2790.0), ("else", 2850.0), ("production", 2760.0)]
CLEAR = {"production": [2000, 2020, 1990], "else": [3000, 3030, 2985]}
CLEAR_PAIRS = [("production", 2010.0), ("else", 3010.0), ("else", 2995.0), ("production", 2005.0)]


def test_every_format_says_no_better_than_production_when_not_shown_better() -> None:
    from orchestrator.cli.common import out
    from orchestrator.cli.optimize_view import print_search

    report, section = planted_report(NOISE, NOISE_PAIRS)
    search = report.optimize
    assert search is not None and search.versus_production is not None
    assert not search.versus_production.shown_better
    assert report.headline.status == "optimum"
    sentence = report.headline.sentence
    assert sentence.startswith("No better than production (max_running=48, ")
    assert "one-sided paired t p = 0.29, 2 pairs of the final phase" in sentence
    assert "Best safe configuration" not in sentence
    # Markdown: the verdict line and the comparison's own line
    markdown = render_optimize_markdown(report)
    assert markdown.startswith("**Optimum:** No better than production")
    assert "Against production (no better): " in markdown
    # JUnit: the answer's case says it, and the properties hold the test
    [suite] = ET.fromstring(render_optimize_junit(report).encode("utf-8")).findall("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["optimize.versus_production.shown_better"] == "false"
    assert (properties["optimize.versus_production.p_value"] or "").startswith("0.285")
    assert "No better than production" in (suite.findtext("testcase/system-out") or "")
    # HTML: the headline and the search's facts
    page = render_search_html(report)
    assert_inert_html(page, shown_braces=False)
    assert 'id="versus-production" class="no-better"' in page
    assert "No better than production" in page
    # JSON: the report's reads back equal; the verdict's section keeps its keys and adds one
    assert Report.from_json(json.loads(json.dumps(report.to_json(), allow_nan=False))) == report
    assert report.to_json()["optimize"]["versus_production"]["shown_better"] is False
    assert section["versus_production"]["shown_better"] is False and section["best"]
    # `bisect verdict`'s text
    with out.capture() as captured:
        print_search(section)
    assert "against production (no better): max_running=48" in captured.get()


def test_every_format_says_shown_better_and_production_itself() -> None:
    report, _ = planted_report(CLEAR, CLEAR_PAIRS)
    assert report.headline.sentence.startswith("Best safe configuration: ")
    assert "shown better than production: output_throughput +995 tok/s (x1.496" in (
        report.headline.sentence)
    assert "Against production (shown better): " in render_optimize_markdown(report)
    assert 'class="shown-better"' in render_search_html(report)
    itself, _ = planted_report({"production": [3000, 3020], "else": [2000, 2010]}, [])
    assert itself.headline.sentence.startswith("Production is the best safe configuration: ")
    [suite] = ET.fromstring(render_optimize_junit(itself).encode("utf-8")).findall("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["optimize.versus_production.is_production"] == "true"


def test_a_search_s_header_says_what_it_searches_for_where_a_bisection_says_what_it_bisects(
        ) -> None:
    import dataclasses

    report, _ = planted_report(CLEAR, CLEAR_PAIRS)
    aim = "searches for the highest output_throughput proven free of corruption and wedging"
    assert report.aim == aim
    page = render_search_html(report)
    assert f"{aim} with the optimize strategy" in page and "bisects" not in page
    assert (f"optimize strategy (tpe) {aim.replace('_', chr(92) + '_')}: "  # Markdown's \\_
            in render_optimize_markdown(report))
    bisection = dataclasses.replace(report, optimize=None)
    assert bisection.aim == "bisects corruption"
    commits = dataclasses.replace(bisection, commits={"first_bad": None})
    assert commits.aim == "bisects commits for the first with corruption"


# -- on two pools the headline's figure is the one the verdict compared (issue 27) ----------

SLOW, FAST = "pool-1", "pool-2"  # the slower pool at x0.75 of the faster


def on_pools(rows: list[tuple[str, float, str]], budget: int, corrupt: int = 0
             ) -> tuple[Report, dict[str, Any]]:
    """``report_of`` the conclusion on planted trials, in the order they ran: (configuration,
    output throughput, pool); ``corrupt`` leaks in each of production's."""
    from tests.support.optimize_planted import strategy, trial

    done = [trial(name, figure, seq, pool=pool, corrupt=corrupt if name == "production" else 0)
            for seq, (name, figure, pool) in enumerate(rows, start=1)]
    return report_of(strategy(budget, pools=2).conclude(done, []))


def test_the_headline_says_the_pairs_ratio_where_the_means_of_both_pools_say_worse() -> None:
    # production ran mostly on the faster pool, the answer only on the slower one, where it is
    # 10% faster than production in each pair of the final phase; the means of all trials set
    # the pools against each other: the answer's 1,654 against production's 1,703 (-2.9%)
    report, section = on_pools([
        ("production", 2000.0, FAST), ("production", 2010.0, FAST), ("else", 1650.0, SLOW),
        ("else", 1660.0, SLOW), ("production", 1500.0, SLOW),  # links the pools
        # the final phase: two pairs on the slower pool
        ("production", 1505.0, SLOW), ("else", 1656.0, SLOW), ("else", 1650.0, SLOW),
        ("production", 1502.0, SLOW)], budget=5)
    search = report.optimize
    assert search is not None and search.versus_production is not None
    assert search.versus_production.shown_better and section["best"]["max_running"] == "96"
    answer, production = (search.named(levels) for levels in (search.best, search.production))
    assert answer is not None and production is not None
    assert answer.objectives[0].mean is not None and production.objectives[0].mean is not None
    assert answer.objectives[0].mean < production.objectives[0].mean  # the trap
    sentence = report.headline.sentence
    ratio, (low, high) = section["versus_production"]["ratio"], section["versus_production"][
        "ratio_ci"]
    assert ratio > 1.05 and low > 1.0
    assert (f"; {ratio - 1:+.1%} output_throughput against production (max_running=48, "
            "chunk=2048, mem=0.8, hicache=off: the ratio of the geometric means on 2 pairs of "
            f"the final phase, 90% CI {low - 1:+.1%} … {high - 1:+.1%}), shown better than "
            "production: ") in sentence
    assert "-2.9%" not in sentence and "1,703" not in sentence
    # every format reads the headline
    markdown = render_optimize_markdown(report)
    assert markdown.startswith("**Optimum:** Best safe configuration")
    assert f"{ratio - 1:+.1%} output\\_throughput against production" in markdown
    page = render_search_html(report)
    assert_inert_html(page, shown_braces=False)
    assert f"{ratio - 1:+.1%} output_throughput against production" in page
    assert Report.from_json(json.loads(json.dumps(report.to_json(), allow_nan=False))) == report


def test_the_headline_says_the_welch_difference_of_one_pool_where_it_read_one() -> None:
    # production shown unsafe (no final phase): the Welch test reads the pool both ran on, the
    # slower, where the answer is 80 tok/s faster; production's trials on the faster pool put
    # its mean of all trials above the answer's
    report, section = on_pools([
        ("production", 1600.0, SLOW), ("production", 1610.0, SLOW),
        ("production", 2000.0, FAST), ("production", 2010.0, FAST),
        ("production", 2005.0, FAST), ("production", 2008.0, FAST),
        ("else", 1680.0, SLOW), ("else", 1690.0, SLOW), ("else", 1685.0, SLOW)],
        budget=9, corrupt=10)
    versus = section["versus_production"]
    assert versus["shown_better"] and not versus["paired"]
    assert versus["objectives"][0]["pool"] == SLOW and versus["objectives"][0]["trials"] == [3, 2]
    sentence = report.headline.sentence
    assert ("; +80.0 tok/s output_throughput against production (max_running=48, chunk=2048, "
            "mem=0.8, hicache=off: on one pool's trials, 3 vs 2), shown better than production: "
            "output_throughput +80.0 tok/s") in sentence
    assert "production itself is not proven safe" in sentence
    assert "-10.0%" not in sentence  # the means of all trials: 1,685 against 1,872
