"""Main effects and two-factor interactions of a two-level design, estimated on session counts.

Each effect is a contrast: the variants where the product of its factors' signs is + (a factor's
second level, ``high``, is +; its first is -) against those where it is -: for an interaction,
the variants where an even number of its factors are at their first level. Its estimate is the
difference of the pooled corruption rates of the two halves, with Newcombe's interval and a
two-sided Fisher exact p-value, so a half with no corrupt session at all is no problem. In a
fraction, each estimate also carries its aliases: the effects it cannot be told apart from.

This is evidence for the reader; the culprit itself is named by the conjunction search
(orchestrator/core/attribution.py), which also checks the effect trial by trial.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from scipy.stats import fisher_exact

from orchestrator.core.evidence import Cell, pooled
from orchestrator.core.stats.proportions import newcombe_difference
from orchestrator.core.strategies.design import Design, effect_name


def _sign(cell: Cell, effect: Sequence[str], design: Design) -> int:
    sign = 1
    for name in effect:
        sign *= 1 if cell.levels.get(name) == design.factors[name][1] else -1
    return sign


def estimate_effects(design: Design, cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Every main effect and two-factor interaction of the two-level factors, strongest first."""
    rows = []
    for size in (1, 2):
        for effect in itertools.combinations(design.two_level, size):
            plus = [c for c in cells if _sign(c, effect, design) > 0]
            minus = [c for c in cells if _sign(c, effect, design) < 0]
            (k1, n1), (k2, n2) = pooled(plus), pooled(minus)
            if not n1 or not n2:
                continue
            p = float(fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue)
            low, high = newcombe_difference(k1, n1, k2, n2)
            rows.append({
                "effect": effect_name(effect),
                "high": {name: design.factors[name][1] for name in effect},
                "estimate": round(k1 / n1 - k2 / n2, 6),
                "ci95": [round(low, 6), round(high, 6)],
                "p_value": p,
                "corrupted_plus": k1, "sessions_plus": n1,
                "corrupted_minus": k2, "sessions_minus": n2,
                "aliases": [effect_name(a) for a in design.aliases(effect) if len(a) <= 3],
            })
    return sorted(rows, key=lambda row: (row["p_value"], row["effect"]))
