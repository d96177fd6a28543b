"""One run of a regression sweep: take the sweep's lock, read the nodes' facts, compare each
variant with the baseline (an ordinary campaign of the sweep strategy, driven like any other),
confirm before alerting, hunt the commit where the sweep asks, accept where told.

The run is a row of the store (``db.sweeps``) linked to its campaign: its trials, sessions, node
facts and decision trail are the campaign's, so `bisect show`, `log` and `report` read a run as
they read a campaign.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from db.store import Store
from db.sweep_lock import SweepLocked
from db.sweeps import SweepRunRecord, Sweeps
from deploy.facts import node_facts
from deploy.transports.factory import Transports
from experiments.campaign import Factor
from experiments.secrets import redact
from experiments.strategy_config import SweepConfig
from experiments.sweep import BUILD, Sweep, sweep_campaign
from orchestrator.core.strategies.base import Status
from orchestrator.stored import (
    campaign_of,
    campaign_seed,
    create_campaign,
    derived_seed,
    seed_given,
    verdict_of,
)
from orchestrator.sweeps.baseline import (
    baseline_trials,
    changed_facts,
    changed_settings,
    changed_variants,
    one_commit,
    unrestorable,
)

Progress = Callable[[str], None]
EXIT = {"clean": 0, "regression": 1, "inconclusive": 3, "skipped": 4, "failed": 1}


class NotAccepted(ValueError):
    """--accept of a run that found a regression, without --force."""


@dataclass(frozen=True)
class SweepOutcome:
    run: SweepRunRecord
    status: str  # clean | regression | inconclusive | skipped | failed
    result: dict[str, Any] = field(default_factory=dict)
    accepted: bool = False

    @property
    def exit_code(self) -> int:
        return EXIT[self.status]


def read_facts(sweep: Sweep) -> dict[str, dict[str, Any]]:
    """Each node's facts now, before anything changes (its tree's commit where it runs a
    service from the sweep's source)."""
    source = sweep.source
    trees: dict[str, str] = {}
    if source is not None:
        trees = {s.node: source.tree for pool in sweep.pools for s in pool.services
                 if source.services is None or s.name in source.services}
    transports = Transports(sweep.nodes)
    try:
        return {node.name: node_facts(transports[node.name], tree=trees.get(node.name)).details()
                for node in sweep.nodes}
    finally:
        transports.close()


def build_factor(sweep: Sweep, commit: str) -> Factor:
    """The factor that puts the baseline's commit back: ``current`` leaves the tree as found,
    ``baseline`` checks ``commit`` out (and builds it), reverted at the end like any git level."""
    assert sweep.source is not None
    source = sweep.source
    return Factor.model_validate({
        "name": BUILD, "services": source.services,
        "levels": {"current": None, "baseline": {"git": {
            "tree": source.tree, "ref": commit, "build": list(source.build),
            "build_timeout_s": source.build_timeout_s}}}})


def run_sweep(store: Store, sweep: Sweep, source_text: str, *, trigger: str = "manual",
              schedule: str | None = None, accept: bool = False, force: bool = False,
              progress: Progress = lambda _: None, ray_address: str | None = None,
              hunt: Callable[..., dict[str, Any]] | None = None,
              seed: int | None = None) -> SweepOutcome:
    """Run ``sweep`` once (``source_text``: its file, stored with the run's campaign).
    ``seed``: the run's seed (``--seed``, a replay of a run's draw); None: ``run_seed``."""
    sweeps = Sweeps(store)
    sweeps.ensure(sweep.name)
    baseline = sweeps.baseline(sweep.name)
    try:
        run = sweeps.start_run(sweep.name, trigger=trigger, schedule=schedule,
                               baseline_run_id=baseline.id if baseline else None)
    except SweepLocked as exc:
        reason = f"another run of sweep {sweep.name!r} is under way (run {exc.run_id}, " \
                 f"{exc.holder})"
        skipped = sweeps.record_skipped(sweep.name, trigger=trigger, schedule=schedule,
                                        reason=reason)
        progress(f"skipped: {reason}")
        return SweepOutcome(skipped, "skipped", {"reason": reason})
    status, result = "failed", {}
    try:
        progress(f"sweep {sweep.name}: run {run.seq}" + (
            f", baseline run {baseline.seq}" if baseline else ", no baseline yet"))
        facts = read_facts(sweep)
        sweeps.set_facts(run.id, facts)
        campaign_id, changes = _start_campaign(store, sweeps, sweep, source_text, run, baseline,
                                               facts, progress, accept, seed)
        from orchestrator.executor.driver import run_campaign  # Ray: only when a run starts

        verdict = run_campaign(store, campaign_id, progress=progress, ray_address=ray_address)
        status = {Status.CULPRIT: "regression", Status.NO_CULPRIT: "clean"}.get(
            verdict.status, "inconclusive")
        result = {"campaign": campaign_id, "seed": campaign_seed(store, campaign_id),
                  "reason": verdict.reason, **(verdict.finding_json("sweep") or {}), **changes}
        if status == "regression" and hunt is not None:
            result["hunt"] = _hunted(hunt, store, sweeps, sweep, run, result, progress)
    except KeyboardInterrupt:
        sweeps.finish_run(run.id, "interrupted", result or None, "interrupted (Ctrl-C or SIGTERM)")
        raise
    except BaseException as exc:
        sweeps.finish_run(run.id, "failed", result or None,  # a secret never at rest
                          redact(str(exc).strip())[:2000] or type(exc).__name__)
        raise
    sweeps.finish_run(run.id, status, result, result.get("reason"))
    accepted = False
    if accept:
        if status not in ("clean", "inconclusive") and not force:
            progress(f"not accepted: this run is {status} (`--force` accepts it anyway)")
        else:
            sweeps.accept(run.id)
            accepted = True
            progress(f"run {run.seq} is the baseline of sweep {sweep.name} now")
    return SweepOutcome(sweeps.get_run(run.id), status, result, accepted)


def _hunted(hunt: Callable[..., dict[str, Any]], store: Store, sweeps: Sweeps, sweep: Sweep,
            run: SweepRunRecord, result: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """The hunt's answer; a hunt that fails (a range git cannot resolve, a run that breaks)
    leaves the confirmed regression standing and says why it found no commit."""
    try:
        return hunt(store, sweeps, sweep, run, result, progress)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        progress(f"hunt failed: {why}")
        return {"status": "failed", "reason": f"the hunt failed: {why}"}


def run_seed(sweep: Sweep, run_seq: int, seed: int | None = None) -> int | None:
    """The seed of run ``run_seq``'s campaign: ``seed`` (``--seed``) if given; else, where the
    sweep file sets ``workload.seed``, one derived from it and the run's number (each run its own
    draw, the sweep's history reproducible); else None: the campaign draws a fresh one. Never
    the file's seed itself for every run: runs of one draw are one run, however many."""
    if seed is not None:
        return seed
    return derived_seed(sweep.workload.seed, "run", run_seq) if seed_given(sweep.workload) \
        else None


def _start_campaign(store: Store, sweeps: Sweeps, sweep: Sweep, source_text: str,
                    run: SweepRunRecord, baseline: SweepRunRecord | None,
                    facts: dict[str, dict[str, Any]], progress: Progress, accept: bool,
                    seed: int | None = None) -> tuple[str, dict[str, Any]]:
    """The run's campaign, stored: the baseline's trials in its strategy, and the factor that
    puts the baseline's build back when the source tree's commit moved. A run that may become
    the baseline (``--accept``) measures every variant ``trials.max`` times: its trials are
    what every later run is compared with, and a three-trial baseline leaves half of the clean
    runs undecided (bench/sweeps.py)."""
    campaign = sweep_campaign(sweep)
    plan = campaign.strategy
    assert isinstance(plan, SweepConfig)
    if accept:
        plan = plan.model_copy(update={"min_trials": plan.max_trials})
    factors = list(sweep.factors)
    changes: dict[str, Any] = {}
    if baseline is not None and baseline.campaign_id is not None:
        then_campaign = campaign_of(store, baseline.campaign_id)
        before = then_campaign.strategy
        assert isinstance(before, SweepConfig)
        then, now = one_commit(baseline.facts or {}), one_commit(facts)
        moved = sweep.source is not None and then is not None and now is not None \
            and then != now
        changes = {"commits": {"baseline": then, "now": now},
                   "changed_facts": changed_facts(baseline.facts or {}, facts),
                   "changed_variants": changed_variants(before, plan),
                   "changed_settings": changed_settings(then_campaign, sweep_campaign(sweep))}
        plan = plan.model_copy(update={
            "baseline": baseline_trials(store, baseline.campaign_id),
            "baseline_run": baseline.id, "confirm_build": moved,
            "unrestorable": unrestorable(changes)})
        if moved:
            assert then is not None
            factors.append(build_factor(sweep, then))
            progress(f"source tree moved {then[:12]} -> {now and now[:12]}: every trial runs "
                     "beside a trial of the baseline's commit")
    campaign = sweep_campaign(sweep, plan, factors)
    campaign_id = create_campaign(store, campaign, source_text, seed=run_seed(sweep, run.seq, seed))
    sweeps.set_campaign(run.id, campaign_id)
    progress(f"campaign {campaign_id}, seed {campaign_seed(store, campaign_id)}")
    return campaign_id, changes


def recompute(store: Store, run: SweepRunRecord) -> dict[str, Any]:
    """A finished run's comparisons, recomputed from its stored trials."""
    assert run.campaign_id is not None
    verdict = verdict_of(store, run.campaign_id)
    return {"reason": verdict.reason, **(verdict.finding_json("sweep") or {})}

