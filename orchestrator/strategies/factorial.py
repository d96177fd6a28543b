"""Full factorial design with a fixed number of trials per variant."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from orchestrator.evidence import Levels, TrialEvidence, variant_key
from orchestrator.stats.compare import StopWhenFailing


def gray_order(factors: Mapping[str, Sequence[str]]) -> list[dict[str, str]]:
    """Every variant, ordered so that neighbours differ in exactly one factor.

    A reflected mixed-radix Gray code: consecutive trials restart as few services as possible.
    """
    names = list(factors)
    if not names:
        return [{}]
    first, rest = names[0], {name: factors[name] for name in names[1:]}
    tail = gray_order(rest)
    order: list[dict[str, str]] = []
    for index, level in enumerate(factors[first]):
        block = tail if index % 2 == 0 else list(reversed(tail))
        order.extend({first: level, **variant} for variant in block)
    return order


class Factorial:
    def __init__(self, factors: Mapping[str, Sequence[str]], repeats: int) -> None:
        self.repeats = repeats
        # Each pass runs the Gray order, alternating direction so passes join without a jump.
        one_pass = gray_order(factors)
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
