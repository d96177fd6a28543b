"""The sweep report (`bisect sweep-report`): its model built from a sweep's store, every format,
hostile text from a commit subject, a node fact and a run's reason, the command line; and once
end to end, on what real runs of `bisect sweep` on twins stored (``real_sweep`` of
tests/sweep_support.py: the runs test_sweep_run.py checks).

The store (tests/sweep_report_support.py) holds six runs of one sweep made of `bisect sweep`'s
own parts: accepted, clean, skipped, missed, a confirmed regression with its hunt, and a run
whose campaign this version cannot read again.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

import orchestrator.cli.sweep_report_view  # noqa: F401 - registers `bisect sweep-report`
from db import Store
from orchestrator.cli import app
from orchestrator.reports.sweep import history as sweep_history
from orchestrator.reports.sweep.build import build_sweep_report
from orchestrator.reports.sweep.charts import Line, RunMark, history_chart
from orchestrator.reports.sweep.history import measure
from orchestrator.reports.sweep.html import CSP, hunt_file_name, render_sweep_html
from orchestrator.reports.sweep.junit import render_sweep_junit
from orchestrator.reports.sweep.markdown import render_sweep_markdown
from orchestrator.reports.sweep.model import LevelsChange, SweepReport
from tests.support.html_checks import assert_inert_html, assert_tables_intact, tags
from tests.sweep_report_support import (
    HOSTILE_FACT,
    HOSTILE_REASON,
    HOSTILE_SUBJECT,
    SWEEP,
    SweepStore,
    sweep_store_fixture,  # noqa: F401 - the store of six runs
)
from tests.sweep_support import (
    RealSweep,
    real_sweep_fixture,  # noqa: F401 - real runs of `bisect sweep`, shared with test_sweep_run
)

BRACES = "{{ range(7) }}"


@pytest.fixture(scope="module")
def reports(sweep_store: SweepStore) -> dict[int, SweepReport]:
    with Store.open(sweep_store.store_arg) as db:
        return {seq: build_sweep_report(db, SWEEP, seq) for seq in sweep_store.runs}


def sweep_report_cli(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, ["sweep-report", *args])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    assert "Traceback" not in done.output
    return done.exit_code, done.stdout, done.stderr


# --- the model ---------------------------------------------------------------------------------


@pytest.mark.real
def test_the_answer_comes_first_with_its_exit_code(reports: dict[int, SweepReport]) -> None:
    regression = reports[5]
    assert regression.answer.title == "REGRESSION confirmed"
    assert regression.answer.exit_code == 1 and "exit 1" in regression.answer.exit_meaning
    assert "hicache-on: corruption" in regression.answer.sentence
    assert regression.baseline is not None and regression.baseline.seq == 2  # the last accepted
    assert regression.baseline.accepted_at is not None
    first = reports[1]
    assert (first.answer.status, first.answer.exit_code, first.baseline) == ("clean", 0, None)
    assert "no baseline yet" in first.answer.sentence
    assert reports[2].answer.sentence.startswith("Clean: every variant is the same as run 1")
    skipped = reports[3]
    assert (skipped.answer.title, skipped.answer.exit_code) == ("Skipped", 4)
    assert HOSTILE_REASON in skipped.answer.sentence and skipped.variants == []
    assert (reports[4].answer.title, reports[4].answer.exit_code) == ("Missed", None)


@pytest.mark.real
def test_each_variant_is_compared_metric_by_metric(reports: dict[int, SweepReport]) -> None:
    report = reports[5]
    assert [(v.name, v.state) for v in report.variants] == [
        ("production", "clean"), ("hicache-on", "regression"), ("chunk-big", "new")]
    assert set(report.watched) == {"corruption", "wedging", "throughput", "p99_latency"}
    rows = {(v.name, m.metric): m for v in report.variants for m in v.metrics}
    assert len(rows) == 12
    corruption = rows["hicache-on", "corruption"]
    assert corruption.regressed and corruption.suspected and corruption.binary
    assert corruption.detection is not None and corruption.confirmation is not None
    assert corruption.detection.answer == corruption.confirmation.answer == "different"
    assert corruption.detection.min_effect == 0.15 and corruption.detection.baseline == 0
    k, n = corruption.detection.counts_now or (0, 0)
    assert n > 0 and corruption.detection.current == pytest.approx(k / n) and k / n > 0.5
    assert corruption.detection.counts_baseline == (0, corruption.detection.counts_baseline[1])  # type: ignore[index]
    assert not any(m.regressed for (name, _), m in rows.items() if name != "hicache-on")
    throughput = rows["production", "throughput"]
    assert throughput.detection is not None and throughput.detection.answer == "same"
    production = report.variants[0]
    assert len(throughput.detection.values_now) == production.trials >= 2
    # pair by pair with the baseline build's fresh controls, run beside (not the stored run's)
    assert len(throughput.detection.values_baseline) == production.trials
    new = rows["chunk-big", "p99_latency"]
    assert new.detection is None and new.now is not None and new.now > 0  # measured, compared not


@pytest.mark.real
def test_the_comparisons_are_recomputed_and_agree_with_what_the_run_stored(
        sweep_store: SweepStore, reports: dict[int, SweepReport]) -> None:
    for seq in (1, 2, 5):
        report, stored = reports[seq], sweep_store.runs[seq].result or {}
        assert report.recomputed and not report.notes
        for variant, kept in zip(report.variants, stored["variants"], strict=True):
            assert (variant.name, variant.state, variant.trials) == (
                kept["name"], kept["state"], kept["trials"])
            compared = {m.metric: m.detection for m in variant.metrics if m.detection}
            assert {c["metric"]: (c["answer"], pytest.approx(c["change"]))
                    for c in kept["comparisons"]} == {
                metric: (c.answer, c.change) for metric, c in compared.items()}
    # run 6's campaign cannot be read again: its stored result stands, and the report says so
    fallback = reports[6]
    assert not fallback.recomputed
    assert any("cannot be judged again" in note for note in fallback.notes)
    assert [v.state for v in fallback.variants] == ["clean", "regression", "new"]
    assert "cannot be read again" in fallback.history[-1].note


@pytest.mark.real
def test_what_changed_since_the_baseline(sweep_store: SweepStore,
                                         reports: dict[int, SweepReport]) -> None:
    report = reports[5]
    assert report.commit_baseline is not None and report.commit_now is not None
    assert (report.commit_baseline.sha, report.commit_now.sha) == (sweep_store.good,
                                                                   sweep_store.head)
    assert report.commit_now.subject == "docs"  # from the hunt's range, as git gave it
    facts = {(f.node, f.fact): (f.baseline, f.now) for f in report.changed_facts}
    assert facts["here", "server_version"][1] == HOSTILE_FACT
    assert facts["here", "commit"] == (sweep_store.good, sweep_store.head)
    assert report.changed_variants == [LevelsChange(
        variant="chunk-big", baseline=None, now={"hicache": "off", "chunk": "big"})]
    assert reports[2].changed_facts == [] and reports[2].changed_variants == []


@pytest.mark.real
def test_the_hunt_names_the_first_bad_commit(sweep_store: SweepStore,
                                             reports: dict[int, SweepReport]) -> None:
    hunt = reports[5].hunt
    assert hunt is not None and hunt.recomputed
    assert (hunt.status, hunt.campaign_id) == ("culprit", sweep_store.hunt_campaign)
    assert [c.sha for c in hunt.first_bad] == [sweep_store.bad[:12]]
    assert hunt.first_bad[0].subject == HOSTILE_SUBJECT
    assert hunt.posterior is not None and hunt.posterior > 0.9
    assert hunt.good is not None and hunt.good.sha == sweep_store.good
    assert (hunt.variant, hunt.metric) == ("hicache-on", "corruption")
    assert reports[2].hunt is None


@pytest.mark.real
def test_the_history_holds_every_run(sweep_store: SweepStore,
                                     reports: dict[int, SweepReport]) -> None:
    history = reports[5].history
    assert [(h.run.seq, h.run.status) for h in history] == [
        (1, "clean"), (2, "clean"), (3, "skipped"), (4, "missed"), (5, "regression"),
        (6, "regression")]
    assert [h.run.seq for h in history if h.baseline] == [2]
    assert [h.run.seq for h in history if h.current] == [5]
    assert [h.run.seq for h in history if h.run.accepted] == [1, 2]
    skipped, missed = history[2], history[3]
    assert skipped.variants == {} and skipped.note == HOSTILE_REASON
    assert missed.variants == {} and missed.run.slot is not None and "scheduled" in missed.note
    with Store.open(sweep_store.store_arg) as db:
        now = measure(db, sweep_store.runs[5].campaign_id or "")
    assert history[4].variants == now
    assert now["hicache-on"].corruption is not None and now["hicache-on"].corruption > 0.5
    assert history[1].variants["hicache-on"].corruption == 0
    assert 990 < (history[1].variants["production"].throughput or 0) < 1010


@pytest.mark.real
def test_a_long_history_is_cut_around_the_reported_run(sweep_store: SweepStore,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep_history, "MAX_HISTORY", 3)
    with Store.open(sweep_store.store_arg) as db:
        for seq, shown in ((6, [4, 5, 6]), (4, [4, 5, 6]), (2, [1, 2, 3])):
            report = build_sweep_report(db, SWEEP, seq)
            assert [h.run.seq for h in report.history] == shown and report.omitted_runs == 3
    assert "3 more left out" in render_sweep_markdown(report)
    assert "3 runs of the sweep are left out" in render_sweep_html(report)


@pytest.mark.real
def test_the_json_reads_back(reports: dict[int, SweepReport]) -> None:
    for report in reports.values():
        document = json.loads(json.dumps(report.to_json(), allow_nan=False))
        assert document["sweep_report_version"] == 1
        assert SweepReport.from_json(document) == report
    with pytest.raises(ValueError, match="version"):
        SweepReport.from_json({**reports[5].to_json(), "sweep_report_version": 99})


# --- the formats, hostile text included --------------------------------------------------------


@pytest.mark.real
def test_the_markdown_says_the_answer_first_and_its_tables_stay_tables(
        reports: dict[int, SweepReport]) -> None:
    markdown = render_sweep_markdown(reports[5])
    assert markdown.startswith("**REGRESSION confirmed:** hicache-on: corruption")
    tables = assert_tables_intact(markdown)
    assert len(tables[0]) == 1 + 12  # a row a variant and metric
    shown = "".join(tags(MarkdownIt("commonmark").enable("table").render(markdown)).text)
    assert HOSTILE_SUBJECT in shown and HOSTILE_FACT in shown  # as text
    for seq in (1, 3, 4, 6):
        assert_tables_intact(render_sweep_markdown(reports[seq]))
    skipped = render_sweep_markdown(reports[3])
    assert skipped.startswith("**Skipped:**")
    assert HOSTILE_REASON in "".join(tags(MarkdownIt("commonmark").render(skipped)).text)


@pytest.mark.real
def test_the_junit_fails_a_confirmed_regression_only(sweep_store: SweepStore,
                                                     reports: dict[int, SweepReport]) -> None:
    root = ET.fromstring(render_sweep_junit(reports[5]).encode())  # expat: strict XML 1.0
    [suite] = root.findall("testsuite")
    cases = {c.get("name") or "": c for c in suite.findall("testcase")}
    assert len(cases) == 12 == int(suite.get("tests") or 0)
    [failed] = [name for name, c in cases.items() if c.find("failure") is not None]
    assert failed == "hicache-on: corruption" and suite.get("failures") == "1"
    message = cases[failed].find("failure").get("message") or ""  # type: ignore[union-attr]
    assert message.startswith("corruption: 0.0% -> ") and "p = " in message
    assert sorted(name for name, c in cases.items() if c.find("skipped") is not None) == [
        f"chunk-big: {m}" for m in ("corruption", "p99_latency", "throughput", "wedging")]
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["sweep"] == SWEEP and properties["run"] == "5"
    assert properties["baseline.run"] == "2"
    assert properties["commit.baseline"] == sweep_store.good
    assert properties["commit.now"] == sweep_store.head
    skipped = ET.fromstring(render_sweep_junit(reports[3]).encode())
    [case] = skipped.iter("testcase")
    assert HOSTILE_REASON in (case.find("skipped").get("message") or "")  # type: ignore[union-attr]
    first = ET.fromstring(render_sweep_junit(reports[1]).encode())
    assert first.get("failures") == "0" and first.get("skipped") == "8"  # nothing to compare


@pytest.mark.real
def test_the_html_is_self_contained_and_holds_no_markup_from_content(
        reports: dict[int, SweepReport]) -> None:
    for report in reports.values():
        page = render_sweep_html(report)
        text = assert_inert_html(page, shown_braces=False)
        [csp] = [a["content"] for t, a in tags(page).tags if t == "meta"
                 and a.get("http-equiv") == "Content-Security-Policy"]
        assert csp == CSP and CSP.startswith("default-src 'none'")
        # every history holds run 3's reason, shown as text, never run as a template
        assert HOSTILE_REASON in text and BRACES in text
    text = assert_inert_html(render_sweep_html(reports[5]), shown_braces=False)
    assert HOSTILE_SUBJECT in text and HOSTILE_FACT in text and HOSTILE_REASON in text
    assert "<a " not in render_sweep_html(reports[5])  # no hunt report beside: no link


@pytest.mark.pure
def test_a_history_chart_escapes_its_labels_and_breaks_at_a_run_that_measured_nothing() -> None:
    runs = [RunMark(1, "clean", accepted=True), RunMark(2, "skipped", note="<b>held</b>"),
            RunMark(3, "clean", baseline=True), RunMark(4, "regression", current=True)]
    chart = history_chart("t", runs, [Line("<script>x</script>", [0.1, None, 0.2, 0.4], True)],
                          lambda v: f"{v:.0%}", "corruption")
    assert "<script>x" not in chart and "&lt;script&gt;x" in chart
    assert "<b>" not in chart and "&lt;b&gt;held" in chart
    assert chart.count("<polyline") == 1  # 3 to 4; 1 stands alone across the skipped run
    assert chart.count('class="point"') == 3
    assert chart.count("baseline-run") == chart.count("current-run") == 1


# --- the command line --------------------------------------------------------------------------


@pytest.mark.real
def test_the_cli_writes_every_format(sweep_store: SweepStore, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = sweep_store.store_arg
    code, out, _ = sweep_report_cli(SWEEP, "--store", store, "-o", str(tmp_path / "r.html"))
    assert code == 0 and out == f"report: {tmp_path / 'r.html'}\n"
    assert "sweep nightly · run 6" in (tmp_path / "r.html").read_text()  # the last run
    code, out, _ = sweep_report_cli(SWEEP, "--store", store, "--run", "5", "-o",
                                    str(tmp_path / "r.html"))
    hunt = tmp_path / hunt_file_name(sweep_store.hunt_campaign)
    assert code == 0 and out.splitlines() == [f"report: {tmp_path / 'r.html'}",
                                              f"hunt report: {hunt}"]
    page = (tmp_path / "r.html").read_text()
    assert f'href="{hunt.name}"' in page and "REGRESSION confirmed" in page
    assert "first bad commit" in hunt.read_text()  # the hunt campaign's own report
    for path in (tmp_path / "r.html", hunt):
        assert path.stat().st_mode & 0o777 == 0o600
    code, out, _ = sweep_report_cli(SWEEP, "--store", store, "--run", "5", "--format", "md",
                                    "-o", "-")
    assert code == 0 and out.startswith("**REGRESSION confirmed:**")
    code, out, _ = sweep_report_cli(SWEEP, "--store", store, "--run", "5", "--format", "junit")
    assert code == 0 and ET.fromstring(out.encode()).get("failures") == "1"  # stdout
    code, _, _ = sweep_report_cli(SWEEP, "--store", store, "--run", "3", "-o",
                                  str(tmp_path / "r.json"))
    saved = json.loads((tmp_path / "r.json").read_text())
    assert code == 0 and saved["answer"]["exit_code"] == 4 and saved["run"]["seq"] == 3
    code, _, _ = sweep_report_cli(SWEEP, "--store", store, "--run", "1", "-o",
                                  str(tmp_path / "r.xml"))
    assert code == 0 and ET.parse(tmp_path / "r.xml").getroot().get("skipped") == "8"
    monkeypatch.chdir(tmp_path)
    code, _, _ = sweep_report_cli(SWEEP, "--store", store, "--run", "2")
    assert code == 0 and "Clean" in (tmp_path / "bisect-sweep-report.html").read_text()


@pytest.mark.real
def test_bad_input_is_one_sentence_and_exit_2(sweep_store: SweepStore, tmp_path: Path) -> None:
    store = sweep_store.store_arg
    for args, said in (
            (["weekly", "--store", store], "no sweep 'weekly'"),
            ([SWEEP, "--store", store, "--run", "99"], "has no run 99 (its runs are 1 to 6)"),
            ([SWEEP, "--store", store, "--format", "pdf"], "unknown report format 'pdf'"),
            ([SWEEP, "--store", str(tmp_path / "none.db")], "no store"),
            ([SWEEP, "--store", store, "-o", str(tmp_path / "r.html" / "x.html")],
             "cannot write")):
        (tmp_path / "r.html").write_text("a file, not a directory")
        code, _, err = sweep_report_cli(*args)
        assert code == 2 and said in " ".join(err.split()), (args, err)
        assert len(err.strip().splitlines()) <= 2, err
    assert not (tmp_path / "none.db").exists()


# --- end to end --------------------------------------------------------------------------------


@pytest.mark.real
def test_the_report_of_a_real_sweep_says_what_bisect_sweep_said(real_sweep: RealSweep,
                                                                tmp_path: Path) -> None:
    """The real runs of `bisect sweep` on twins (``real_sweep``, tests/sweep_support.py):
    accepted, clean, then the race back at a new commit (a hostile subject at HEAD), confirmed
    against the baseline's commit put back, its hunt. The report, built from that store, gives
    the run's own answer, comparisons, commits and history."""
    store, good, head, third = real_sweep.store, real_sweep.good, real_sweep.head, real_sweep.third
    assert real_sweep.codes[2] == 1 and third["status"] == "regression", third
    code, out, _ = sweep_report_cli(SWEEP, "--store", str(store), "--format", "json")
    assert code == 0
    report = SweepReport.from_json(json.loads(out))
    assert (report.run.seq, report.answer.status, report.answer.exit_code) == (
        third["run"], "regression", 1)
    assert report.recomputed and report.baseline is not None and report.baseline.seq == 1
    assert [(v.name, v.state, v.trials, v.confirm_trials) for v in report.variants] == [
        (v["name"], v["state"], v["trials"], v["confirm_trials"]) for v in third["variants"]]
    regressed = {(v.name, m.metric) for v in report.variants for m in v.metrics if m.regressed}
    assert regressed == {(v["name"], m) for v in third["variants"] for m in v["regressed"]}
    assert (report.commit_baseline.sha if report.commit_baseline else None,
            report.commit_now.sha if report.commit_now else None) == (good, head)
    assert [h.run.seq for h in report.history] == [1, 2, 3]
    assert all(h.variants for h in report.history)
    code, out, _ = sweep_report_cli(SWEEP, "--store", str(store), "--format", "junit")
    failures = [c.get("name") for c in ET.fromstring(out.encode()).iter("testcase")
                if c.find("failure") is not None]
    assert failures == [f"{name}: {metric}" for name, metric in sorted(regressed)]
    code, out, _ = sweep_report_cli(SWEEP, "--store", str(store), "--format", "html", "-o",
                                    str(tmp_path / "r.html"))
    assert code == 0
    shown = assert_inert_html((tmp_path / "r.html").read_text(), shown_braces=False)
    assert report.commit_now is not None and report.commit_now.subject == HOSTILE_SUBJECT
    assert HOSTILE_SUBJECT in shown
