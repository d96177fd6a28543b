"""The report model built from real campaigns (twins, Ray, SQLite): its numbers are the
verdict's, its series the stored samples, its provenance free of secrets."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from db.records import GeneratorRow, SessionRow, StepRow, TrialTiming
from db.store import Store
from experiments.campaign import Campaign
from orchestrator.reports.campaign.build import build_report
from orchestrator.reports.campaign.html import render_html
from orchestrator.reports.campaign.markdown import render_markdown
from orchestrator.reports.campaign.model import REPORT_VERSION, Report
from orchestrator.reports.campaign.observed import MAX_EXCERPTS, MAX_POINTS, excerpt
from orchestrator.reports.campaign.provenance import campaign_file
from orchestrator.reports.text import p_text, share
from orchestrator.stored import create_campaign, verdict_of
from tests.support.report_campaigns import (
    CULPRIT,
    FACTORS,
    REPORT_SECRET,
    REPORT_SECRET_ENV,
    WEDGE_CULPRIT,
    ReportCampaigns,
    report_campaign,
    report_campaigns_fixture,  # noqa: F401 - the shared fixture
)

pytestmark = pytest.mark.real


def _built(campaigns: ReportCampaigns, campaign_id: str) -> tuple[Report, dict[str, Any]]:
    with Store.open(str(campaigns.db_path)) as store:
        return build_report(store, campaign_id), verdict_of(store, campaign_id).to_json()


def test_the_culprit_rows_are_the_verdict_s(report_campaigns: ReportCampaigns) -> None:
    report, verdict = _built(report_campaigns, report_campaigns.culprit)
    assert report.headline.status == verdict["status"] == "culprit"
    [row] = [c for c in report.culprits if c.failure == "corruption"]
    [expected] = verdict["culprits"]
    assert row.levels == CULPRIT == expected["factors"]
    assert (row.rate_with, row.rate_without) == (expected["rate_with"], expected["rate_without"])
    assert (row.failed_with, row.sessions_with) == (expected["corrupted_with"],
                                                   expected["sessions_with"])
    assert row.p_value == expected["p_value"] and row.rate_with > 0.2 and row.rate_without == 0
    assert set(row.outcomes) == {"leak"} and row.outcomes["leak"] == row.failed_with
    # the headline says it plainly, with the rates with and without and the p-value
    sentence = report.headline.sentence
    assert sentence.startswith("Corruption follows index_k=bf16 AND hicache=on: ")
    assert f"{share(row.rate_with)} of sessions with it" in sentence
    assert f"{share(row.rate_without)} without" in sentence
    assert f"p = {p_text(row.p_value)}" in sentence and "alpha = 0.01" in report.headline.confidence
    # and the wedge: errors in the sessions, WaitingForInput and aborts in the server's log
    [wedge] = [c for c in report.culprits if c.failure == "wedging"]
    assert wedge.levels == WEDGE_CULPRIT and wedge.outcomes["error"] > 0
    assert wedge.outcomes["log:wedge"] > 0 and wedge.outcomes["log:abort"] > 0
    assert "wedging follows index_k=fp8 AND hicache=on" in sentence


def test_the_variants_add_up_to_the_verdict(report_campaigns: ReportCampaigns) -> None:
    report, verdict = _built(report_campaigns, report_campaigns.culprit)
    assert len(report.variants) == 4 and {v.key for v in report.variants} == {
        v["key"] for v in verdict["variants"]}
    assert sum(v.sessions for v in report.variants) == verdict["cost"]["sessions"] == \
        report.cost.sessions
    # every attempt is in the provenance; those that did not count (an infrastructure
    # failure retried, under load) say so
    done = [t for t in report.provenance.trials if t["status"] == "done"]
    assert sum(v.trials for v in report.variants) == verdict["cost"]["trials"] == len(done)
    assert all(t["failure"] is not None for t in report.provenance.trials
               if t["status"] == "failed")
    by_key = {v["key"]: v for v in verdict["variants"]}
    for row in report.variants:
        shown = by_key[row.key]
        if not shown["stopped_early"]:  # else over its full trials (the next test)
            assert (row.rate, list(row.ci95), row.judged) == (shown["rate"], shown["ci95"],
                                                               shown["judged"])
        assert sum(row.outcomes.values()) == row.sessions
        assert row.culprit == (row.levels in (CULPRIT, WEDGE_CULPRIT))
        assert row.throughput is not None and row.throughput > 0 and row.ttft_p50_ms is not None
    wedged = next(v for v in report.variants if v.levels == WEDGE_CULPRIT)
    assert wedged.errors > 0 and wedged.wedge_events > 0 and wedged.corrupted == 0
    # the interaction plot: every cell of the 2x2, by the culprit's two factors
    assert report.interaction is not None
    assert (report.interaction.row_factor, report.interaction.line_factor) == ("index_k",
                                                                                "hicache")
    points = {(p["row_level"], p["line_level"]): p for p in report.interaction.points}
    assert len(points) == 4 and points[("bf16", "on")]["rate"] > 0.2
    assert points[("fp8", "off")]["rate"] == 0


def test_the_trail_series_and_evidence(report_campaigns: ReportCampaigns) -> None:
    report, verdict = _built(report_campaigns, report_campaigns.culprit)
    assert len(report.trail) == len(verdict["log"]) > 0
    assert [t.answer for t in report.trail] == [s["answer"] for s in verdict["log"]]
    assert report.series and all(s.running for s in report.series)
    assert all(len(s.running) <= MAX_POINTS for s in report.series)
    assert {s.trial_id for s in report.series} <= {t["id"] for t in report.provenance.trials}
    wedged = [s for s in report.series if s.events]
    assert wedged and {e["kind"] for s in wedged for e in s.events} >= {"wedge", "abort"}
    # the twin's log lines carry their time: placed on the series' time axis
    assert any(e["t_s"] is not None for s in wedged for e in s.events)
    leaks = [e for e in report.evidence if e.outcome == "leak"]
    assert 0 < len(leaks) <= MAX_EXCERPTS and {e.outcome for e in report.evidence} == {"leak"}
    for leak in leaks:
        assert leak.family == "dsml" and "DSML" in leak.text and len(leak.text) <= 400
        assert leak.triage is not None and leak.well_formed is not None
        assert leak.variant == "hicache=on,index_k=bf16"
    assert report.omitted["evidence"] == sum(
        v.corrupted for v in report.variants) - len(report.evidence)


def test_provenance_and_the_secret(report_campaigns: ReportCampaigns) -> None:
    report, _ = _built(report_campaigns, report_campaigns.culprit)
    provenance = report.provenance
    assert f"<secret {REPORT_SECRET_ENV}>" in provenance.campaign_file
    assert "race under load" in provenance.campaign_file
    assert provenance.tool_version.startswith("bisect-serving ")
    assert provenance.started_at and provenance.finished_at
    assert provenance.started_at < provenance.finished_at
    # the facts the executor recorded of the node (a `facts` step per node and trial)
    [node] = provenance.nodes
    assert node.node == "here" and node.host and node.server_version  # the twin says its own
    assert node.gpu is None and node.driver is None  # no nvidia-smi here
    assert len([t for t in provenance.trials if t["status"] == "done"]) == report.cost.trials
    assert {t["pool"] for t in provenance.trials} == {"p0", "p1"}
    assert all(t["load"] == [] for t in provenance.trials)  # each pool's own actor ran it
    text = json.dumps(report.to_json(), allow_nan=False)
    assert REPORT_SECRET not in text


def test_to_json_round_trips(report_campaigns: ReportCampaigns) -> None:
    for campaign_id in (report_campaigns.culprit, report_campaigns.clean):
        report, _ = _built(report_campaigns, campaign_id)
        document = report.to_json()
        assert document["report_version"] == REPORT_VERSION
        again = Report.from_json(json.loads(json.dumps(document, allow_nan=False)))
        assert again == report and again.to_json() == document


def test_the_clean_campaign_has_no_culprit(report_campaigns: ReportCampaigns) -> None:
    report, verdict = _built(report_campaigns, report_campaigns.clean)
    assert report.headline.status == verdict["status"] != "culprit"
    assert report.culprits == [] and report.interaction is None and report.evidence == []
    assert report.campaign.factors == FACTORS
    assert report.headline.sentence.endswith(".") and verdict["reason"] in report.headline.sentence
    assert all(v.corrupted == 0 for v in report.variants)


def test_a_credential_in_plain_text_is_redacted(report_campaigns: ReportCampaigns) -> None:
    spec = report_campaign(report_campaigns.workdir / "plain", "plain", {"rules": []})
    service = spec["pools"][0]["services"][0]
    service["env"] = {"HF_TOKEN": "hf_plainLiteral", "CUDA_VISIBLE_DEVICES": "0"}
    service["start"] = [*service["start"], "--admin-password=hunter2", "--max-total-tokens",
                        "4096"]
    text = campaign_file(Campaign.model_validate(spec))
    assert "hf_plainLiteral" not in text and "hunter2" not in text
    assert "HF_TOKEN: <redacted>" in text and "--admin-password=<redacted>" in text
    assert "4096" in text and "CUDA_VISIBLE_DEVICES: '0'" in text  # no credential: kept


def test_node_facts_and_excerpt_triage(report_campaigns: ReportCampaigns) -> None:
    """Facts as the executor records them (a ``facts`` step per node), through the Store."""
    spec = report_campaign(report_campaigns.workdir / "facts", "facts", {"rules": []})
    facts = {"host": "gpu-7", "gpu": "NVIDIA H200", "driver": "550.54", "server_version":
             "0.4.9", "server_build": None, "commit": "0123abc"}
    with Store.open(str(report_campaigns.workdir / "facts.db")) as store:
        campaign_id = create_campaign(store, Campaign.model_validate(spec), "test")
        variant = store.variant(campaign_id, {"index_k": "fp8", "hicache": "off"})
        trial = store.start_trial(campaign_id, variant.id, 0, "p0", seed=1)
        steps = [StepRow("facts", "here", datetime.now(UTC), 0.1, "ok", facts)]
        store.finish_trial(trial, TrialTiming(wall_s=1.0, workload_s=1.0),
                           [SessionRow(0, "s0", "ok", 2, None, None, 0.1)], [], [],
                           steps=steps)
        report = build_report(store, campaign_id)
    [node] = report.provenance.nodes
    assert (node.node, node.host, node.gpu, node.commit, node.server_build) == (
        "here", "gpu-7", "NVIDIA H200", "0123abc", None)
    lost = excerpt("lost_plot", "a=b", 1, "s1", 2,
                   "expected canary 'AB12', got 'ZZ99' in read_file: {...}")
    assert (lost.expected_canary, lost.echoed_canary) == ("AB12", "ZZ99")


def test_a_failed_trial_keeps_a_node_s_earlier_facts(tmp_path: Path) -> None:
    """A trial that fails before its ``facts`` step stores it skipped (no facts): the node's
    facts stay those an earlier trial read. Its load generators are read back (one query for
    the campaign), and a variant that failed twice is unresolvable."""
    spec = report_campaign(tmp_path / "failed", "failed", {"rules": []})
    spec["generators"] = {"count": 2, "resources": {"loadgen": 1}}
    facts = {"host": "gpu-7", "gpu": "NVIDIA H200", "driver": "550.54", "server_version":
             "0.4.9", "server_build": "sglang 0.4.9", "commit": "0123abc"}
    broken = {"index_k": "bf16", "hicache": "off"}
    with Store.open(str(tmp_path / "failed.db")) as store:
        campaign_id = create_campaign(store, Campaign.model_validate(spec), "test")
        good = store.variant(campaign_id, {"index_k": "fp8", "hicache": "off"})
        first = store.start_trial(campaign_id, good.id, 0, "p0", seed=1)
        store.finish_trial(first, TrialTiming(wall_s=1.0, workload_s=1.0),
                           [SessionRow(0, "s0", "ok", 2, None, None, 0.1),
                            SessionRow(1, "s1", "ok", 2, None, None, 0.1)], [], [],
                           generators=[GeneratorRow("n1", "10.0.0.2", 1, 1, False),
                                       GeneratorRow("n2", "10.0.0.3", 1, 1, False)],
                           steps=[StepRow("facts", "here", datetime.now(UTC), 0.1, "ok", facts)])
        variant = store.variant(campaign_id, broken)
        for seq in (1, 2):
            trial = store.start_trial(campaign_id, variant.id, seq, "p0", seed=seq)
            store.fail_trial(trial, "the server exited: <script>x</script>", steps=[
                StepRow("restart", "sglang", datetime.now(UTC), 0.1, "failed",
                        {"error": "exited"}),
                StepRow("facts", "here", datetime.now(UTC), 0.0, "skipped",
                        {"reason": "an earlier step failed"})])
        report = build_report(store, campaign_id)
    [node] = report.provenance.nodes
    assert (node.node, node.host, node.gpu, node.driver, node.server_version,
            node.server_build, node.commit) == ("here", *facts.values())
    loads = {t["id"]: t["load"] for t in report.provenance.trials}
    assert loads[first] == [{"node": "n1", "address": "10.0.0.2", "sessions": 1},
                            {"node": "n2", "address": "10.0.0.3", "sessions": 1}]
    assert [len(load) for t_id, load in loads.items() if t_id != first] == [0, 0]
    assert report.unresolvable == [{"levels": broken, "attempts": 2,
                                    "error": "the server exited: <script>x</script>"}]
    again = Report.from_json(json.loads(json.dumps(report.to_json(), allow_nan=False)))
    assert again == report


def test_a_rate_is_of_full_trials_and_a_stopped_one_only_bounds_it(tmp_path: Path) -> None:
    """A trial stopped once its answer was certain ends with its failing sessions (they finish
    first): 3 of 3 is no 100%. A variant's rate is over its trials that ran to their end; where
    every one stopped, it is a lower bound, the sessions never run counted clean."""
    spec = report_campaign(tmp_path / "stopped", "stopped", {"rules": []})
    planned = spec["workload"]["sessions"]
    both, stopped = {"index_k": "bf16", "hicache": "on"}, {"index_k": "bf16", "hicache": "off"}

    def sessions(corrupt: int, ok: int) -> list[SessionRow]:
        return [SessionRow(i, f"s{i}", "leak" if i < corrupt else "ok", 2, 1 if i < corrupt
                           else None, None, 0.1) for i in range(corrupt + ok)]

    with Store.open(str(tmp_path / "stopped.db")) as store:
        campaign_id = create_campaign(store, Campaign.model_validate(spec), "test")
        for seq, (levels, corrupt, ok, early) in enumerate([
                (both, 2, planned - 2, False), (both, 3, 0, True), (stopped, 3, 0, True)]):
            trial = store.start_trial(campaign_id, store.variant(campaign_id, levels).id, seq,
                                      "p0", seed=seq)
            store.finish_trial(trial, TrialTiming(wall_s=1.0, workload_s=1.0,
                                                  stopped_early=early),
                               sessions(corrupt, ok), [], [])
        report = build_report(store, campaign_id)
    rows = {tuple(v.levels.values()): v for v in report.variants}
    full = rows[("bf16", "on")]
    assert (full.rate, full.judged, full.stopped_early, full.lower_bound) == (
        round(2 / planned, 6), planned, 1, False)
    assert (full.corrupted, full.sessions) == (5, planned + 3)  # every session still counted
    bound = rows[("bf16", "off")]
    assert (bound.rate, bound.judged, bound.lower_bound) == (round(3 / planned, 6), planned, True)
    # the formats say it: a lower bound, at least 3 of the planned sessions
    assert f"≥ {bound.rate:.1%}" in render_html(report)
    assert f"≥ {bound.rate:.1%}" in render_markdown(report)
