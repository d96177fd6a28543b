"""Which free pool runs which proposed variant: the fewest service restarts.

A pool restarts only the services whose rendered command line or environment changes, and every
service on a node whose files (git refs, patches) change. With several pools free at once, the
strategy's first proposals are matched to the pools so that, in total, the fewest services
restart: a pool that ran known-bad takes known-bad again, and in a Gray-ordered factorial each
pool moves one factor, not two. A pair the strategy asks for (orchestrator/core/pairs.py:
``Beside``) runs on one pool, one trial after the other, whatever that costs in restarts: the
fewest restarts alone would keep each build on its own pool, and the pools' own speeds would
then stand between the sides.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from scipy.optimize import linear_sum_assignment

from deploy.render import render_service
from experiments.campaign import Campaign, Pool
from experiments.secrets import shown, shown_argv
from orchestrator.core.pairs import Beside
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


@dataclass(frozen=True)
class Placed:
    """Where the proposals go: ``now``, each on a free pool; ``after``, a trial's partner to
    run next on its (busy) pool (``Beside``)."""

    now: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    after: dict[str, dict[str, str]] = field(default_factory=dict)


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


def place_pairs(campaign: Campaign, free: Sequence[str], proposals: Sequence[dict[str, str]],
                running: Mapping[str, Levels], ran_on: Mapping[int, str],
                waiting: Collection[str] = ()) -> Placed:
    """``place``, where a pair (``Beside``) runs on one pool, its partner next there: a fresh
    pair's first trial is placed as any proposal, its partner to follow it; a partner of a
    trial that ran goes to that trial's pool (``ran_on``: each trial's pool by its number), at
    once where it is free, else next, unless a partner already waits there (``waiting``): it
    asks again later."""
    pools = {p.name for p in campaign.pools}
    placed = Placed()
    open_ = list(free)
    units: list[list[dict[str, str]]] = []  # a proposal, with its fresh partner
    previous: dict[str, str] | None = None  # the proposal before, where it began a unit
    for levels in proposals:
        mate = levels.mate if isinstance(levels, Beside) else None
        if isinstance(levels, Beside) and mate is None and previous is not None:
            units[-1].append(levels)
            previous = None
            continue
        previous = None
        if mate is not None and (pool := ran_on.get(mate)) in pools:
            if pool in open_:
                open_.remove(pool)
                placed.now.append((pool, dict(levels)))
            elif pool not in waiting and pool not in placed.after:
                placed.after[pool] = dict(levels)
        else:
            units.append([levels])
            previous = levels
    firsts = place(campaign, open_, [unit[0] for unit in units], running)
    for (pool, levels), unit in zip(firsts, units, strict=False):
        placed.now.append((pool, dict(levels)))
        if len(unit) == 2:
            placed.after[pool] = dict(unit[1])
    return placed
