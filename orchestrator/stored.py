"""A campaign as the store holds it: created, read back, and its evidence and verdict
recomputed from the stored trials. What a user reads (`verdict`, `log`, `show`, `report`) runs on
this module alone: no Ray, no SSH, no executor.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from db.records import TrialRecord
from db.store import Store
from experiments.campaign import Campaign
from orchestrator.core.evidence import (
    CORRUPTING,
    Failing,
    Latency,
    Performance,
    TrialEvidence,
    failing_for,
    variant_key,
)
from orchestrator.core.strategies.base import Strategy
from orchestrator.core.strategies.registry import strategy_for
from orchestrator.core.verdict import CostModel, Unresolvable, Verdict, verdict_from

MAX_FAILED_ATTEMPTS = 2  # then the variant is unresolvable, like `git bisect skip`


def new_campaign_id(name: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


def evidence(trials: list[TrialRecord], failing: Failing = CORRUPTING,
             planned: int = 0) -> list[TrialEvidence]:
    """Finished trials as the strategies see them, judged against ``failing`` (the campaign's
    target, ``failing_for``). ``planned``: sessions per trial."""
    return [
        TrialEvidence(levels=t.levels, counts=t.counts, restarts=t.restarts,
                      wall_s=t.wall_s or 0.0, workload_s=t.workload_s or 0.0,
                      stopped_early=t.stopped_early, events=t.events, planned=planned,
                      failing=failing, performance=performance(t.performance), seq=t.seq)
        for t in trials
        if t.status == "done"
    ]


def performance(stored: dict[str, Any] | None) -> Performance | None:
    """A trial's stored figures (``StressResult.performance``) as the core's value; None for a
    trial stored before they were (0007). Keys a later version adds are left out."""
    if stored is None:
        return None
    latencies = {name: None if (got := stored.get(name)) is None else
                 Latency(got["p50_ms"], got["p90_ms"], got["p99_ms"])
                 for name in ("ttft", "tpot", "itl", "e2e")}
    return Performance(
        wall_s=stored["wall_s"], requests=stored["requests"], completed=stored["completed"],
        output_tokens=stored["output_tokens"], good_sessions=stored["good_sessions"],
        request_throughput=stored["request_throughput"],
        output_throughput=stored["output_throughput"], goodput=stored["goodput"], **latencies)


def campaign_of(store: Store, campaign_id: str) -> Campaign:
    return Campaign.model_validate(store.get_campaign(campaign_id).spec)


def unresolvable(trials: list[TrialRecord]) -> list[Unresolvable]:
    """Variants whose deploys failed MAX_FAILED_ATTEMPTS times: skipped, with the last reason.

    What counts is a failure of the variant itself: its checkout or build failed, its server
    exited or never became healthy, or it could not be proven loaded (for a commit: ``git bisect
    skip``). A failure of the way to the node (SSH drop, command timeout: the trial's
    ``failure`` is "infrastructure", stored by the exception's type) says
    nothing about the variant: it is retried, and stops the run when it persists."""
    failures: dict[str, list[TrialRecord]] = {}
    for trial in trials:
        if trial.status == "failed" and trial.failure == "variant":
            failures.setdefault(variant_key(trial.levels), []).append(trial)
    return [
        Unresolvable(failed[-1].levels, len(failed), failed[-1].error or "unknown error")
        for failed in failures.values()
        if len(failed) >= MAX_FAILED_ATTEMPTS
    ]


def verdict_of(store: Store, campaign_id: str) -> Verdict:
    """Recompute the verdict from the stored trials."""
    campaign = campaign_of(store, campaign_id)
    trials = store.trials(campaign_id, status=None)
    failing = failing_for(campaign.strategy.target)
    done = evidence(trials, failing, campaign.workload.sessions)
    skipped = unresolvable(trials)
    cost = CostModel(campaign.cost.restart_s, campaign.cost.workload_s, campaign.cost.gpus)
    strategy = skipping(strategy_for(campaign), skipped)
    return verdict_from(strategy.conclude(done, skipped), done, campaign.level_names(), cost,
                        skipped, campaign.strategy.alpha, failing)


def skipping(strategy: Strategy, skipped: list[Unresolvable]) -> Strategy:
    """The strategy told which variants cannot be deployed (``Strategy.meeting``)."""
    return strategy.meeting(skipped)


def create_campaign(store: Store, campaign: Campaign, source: str) -> str:
    campaign_id = new_campaign_id(campaign.name)
    store.create_campaign(campaign_id, campaign.name, campaign.model_dump(mode="json"), source)
    return campaign_id


