"""What a sweep run compares with: the baseline run's trials of each variant, its node facts,
and what changed since (the commit of the source tree, the other node facts, the variants'
levels)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from db.store import Store
from experiments.campaign import Campaign
from experiments.strategy_config import BaselineTrial, SweepConfig
from orchestrator.core.evidence import variant_key
from orchestrator.core.strategies.sweep import BUILD
from orchestrator.stored import campaign_of

FACTS = ("host", "gpu", "driver", "server_version", "server_build", "commit")


def baseline_trials(store: Store, campaign_id: str) -> list[BaselineTrial]:
    """The baseline run's finished trials of its own build, by variant name (a trial of the
    baseline's baseline build, run to confirm a suspect, is not the baseline's own)."""
    plan = campaign_of(store, campaign_id).strategy
    assert isinstance(plan, SweepConfig)  # a sweep run's campaign
    names = {variant_key(v.levels): v.name for v in plan.variants}
    trials: list[BaselineTrial] = []
    for trial in store.trials(campaign_id):
        if trial.levels.get(BUILD, "current") != "current":
            continue
        name = names.get(variant_key({k: v for k, v in trial.levels.items() if k != BUILD}))
        if name is None:
            continue
        performance = trial.performance or {}
        e2e = performance.get("e2e") or {}
        trials.append(BaselineTrial(
            variant=name, counts=dict(trial.counts),
            output_throughput=performance.get("output_throughput"),
            p99_e2e_ms=e2e.get("p99_ms")))
    return trials


def one_commit(facts: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The source tree's commit, where every node that has the tree agrees on one."""
    commits = {f.get("commit") for f in facts.values() if f.get("tree")}
    return commits.pop() if len(commits) == 1 and None not in commits else None


def changed_facts(before: Mapping[str, Mapping[str, Any]],
                  now: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each node fact that differs between the baseline's run and this one."""
    changes = []
    for node in sorted(set(before) | set(now)):
        old, new = before.get(node, {}), now.get(node, {})
        changes += [{"node": node, "fact": fact, "baseline": old.get(fact), "now": new.get(fact)}
                    for fact in FACTS if old.get(fact) != new.get(fact)]
    return changes


def changed_variants(before: SweepConfig, now: SweepConfig) -> list[dict[str, Any]]:
    """Each variant whose levels the sweep file changed since the baseline (by name), and the
    factors' settings are compared by the campaign files (reports/campaign/compare.py)."""
    old = {v.name: dict(v.levels) for v in before.variants}
    return [{"variant": v.name, "baseline": old.get(v.name), "now": dict(v.levels)}
            for v in now.variants if old.get(v.name) != dict(v.levels)]


def changed_settings(before: Campaign, now: Campaign) -> list[dict[str, Any]]:
    """What the sweep file sets differently since the baseline: each service's command line and
    environment, each factor level's settings (a flag change is a change of the deployment as
    much as a new build). Secrets are compared as their references, never their values."""
    def services(campaign: Campaign) -> dict[str, Any]:
        return {s.name: {"start": s.model_dump(mode="json")["start"], "env": s.model_dump(
            mode="json")["env"]} for pool in campaign.pools for s in pool.services}

    def levels(campaign: Campaign) -> dict[str, Any]:
        return {f"{f.name}={name}": (level.model_dump(mode="json") if level else {})
                for f in campaign.factors if f.name != BUILD
                for name, level in f.levels.items()}

    changes = []
    for kind, old, new in (("service", services(before), services(now)),
                           ("level", levels(before), levels(now))):
        changes += [{kind: name, "baseline": old.get(name), "now": new.get(name)}
                    for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]
    return changes


def unrestorable(changes: Mapping[str, Any]) -> list[str]:
    """What changed since the baseline (``changed_*`` of a run) that the run cannot put back
    beside its trials, a line each: every changed node fact but the commit (a moved tree's
    build is put back), every changed setting and variant."""
    said = [f"{c['fact']} of {c['node']}: {c['baseline']} -> {c['now']}"
            for c in changes.get("changed_facts", []) if c["fact"] != "commit"]
    said += [f"{kind} {c[kind]}" for c in changes.get("changed_settings", [])
             for kind in ("service", "level") if kind in c]
    said += [f"variant {c['variant']}" for c in changes.get("changed_variants", [])]
    return said
