"""Factorial designs, full or fractional, with a fixed number of trials per variant."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from orchestrator.evidence import Levels, TrialEvidence, variant_key
from orchestrator.stats.compare import StopWhenFailing
from orchestrator.strategies.design import Design, fraction, gray_order

__all__ = ["Factorial", "fraction", "gray_order"]


class Factorial:
    """Every variant of ``design`` (the full factorial when None), ``repeats`` times.

    A fractional design comes from ``fraction(factors, resolution, anchor)``; the verdict needs
    the same ``design`` to say which effects its runs can tell apart.
    """

    def __init__(self, factors: Mapping[str, Sequence[str]], repeats: int,
                 design: Design | None = None) -> None:
        self.repeats = repeats
        self.design = design
        # Each pass runs the Gray order, alternating direction so passes join without a jump.
        one_pass = design.runs() if design is not None else gray_order(factors)
        self.plan = [
            variant
            for index in range(repeats)
            for variant in (one_pass if index % 2 == 0 else list(reversed(one_pass)))
        ]

    def propose(
        self, done: Sequence[TrialEvidence], pending: Sequence[Levels]
    ) -> list[dict[str, str]]:
        have = Counter(variant_key(t.levels) for t in done)
        have.update(variant_key(levels) for levels in pending)
        wanted: list[dict[str, str]] = []
        for variant in self.plan:
            key = variant_key(variant)
            if have[key] > 0:
                have[key] -= 1
            else:
                wanted.append(variant)
        return wanted

    def stop_rule(
        self, levels: Levels, done: Sequence[TrialEvidence]
    ) -> StopWhenFailing | None:
        return None  # a fixed design: every trial runs in full
