"""`optimize` on several pools: a pool's own speed (a faster GPU, a cooler node) must decide
neither which configuration ranks first nor whether the answer beats production.

- ``pool_offsets``: each pool's offset of one objective on the log scale, estimated from the
  configurations measured on more than one pool (least squares of log value = configuration +
  pool); the ranking (optimize_rank.py) compares configurations with these taken out. Pools that
  no configuration links keep the offset between them at 0: nothing measured says how they
  differ (optimize_confirm.py runs production on the leader's pool so that the two are
  linked).
- ``one_pool``: the pool where two configurations have the most trials each, for a comparison
  of unpaired trials (a Welch test) that never sets one pool's trials against another's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from orchestrator.core.evidence import TrialEvidence, variant_key

Offsets = Mapping[str, float]  # a pool's log offset of one objective


def pool_offsets(values: Sequence[tuple[TrialEvidence, float]]) -> dict[str, float]:
    """Each pool's log offset of one objective (``values``: a trial and its figure, above 0),
    within each group of pools linked by configurations measured on more than one of them;
    centred so that the group's trials average 0. {} where nothing links two pools."""
    byconfig: dict[str, set[str]] = {}
    for trial, _ in values:
        byconfig.setdefault(variant_key(trial.levels), set()).add(trial.pool)
    linking = {key for key, pools in byconfig.items() if len(pools) > 1}
    if not linking:
        return {}
    offsets: dict[str, float] = {}
    for group in _groups([byconfig[key] for key in linking]):
        # configurations measured on one pool only fit their own effect exactly: they say
        # nothing of the pools, so only the linking ones enter the fit
        rows = [(variant_key(t.levels), t.pool, math.log(v)) for t, v in values
                if variant_key(t.levels) in linking and t.pool in group]
        offsets.update(_fit(rows, sorted(group)))
        weights = [t.pool for t, _ in values if t.pool in group]
        shift = sum(offsets[pool] for pool in weights) / len(weights)
        offsets.update({pool: offsets[pool] - shift for pool in group})
    return offsets


def _groups(links: Sequence[set[str]]) -> list[set[str]]:
    """The pools joined by any configuration measured on them all."""
    groups: list[set[str]] = []
    for pools in links:
        touching = [g for g in groups if g & pools]
        merged = set(pools).union(*touching)
        groups = [g for g in groups if not g & pools] + [merged]
    return groups


def _fit(rows: Sequence[tuple[str, str, float]], pools: Sequence[str]) -> dict[str, float]:
    """Least squares of ``log value = configuration + pool`` (the first pool at 0)."""
    configs = sorted({key for key, _, _ in rows})
    design = np.zeros((len(rows), len(configs) + len(pools) - 1))
    for row, (key, pool, _) in enumerate(rows):
        design[row, configs.index(key)] = 1.0
        if pool != pools[0]:
            design[row, len(configs) + pools.index(pool) - 1] = 1.0
    solved = np.linalg.lstsq(design, np.array([v for _, _, v in rows]), rcond=None)[0]
    return {pools[0]: 0.0, **{pool: float(solved[len(configs) + index])
                              for index, pool in enumerate(pools[1:])}}


def on_one_scale(values: Sequence[float], pools: Sequence[str], offsets: Offsets) -> float:
    """The mean of ``values`` with each one's pool offset taken out (the plain mean where no
    pool has one)."""
    if not any(offsets.get(pool, 0.0) for pool in pools):
        return math.fsum(values) / len(values)
    return math.fsum(v * math.exp(-offsets.get(pool, 0.0))
                     for v, pool in zip(values, pools, strict=True)) / len(values)


def one_pool(mine: Sequence[str], theirs: Sequence[str]) -> str | None:
    """The pool of the most trials of both sides (each value's pool in ``mine`` and
    ``theirs``): the most of the scarcer side, then the most in all, then the name. None: the
    two sides never ran on one pool."""
    shared = set(mine) & set(theirs)
    if not shared:
        return None
    return min(shared, key=lambda pool: (-min(mine.count(pool), theirs.count(pool)),
                                         -(mine.count(pool) + theirs.count(pool)), pool))
