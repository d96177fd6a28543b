"""The sweep's automatic hunt: a confirmed corruption or wedge regression that came with a new
commit of the source tree starts `bisect commits` between the baseline's commit and the current
one, on the same pools, with the regressed variant's levels held fixed. The hunt is an ordinary
commits campaign; the driver leaves the nodes as it found them (the tree back at its commit, the
production configuration running again). Without a new commit there is nothing to bisect: the
hunt says which node facts changed instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from db.store import Store
from db.sweeps import SweepRunRecord, Sweeps
from experiments.campaign import Campaign, CommitRange
from experiments.strategy_config import CommitsConfig
from experiments.sweep import Sweep

Progress = Callable[[str], None]
HUNTED = ("corruption", "wedging")  # a throughput or latency change is not bisected (yet)


def hunt_commits(store: Store, sweeps: Sweeps, sweep: Sweep, run: SweepRunRecord,
                 result: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """Run the hunt the regression calls for, or say why there is none."""
    regressed = [(v, metric) for v in result.get("variants", []) for metric in v["regressed"]
                 if metric in HUNTED]
    if not regressed:
        return {"status": "none", "reason": "no corruption or wedge regression to bisect"}
    commits = result.get("commits") or {}
    good, bad = commits.get("baseline"), commits.get("now")
    if sweep.source is None or good is None or bad is None or good == bad:
        changed = ", ".join([*(f"{c['node']} {c['fact']}" for c in result.get("changed_facts", [])),
                             *(f"{c.get('service') or c.get('level')} settings"
                               for c in result.get("changed_settings", []))])
        return {"status": "none",
                "reason": "the build did not change since the baseline"
                          + (f"; what did: {changed}" if changed else
                             "; nor did any node fact (driver, GPU, server) or setting")}
    variant, metric = regressed[0]
    campaign = hunt_campaign(sweep, variant["levels"], metric, good, bad)
    from orchestrator.executor.commit_range import expand_commits  # reaches the nodes
    from orchestrator.executor.driver import run_campaign
    from orchestrator.stored import campaign_seed, create_campaign, derived_seed

    campaign = expand_commits(campaign)
    # a draw of its own, from the run's: a replay of the run (`--seed`) replays its hunt too
    seed = derived_seed(campaign_seed(store, result["campaign"]), "hunt")
    campaign_id = create_campaign(store, campaign, f"sweep {sweep.name} run {run.seq}",
                                  seed=seed)
    sweeps.add_hunt(run.id, campaign_id, good, bad)
    progress(f"hunt: {metric} of {variant['name']} between {good[:12]} and {bad[:12]} "
             f"(campaign {campaign_id})")
    verdict = run_campaign(store, campaign_id, progress=progress)
    found = dict(verdict.finding_json("commits") or {})
    return {"status": verdict.status.value, "reason": verdict.reason, "campaign": campaign_id,
            "variant": variant["name"], "metric": metric, "good": good, "bad": bad,
            "first_bad": found.get("first_bad", []), "posterior": found.get("posterior")}


def hunt_campaign(sweep: Sweep, levels: dict[str, str], metric: str, good: str,
                  bad: str) -> Campaign:
    """`bisect commits` over good..bad of the sweep's source tree, the variant held fixed."""
    assert sweep.source is not None and sweep.hunt is not None
    source = sweep.source
    return Campaign(
        name=f"hunt {sweep.name}", nodes=sweep.nodes, pools=sweep.pools, factors=sweep.factors,
        workload=sweep.workload, cost=sweep.cost, generators=sweep.generators,
        strategy=CommitsConfig(target="corruption" if metric == "corruption" else "wedging",
                               alpha=sweep.alpha,
                               max_trials=sweep.hunt.max_trials),
        commits=CommitRange(tree=source.tree, good=good, bad=bad, build=source.build,
                            build_timeout_s=source.build_timeout_s, services=source.services,
                            levels={k: v for k, v in levels.items()}))
