"""A campaign as the store holds it: created, read back, and its evidence and verdict
recomputed from the stored trials. What a user reads (`verdict`, `log`, `show`, `report`) runs on
this module alone: no Ray, no SSH, no executor. Only ``recompute`` (``verdict_of``) computes: it
alone imports the strategies and the verdict (scipy, numpy), so that `bisect show` reads
without them.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from db.records import TrialRecord
from experiments.campaign import Campaign, Workload
from orchestrator.core.evidence import (
    CORRUPTING,
    Failing,
    Latency,
    Performance,
    TrialEvidence,
    failing_for,
    variant_key,
)
from orchestrator.core.strategies.base import Unresolvable

if TYPE_CHECKING:
    from db.store import Store
    from orchestrator.core.strategies.base import Strategy
    from orchestrator.core.verdict import Verdict

MAX_FAILED_ATTEMPTS = 2  # then the variant is unresolvable, like `git bisect skip`
TRIAL_STRIDE = 1_000_003  # a draw's seed: the run seed times this, plus the draw's number
SEED_BITS = 31  # of a drawn or derived run seed: its trials' seeds fit 64 bits with room


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
                      failing=failing, performance=performance(t.performance), seq=t.seq,
                      pool=t.pool)
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


def campaign_seed(store: Store, campaign_id: str) -> int:
    """The run seed its trials' seeds come from (``trial_seed``): what ``--seed`` replays."""
    return campaign_of(store, campaign_id).workload.seed


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
        Unresolvable(failed[-1].levels, len(failed), failed[-1].error or "unknown error",
                     failed[-1].failed_step)
        for failed in failures.values()
        if len(failed) >= MAX_FAILED_ATTEMPTS
    ]


def verdict_of(store: Store, campaign_id: str) -> Verdict:
    """Recompute the verdict from the stored trials."""
    return recompute(campaign_of(store, campaign_id), store.trials(campaign_id, status=None))


def recompute(campaign: Campaign, trials: list[TrialRecord]) -> Verdict:
    """The verdict of ``campaign`` on its stored ``trials`` (every status), read by the caller:
    a report reads them once for the verdict and for what they observed."""
    from orchestrator.core.strategies.registry import strategy_for
    from orchestrator.core.verdict import CostModel, verdict_from

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


def seed_given(workload: Workload) -> bool:
    """Whether the file (or whoever built the workload) set ``workload.seed``: a replay of that
    draw on purpose. Absent, each campaign draws its own run seed."""
    return "seed" in workload.model_fields_set


def draw_seed() -> int:
    """A fresh run seed: never 0, the schema's default (a report leaves defaults out)."""
    return secrets.randbelow(2**SEED_BITS - 1) + 1


def derived_seed(seed: int, *parts: object) -> int:
    """A run seed of its own for each ``parts`` (a sweep's run number, a hunt), reproducible
    from ``seed``: a sweep file's seed gives every run its own draw, not one draw for all."""
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**SEED_BITS - 1) + 1


def trial_seed(run_seed: int, slot: int) -> int:
    """The seed of draw ``slot`` (1, 2, ...) of a campaign whose run seed (its stored
    ``workload.seed``) is ``run_seed``: session keys, canaries, filler and arrivals, or the
    probe's BISECT_SEED. The same run seed gives the same draws (a resume goes on with it,
    ``--seed`` replays it); wrapped to 64 bits, where the store keeps it (identical whenever it
    fits)."""
    return (run_seed * TRIAL_STRIDE + slot + 2**63) % 2**64 - 2**63


def next_trial_seed(run_seed: int, held: set[int]) -> int:
    """The seed of the next trial: the lowest draw no trial holds. A trial that failed or was
    discarded holds none, so its retry sends the sessions it would have sent, and a replay's
    counted trials are the original's even where the original had to retry or resume."""
    slot = 1
    while (seed := trial_seed(run_seed, slot)) in held:
        slot += 1
    return seed


def run_seed(campaign: Campaign, seed: int | None = None) -> int:
    """The run seed of a new campaign: ``seed`` (``--seed``: a replay on purpose), else the
    file's ``workload.seed`` where it sets one, else a fresh draw."""
    if seed is not None:
        return seed
    return campaign.workload.seed if seed_given(campaign.workload) else draw_seed()


def create_campaign(store: Store, campaign: Campaign, source: str,
                    seed: int | None = None) -> str:
    """Store a new campaign with its run seed (``run_seed``) as its ``workload.seed``: every
    read of it (the driver, a resume, `bisect show`, the report) has the seed its trials used."""
    workload = campaign.workload.model_copy(update={"seed": run_seed(campaign, seed)})
    campaign = campaign.model_copy(update={"workload": workload})
    campaign_id = new_campaign_id(campaign.name)
    store.create_campaign(campaign_id, campaign.name, campaign.model_dump(mode="json"), source)
    return campaign_id


