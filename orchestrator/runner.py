"""The campaign driver: asks the strategy, dispatches trials to pool actors, stores every result.

The store is the state: the driver is its only writer, a trial is stored (sessions, metrics,
logs) in one transaction before it counts as done, and a resumed campaign discards what was
unfinished and goes on from what was stored.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime

from db.records import TrialRecord
from db.store import Store
from deploy.services.process import ProcessServiceManager
from deploy.transports.factory import Transports
from experiments.campaign import Campaign
from experiments.outcomes import is_corrupt
from orchestrator.evidence import TrialEvidence, variant_key
from orchestrator.ray_pool import PoolActors, PoolCrashed, ensure_ray
from orchestrator.strategies.adaptive import Adaptive
from orchestrator.strategies.base import Strategy
from orchestrator.strategies.factorial import Factorial
from orchestrator.trial import TrialOrder
from orchestrator.verdict import CostModel, Unresolvable, Verdict, decide, from_replay

MAX_FAILED_ATTEMPTS = 2  # then the variant is unresolvable, like `git bisect skip`
Progress = Callable[[str], None]


class RunFailed(RuntimeError):
    """The campaign could not go on (not a bad variant: a broken run)."""


def new_campaign_id(name: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


def evidence(trials: list[TrialRecord]) -> list[TrialEvidence]:
    return [
        TrialEvidence(levels=t.levels, counts=t.counts, restarts=t.restarts,
                      wall_s=t.wall_s or 0.0, workload_s=t.workload_s or 0.0,
                      stopped_early=t.stopped_early)
        for t in trials
        if t.status == "done"
    ]


def campaign_of(store: Store, campaign_id: str) -> Campaign:
    return Campaign.model_validate(store.get_campaign(campaign_id).spec)


def strategy_for(campaign: Campaign) -> Factorial | Adaptive:
    plan = campaign.strategy
    if campaign.strategy_kind == "factorial":
        return Factorial(campaign.level_names(), plan.repeats)
    assert campaign.known_good is not None and campaign.known_bad is not None  # validated
    return Adaptive(
        campaign.level_names(), campaign.known_good, campaign.known_bad,
        alpha=plan.alpha, clean_rate=plan.clean_rate, min_trials=plan.min_trials,
        reproduce_trials=plan.reproduce_trials,
        max_trials_per_variant=plan.max_trials_per_variant, max_trials=plan.max_trials,
    )


def unresolvable(trials: list[TrialRecord]) -> list[Unresolvable]:
    """Variants whose deploys failed MAX_FAILED_ATTEMPTS times: skipped, with the last reason."""
    failures: dict[str, list[TrialRecord]] = {}
    for trial in trials:
        if trial.status == "failed":
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
    done = evidence(trials)
    skipped = unresolvable(trials)
    cost = CostModel(campaign.cost.restart_s, campaign.cost.workload_s, campaign.cost.gpus)
    strategy = strategy_for(campaign)
    if isinstance(strategy, Adaptive):
        return from_replay(strategy.replay(done), done, campaign.level_names(), cost, skipped,
                           alpha=campaign.strategy.alpha)
    return decide(
        done, campaign.level_names(), alpha=campaign.strategy.alpha,
        clean_rate=campaign.strategy.clean_rate, cost=cost, known_bad=campaign.known_bad,
        unresolvable=skipped,
    )


def create_campaign(store: Store, campaign: Campaign, source: str) -> str:
    campaign_id = new_campaign_id(campaign.name)
    store.create_campaign(campaign_id, campaign.name, campaign.model_dump(mode="json"), source)
    return campaign_id


def stop_services(campaign: Campaign) -> None:
    """Stop every service of the campaign from the driver: the safety net behind the actors."""
    workdirs = {node.name: node.workdir for node in campaign.nodes}
    transports = Transports(campaign.nodes)
    try:
        for pool in campaign.pools:
            for service in reversed(pool.services):
                transport = transports[service.node]
                ProcessServiceManager(transport, workdirs[service.node]).stop(service.name)
    finally:
        transports.close()


def run_campaign(
    store: Store, campaign_id: str, *, progress: Progress = lambda _: None,
    ray_address: str | None = None,
) -> Verdict:
    campaign = campaign_of(store, campaign_id)
    discarded = store.discard_unfinished(campaign_id)
    if discarded:
        progress(f"discarded {len(discarded)} unfinished trial(s): {discarded}")
    store.set_campaign_status(campaign_id, "running")
    strategy: Strategy = strategy_for(campaign)
    ensure_ray(ray_address)
    actors = PoolActors(campaign.model_dump(mode="json"), [p.name for p in campaign.pools])
    pending: dict[int, dict[str, str]] = {}
    status = "failed"
    try:
        while True:
            trials = store.trials(campaign_id, status=None)
            blocked = {variant_key(u.levels) for u in unresolvable(trials)}
            free = [p.name for p in campaign.pools if p.name not in actors.busy]
            proposals = [
                levels
                for levels in strategy.propose(evidence(trials), list(pending.values()))
                if variant_key(levels) not in blocked
            ]
            next_seq = max((t.seq for t in trials), default=0) + 1
            for pool, levels in zip(free, proposals, strict=False):
                variant = store.variant(campaign_id, levels)
                seed = campaign.workload.seed * 1_000_003 + next_seq
                trial_id = store.start_trial(campaign_id, variant.id, next_seq, pool, seed)
                pending[trial_id] = levels
                rule = strategy.stop_rule(levels, evidence(trials))
                actors.submit(pool, TrialOrder(trial_id, levels, seed, rule))
                progress(f"trial {next_seq} on {pool}: {variant.key}")
                next_seq += 1
            if not pending:
                break
            try:
                pool, report = actors.next_report()
            except PoolCrashed as exc:
                raise RunFailed(f"{exc} (`bisect resume {campaign_id}` retries)") from exc
            pending.pop(report.trial_id)
            if report.error is None:
                store.finish_trial(report.trial_id, report.timing, report.sessions,
                                   report.metrics, report.logs)
                corrupt = sum(is_corrupt(s.outcome) for s in report.sessions)
                early = " (stopped early: decided)" if report.timing.stopped_early else ""
                progress(f"  done on {pool}: {corrupt}/{len(report.sessions)} corrupt{early}")
            else:
                store.fail_trial(report.trial_id, report.error, report.timing)
                progress(f"  FAILED on {pool}: {report.error.splitlines()[0]}")
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        try:
            actors.shutdown()
        finally:
            stop_services(campaign)
            store.set_campaign_status(campaign_id, status, finished=status == "done")
    return verdict_of(store, campaign_id)
