"""Which free pool runs which proposed variant: the fewest service restarts.

A pool restarts only the services whose rendered command line or environment changes, and every
service on a node whose files (git refs, patches) change. With several pools free at once, the
strategy's first proposals are matched to the pools so that, in total, the fewest services
restart: a pool that ran known-bad takes known-bad again, and in a Gray-ordered factorial each
pool moves one factor, not two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scipy.optimize import linear_sum_assignment

from deploy.render import render_service
from experiments.campaign import Campaign, Pool
from experiments.secrets import shown, shown_argv
from orchestrator.executor.steps.deploy import level_settings

Levels = Mapping[str, str]


def restarts_between(campaign: Campaign, pool: Pool, before: Levels | None,
                     after: Levels) -> int:
    """Services of ``pool`` that restart to go from ``before`` (None: nothing runs yet) to
    ``after``."""
    if before is None:
        return len(pool.services)
    moved: set[str] = set()  # nodes whose files change
    for factor in campaign.factors:
        old, new = factor.level(before[factor.name]), factor.level(after[factor.name])
        if (old.git, old.patch) != (new.git, new.patch):
            moved |= {s.node for s in pool.services
                      if factor.services is None or s.name in factor.services}
    was = level_settings(campaign, dict(before))
    will = level_settings(campaign, dict(after))
    return sum(
        s.node in moved
        or render_service(s.name, shown_argv(s.start), shown(s.env), was)
        != render_service(s.name, shown_argv(s.start), shown(s.env), will)
        for s in pool.services)


def place(campaign: Campaign, free: Sequence[str], proposals: Sequence[dict[str, str]],
          running: Mapping[str, Levels]) -> list[tuple[str, dict[str, str]]]:
    """The first ``len(free)`` proposals (the strategy's best), each on a free pool, with the
    fewest restarts in total; ``running`` is what each pool ran last."""
    chosen = list(proposals[:len(free)])
    if not chosen:
        return []
    pools = {p.name: p for p in campaign.pools}
    cost = [[restarts_between(campaign, pools[name], running.get(name), levels)
             for levels in chosen] for name in free]
    rows, columns = linear_sum_assignment(cost)
    placed = {int(c): free[int(r)] for r, c in zip(rows, columns, strict=True)}
    return [(placed[index], levels) for index, levels in enumerate(chosen)]
