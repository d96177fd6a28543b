"""The campaign driver: asks the strategy, dispatches trials to pool actors, stores every result.

The store is the state: the driver is its only writer, a trial is stored (sessions, metrics,
logs) in one transaction before it counts as done, and a resumed campaign discards what was
unfinished and goes on from what was stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

from db.store import Store
from deploy.errors import SetupError
from deploy.locks import NodeLocked
from deploy.transports.base import TransportError
from deploy.transports.factory import Transports
from deploy.workdir import UnsafeWorkdir
from experiments.campaign import Campaign
from experiments.outcomes import is_corrupt
from experiments.secrets import SecretMissing, SecretValues, redact, redact_any
from experiments.workload.http_client import bearer, header_lines
from orchestrator.core.evidence import failing_for, variant_key
from orchestrator.core.strategies.base import Strategy
from orchestrator.core.strategies.optimize import Search, Searching
from orchestrator.core.strategies.registry import strategy_for
from orchestrator.core.verdict import Verdict
from orchestrator.executor.base import Executor, PoolCrashed, TrialOrder, TrialReport
from orchestrator.executor.load_generators import unplaceable
from orchestrator.executor.nodes import PreflightFailed, check_nodes, locked
from orchestrator.executor.placement import place_pairs
from orchestrator.executor.ray_pool import PoolActors, RayNotStarted, ensure_ray
from orchestrator.executor.reaper import Reaper
from orchestrator.executor.source_changes import recover_nodes
from orchestrator.executor.trial import INFRA_ERROR, generator_rows, service_manager
from orchestrator.stored import (
    campaign_of,
    evidence,
    next_trial_seed,
    skipping,
    unresolvable,
    verdict_of,
)

MAX_INFRA_ATTEMPTS = 3  # infrastructure failures of one variant in one run: then the run stops
Progress = Callable[[str], None]


class RunFailed(RuntimeError):
    """The campaign could not go on (not a bad variant: a broken run)."""


def read_secrets(campaign: Campaign) -> SecretValues:
    """Every secret the campaign refers to, from the driver's environment (or files), checked
    before anything changes: ``SecretMissing`` names the field and the variable (exit 2)."""
    secrets = SecretValues.read(campaign)
    for index, pool in enumerate(campaign.pools):
        try:
            header_lines(bearer(secrets.api_key(pool.api_key_env)))
        except ValueError as exc:
            raise SecretMissing(f"pools[{index}].api_key_env: ${pool.api_key_env}: {exc}") from None
    return secrets


def redacted(report: TrialReport) -> TrialReport:
    """What a trial observed, with every secret value taken out before it is stored: a server
    may echo its key in a log line, an error or a reply."""
    return dataclasses.replace(
        report,
        error=None if report.error is None else redact(report.error),
        sessions=[dataclasses.replace(s, evidence=redact(s.evidence)) if s.evidence else s
                  for s in report.sessions],
        logs=[dataclasses.replace(row, text=redact(row.text)) for row in report.logs],
        steps=tuple(dataclasses.replace(step, details=redact_any(step.details))
                    for step in report.steps),  # a proof's argv and env hold their values
    )


def running_before(campaign: Campaign, transports: Transports) -> dict[str, bool]:
    """Which services were running before the campaign (asked after ``stop_leftovers``, so a
    process service is not): ``leave_as_found`` has them running after it."""
    workdirs = {node.name: node.workdir for node in campaign.nodes}
    return {
        service.name: service_manager(service, transports, workdirs).is_running(service.name)
        for pool in campaign.pools for service in pool.services
    }


def restore_services(campaign: Campaign, transports: Transports,
                     was_running: dict[str, bool]) -> None:
    """Leave the nodes as found, from the driver (the safety net behind the actors): our own
    processes stopped; a systemd unit stripped of bisect's drop-in and running again if it was
    (each manager knows how: ``ServiceManager.leave_as_found``)."""
    workdirs = {node.name: node.workdir for node in campaign.nodes}
    for pool in campaign.pools:
        for service in reversed(pool.services):
            service_manager(service, transports, workdirs).leave_as_found(
                service.name, was_running.get(service.name, False))


def run_campaign(
    store: Store, campaign_id: str, *, progress: Progress = lambda _: None,
    ray_address: str | None = None,
) -> Verdict:
    campaign = campaign_of(store, campaign_id)
    secrets = read_secrets(campaign)  # re-read at every resume: never stored
    shown = progress
    progress = lambda message: shown(redact(message))  # noqa: E731 - one line, one purpose
    transports = Transports(campaign.nodes)
    reaper = Reaper(campaign)  # first: whatever happens next, a kill leaves nothing running
    try:
        # reclaim: this campaign's own locks, left by its driver killed on this host
        with locked(campaign, transports, campaign_id, store, reclaim=True, reaper=reaper.pid):
            check_nodes(campaign, transports, secrets)  # every problem, nothing changed
            for undone in recover_nodes(campaign, transports):
                progress(f"undid what an interrupted run left: {undone}")
            stop_leftovers(campaign, transports)  # a killed driver's services (SSH nodes too)
            discarded = store.discard_unfinished(campaign_id)
            if discarded:
                progress(f"discarded {len(discarded)} unfinished trial(s): {discarded}")
            store.set_campaign_status(campaign_id, "running")
            try:  # the reaper told first: a kill while Ray starts leaves none of it
                ensure_ray(ray_address, starting=reaper.watch_ray)
            except RayNotStarted as exc:  # nothing of the campaign ran yet: resume may retry
                store.set_campaign_status(campaign_id, "interrupted")
                raise RunFailed(f"{exc} (`bisect resume {campaign_id}` retries)") from None
            if (unplaced := unplaceable(campaign.generators, len(campaign.pools))) is not None:
                store.set_campaign_status(campaign_id, "failed")
                raise RunFailed(unplaced)
            was_running = running_before(campaign, transports)
            try:
                actors = PoolActors(pools_spec(campaign), [p.name for p in campaign.pools],
                                    secrets.values)
                drive(store, campaign_id, campaign, actors, progress)
            except BaseException:
                _best_effort(lambda: restore_services(campaign, transports, was_running),
                             progress, "restore the nodes")
                raise
            restore_services(campaign, transports, was_running)
    except NodeLocked as exc:
        # Refused by another campaign (a live driver of this one is running it: left alone).
        if exc.holder != campaign_id:
            refused(store, campaign_id)
        raise RunFailed(str(exc)) from None
    except (PreflightFailed, UnsafeWorkdir):
        refused(store, campaign_id)
        raise
    except TransportError as exc:  # a node out of reach: one sentence, never a traceback
        ended_early(store, campaign_id, "interrupted")
        raise RunFailed(f"{exc} (`bisect resume {campaign_id}` retries)") from None
    except KeyboardInterrupt:
        ended_early(store, campaign_id, "interrupted")
        raise
    except Exception:
        ended_early(store, campaign_id, "failed")  # an error nobody foresaw
        raise
    finally:
        reaper.done()
        transports.close()
    return verdict_of(store, campaign_id)


def ended_early(store: Store, campaign_id: str, status: str) -> None:
    """A run that stopped before its drive loop said how it ended (a node out of reach, an
    error nobody foresaw): its campaign never says "running" with no driver. What the loop set
    stays; a failing store must not hide why the run stopped."""
    with contextlib.suppress(Exception):
        if store.get_campaign(campaign_id).status == "running":
            store.set_campaign_status(campaign_id, status)


def refused(store: Store, campaign_id: str) -> None:
    """A run refused before it changed anything: a campaign that never ran a trial says so
    (`bisect ls`: refused; `bisect resume` may try again), never "running" with no driver."""
    if not store.trials(campaign_id, status=None):
        store.set_campaign_status(campaign_id, "refused")


def stop_leftovers(campaign: Campaign, transports: Transports) -> None:
    """Stop what a killed driver left running (the process manager's services; a systemd unit
    is left for ``leave_as_found``), before the pools start anything (its reaper stops them
    too, unless it could not reach a node then)."""
    workdirs = {node.name: node.workdir for node in campaign.nodes}
    for pool in campaign.pools:
        for service in reversed(pool.services):
            service_manager(service, transports, workdirs).stop_leftover(service.name)


def drive(store: Store, campaign_id: str, campaign: Campaign, actors: Executor,
          progress: Progress = lambda _: None, search: Search | None = None) -> None:
    """Propose, dispatch, store, until the strategy is done; then the executor stops the pools'
    services. The loop knows pools only through ``actors`` (Ray's, or the benchmark's simulated
    ones) and nodes not at all: ``run_campaign`` prepares them first. ``search``: where a
    searching strategy's proposals come from, when the caller holds its own study (the
    benchmarks', in memory); by default the campaign's study next to the store."""
    base = strategy_for(campaign)
    if isinstance(base, Searching) and search is not None:
        base = base.with_search(search)
    elif isinstance(base, Searching):  # its proposals come from a study next to the store
        from orchestrator.search.study import StudyError, open_search, study_url  # Optuna

        try:
            opened = open_search(campaign, campaign_id, store)
            base = base.with_search(opened)
            progress(f"study {opened.study.study_name} in {study_url(store)} "
                     "(optuna-dashboard opens it)")
        except StudyError as exc:
            store.set_campaign_status(campaign_id, "failed")
            raise RunFailed(str(exc)) from None
    failing, planned = failing_for(campaign.strategy.target), campaign.workload.sessions
    infra_failures: dict[str, int] = {}  # this run's, per variant
    pending: dict[int, dict[str, str]] = {}
    running: dict[str, dict[str, str]] = {}  # what each pool ran last (restart economy)
    after: dict[str, dict[str, str]] = {}  # a pair's partner, to run next on its pool
    status = "failed"
    try:
        while True:
            trials = store.trials(campaign_id, status=None)
            skipped = unresolvable(trials)
            blocked = {variant_key(u.levels) for u in skipped}
            strategy: Strategy = skipping(base, skipped)
            seen = evidence(trials, failing, planned)
            free = [p.name for p in campaign.pools if p.name not in actors.busy]
            # a pair's partner first, where its first trial ended: next on that pool
            partners = [(pool, after.pop(pool)) for pool in free if pool in after]
            free = [pool for pool in free if pool not in dict(partners)]
            proposals = [
                levels
                for levels in strategy.propose(seen, [*pending.values(), *after.values(),
                                                      *(levels for _, levels in partners)])
                if variant_key(levels) not in blocked
            ]
            placed = place_pairs(campaign, free, proposals, running,
                                 {t.seq: t.pool for t in trials}, after)
            next_seq = max((t.seq for t in trials), default=0) + 1
            held = {t.seed for t in trials if t.status in ("done", "running")}
            for pool, levels in [*partners, *placed.now]:
                variant = store.variant(campaign_id, levels)
                seed = next_trial_seed(campaign.workload.seed, held)  # the run's draw
                held.add(seed)
                trial_id = store.start_trial(campaign_id, variant.id, next_seq, pool, seed)
                pending[trial_id] = levels
                rule = strategy.stop_rule(levels, seen)
                actors.submit(pool, TrialOrder(trial_id, levels, seed, rule,
                                               rule.failing if rule and rule.failing else failing))
                running[pool] = levels
                progress(f"trial {next_seq} on {pool}" + (f": {variant.key}" if variant.key
                                                          else ""))
                next_seq += 1
            after.update(placed.after)
            if not pending:
                break
            try:
                pool, report = actors.next_report()
            except PoolCrashed as exc:
                raise RunFailed(f"{exc} (`bisect resume {campaign_id}` retries)") from exc
            report = redacted(report)
            report_levels = pending.pop(report.trial_id)
            if report.error is None:
                store.finish_trial(report.trial_id, report.timing, report.sessions,
                                   report.metrics, report.logs, generator_rows(report.generators),
                                   report.steps, report.performance)
                corrupt = sum(is_corrupt(s.outcome) for s in report.sessions)
                early = " (stopped early: decided)" if report.timing.stopped_early else ""
                progress(f"  done on {pool}: {corrupt}/{len(report.sessions)} corrupt{early}")
            else:
                failure = report.failure or "variant"
                store.fail_trial(report.trial_id, report.error, report.timing, failure=failure,
                                 steps=report.steps)
                running.pop(pool, None)  # half-deployed: assume nothing of it runs
                after.pop(pool, None)  # its pair is broken: the strategy asks again
                progress(f"  FAILED on {pool}: {report.error.splitlines()[0]}")
                if failure == "setup":  # every variant would fail so: stop, never retried
                    raise SetupError(f"{report.error.splitlines()[0]} (the campaign stopped: "
                                     "no variant can run there until that is fixed)")
                if failure == "infrastructure":
                    key = variant_key(report_levels)
                    infra_failures[key] = infra_failures.get(key, 0) + 1
                    if infra_failures[key] >= MAX_INFRA_ATTEMPTS:
                        last = report.error.splitlines()[0].removeprefix(INFRA_ERROR)
                        raise RunFailed(f"{key}: {MAX_INFRA_ATTEMPTS} infrastructure failures, "
                                        f"the last: {last} (`bisect resume {campaign_id}` "
                                        "retries)")
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        try:
            if status == "done":
                actors.shutdown()
            else:  # the run failed already: a node out of reach must not hide why
                _best_effort(actors.shutdown, progress, "stop the pools' services")
        finally:
            store.set_campaign_status(campaign_id, status, finished=status == "done")


def pools_spec(campaign: Campaign) -> dict[str, object]:
    """The campaign as the pools' actors read it: without its strategy, which only the driver
    runs (a plug-in kind may be registered in the driver's process alone)."""
    return {k: v for k, v in campaign.model_dump(mode="json").items() if k != "strategy"}


def _best_effort(step: Callable[[], None], progress: Progress, what: str) -> None:
    """Cleanup after a failed run: what stops it (a node still out of reach, which a pool's
    actor reports wrapped in a RayTaskError) is said, and `bisect resume` finishes the job."""
    try:
        step()
    except Exception as exc:
        progress(f"could not {what}: {str(exc).strip().splitlines()[-1]} "
                 "(`bisect resume` does it)")
