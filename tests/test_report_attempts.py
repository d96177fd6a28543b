"""A report whose numbers add up when an attempt failed: an infrastructure failure retried is
listed in the provenance, marked as such, and counted nowhere else (the cost, the variants, the
headline count the trials that ran to the end). Seen under load: the page said "Where each
trial ran (13 trials)" under a cost of 12."""

from __future__ import annotations

import re

import pytest

from db import Store, TrialTiming
from experiments.campaign import Campaign
from orchestrator.reports.campaign.build import build_report
from orchestrator.reports.campaign.html import render_html
from orchestrator.reports.campaign.model import Report
from orchestrator.stored import create_campaign
from tests.support.html_checks import tags
from tests.support.stored import campaign_spec, metrics, sessions

pytestmark = pytest.mark.pure

TIMING = TrialTiming(wall_s=20.0, restart_s=5.0, workload_s=14.0, restarts=1)


def retried_campaign(store: Store) -> str:
    """Four variants, two trials each; the first attempt of one failed on the way to the node
    and was retried."""
    campaign_id = create_campaign(store, Campaign.model_validate(campaign_spec("retried")), "")
    seq = 0
    for index_k in ("fp8", "bf16"):
        for hicache in ("off", "on"):
            levels = {"index_k": index_k, "hicache": hicache}
            variant = store.variant(campaign_id, levels)
            if seq == 2:
                lost = store.start_trial(campaign_id, variant.id, seq, "pool-1", seed=seq)
                store.fail_trial(lost, "infrastructure error: gpu-a: ssh dropped",
                                 failure="infrastructure")
                seq += 1
            for _ in range(2):
                trial = store.start_trial(campaign_id, variant.id, seq, "pool-1", seed=seq)
                leaks = 12 if levels == {"index_k": "bf16", "hicache": "on"} else 0
                store.finish_trial(trial, TIMING, sessions(80, leaks), metrics(4), [])
                seq += 1
    store.set_campaign_status(campaign_id, "done", finished=True)
    return campaign_id


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    with Store.open(str(tmp_path_factory.mktemp("retried") / "bisect.db")) as store:
        return build_report(store, retried_campaign(store))


def test_the_failed_attempt_is_listed_as_such_and_counted_nowhere_else(report: Report) -> None:
    statuses = [(t["status"], t["failure"]) for t in report.provenance.trials]
    assert len(statuses) == 9 and statuses.count(("done", None)) == 8
    assert ("failed", "infrastructure") in statuses
    assert report.cost.trials == sum(v.trials for v in report.variants) == 8
    assert Report.from_json(report.to_json()) == report


def test_the_page_says_how_many_trials_and_how_many_attempts(report: Report) -> None:
    page = render_html(report)
    shown = page[page.index('<details id="trials">'):]
    shown = shown[:shown.index("</details>")]
    [summary] = re.findall(r"<summary>(.*?)</summary>", shown, re.DOTALL)
    assert summary == ("Where each trial ran (8 trials, and 1 attempt that did not count: "
                       "failed, skipped or unfinished)")
    rows = ["".join(tags(row).text) for row in re.findall(r"<tr>.*?</tr>", shown, re.DOTALL)]
    assert sum("failed (infrastructure)" in row for row in rows) == 1
    assert sum("done" in row for row in rows) == 8 and len(rows) == 1 + 9  # the head row
