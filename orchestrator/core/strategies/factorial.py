"""Factorial designs, full or fractional, with a fixed number of trials per variant; their
conclusion is the attribution of the failures to factors and interactions (``decide``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from orchestrator.core.attribution import Culprit, find_culprits
from orchestrator.core.evidence import (
    CORRUPTING,
    Cell,
    Failing,
    Levels,
    TrialEvidence,
    failing_words,
    pooled,
    target_of,
    variant_key,
)
from orchestrator.core.stats.compare import StopWhenFailing
from orchestrator.core.stats.proportions import wilson
from orchestrator.core.strategies.base import Conclusion, Status, Unresolvable
from orchestrator.core.strategies.design import Design, effect_name, fraction, gray_order
from orchestrator.core.strategies.design_effects import estimate_effects
from orchestrator.core.trail import culprit_words
from orchestrator.core.verdict import CostModel, Verdict, judged_cells, shown_cells, verdict_from

__all__ = ["DesignFinding", "Factorial", "conclude_factorial", "decide", "fraction",
           "gray_order"]


@dataclass(frozen=True)
class DesignFinding:
    """A factorial campaign's design (what its runs can tell apart), with its effects
    estimated on the cells the verdict shows (judged for corruption, whatever the target)."""

    design: Design
    cells: tuple[Cell, ...]
    kind: ClassVar[str] = "design"

    def to_json(self) -> dict[str, Any]:
        return {**self.design.to_json(), "effects": estimate_effects(self.design, self.cells)}


class Factorial:
    """Every variant of ``design`` (the full factorial when None), ``repeats`` times.

    A fractional design comes from ``fraction(factors, resolution, anchor)``; the verdict needs
    the same ``design`` to say which effects its runs can tell apart.
    """

    def __init__(self, factors: Mapping[str, Sequence[str]], repeats: int,
                 design: Design | None = None, *, alpha: float = 0.01,
                 clean_rate: float = 0.02, known_bad: Mapping[str, str] | None = None,
                 failing: Failing = CORRUPTING) -> None:
        self.factors = {name: list(levels) for name, levels in factors.items()}
        self.repeats = repeats
        self.design = design
        self.alpha, self.clean_rate, self.failing = alpha, clean_rate, failing
        self.known_bad = None if known_bad is None else dict(known_bad)
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

    def conclude(self, done: Sequence[TrialEvidence],
                 unresolvable: Sequence[Unresolvable]) -> Conclusion:
        return conclude_factorial(
            done, self.factors, alpha=self.alpha, clean_rate=self.clean_rate,
            known_bad=self.known_bad, design=self.design or Design.full(self.factors),
            failing=self.failing)

    def meeting(self, unresolvable: Sequence[Unresolvable]) -> Factorial:
        return self  # a fixed design: the verdict lists the variants it skipped


def decide(
    evidence: Sequence[TrialEvidence],
    factors: Mapping[str, Sequence[str]],
    *,
    alpha: float,
    clean_rate: float,
    cost: CostModel,
    known_bad: Mapping[str, str] | None = None,
    unresolvable: Sequence[Unresolvable] = (),
    design: Design | None = None,
    failing: Failing = CORRUPTING,
) -> Verdict:
    """The factorial verdict on ``evidence`` (see ``conclude_factorial``)."""
    conclusion = conclude_factorial(evidence, factors, alpha=alpha, clean_rate=clean_rate,
                                    known_bad=known_bad, design=design, failing=failing)
    return verdict_from(conclusion, evidence, factors, cost, unresolvable, alpha, failing)


def conclude_factorial(
    evidence: Sequence[TrialEvidence],
    factors: Mapping[str, Sequence[str]],
    *,
    alpha: float,
    clean_rate: float,
    known_bad: Mapping[str, str] | None = None,
    design: Design | None = None,
    failing: Failing = CORRUPTING,
) -> Conclusion:
    """``failing``: what the evidence was judged against, named in the reason given."""
    _, grouped = judged_cells(evidence, factors)
    failure = target_of(failing)
    said = failing_words(failing)

    found = None if design is None else DesignFinding(design, tuple(shown_cells(evidence,
                                                                              factors)))

    def verdict(status: Status, reason: str, culprits: Sequence[Culprit] = ()) -> Conclusion:
        return Conclusion(status, reason, tuple(culprits), finding=found)

    failed, sessions = pooled(grouped)
    if sessions == 0:
        return verdict(Status.INCONCLUSIVE, "no session could be judged")
    culprits = find_culprits(grouped, factors, alpha)
    names = "; ".join(
        culprit_words(c.factors) for c in culprits
    )
    if culprits and design is not None and design.fractional:
        # A fraction names only what its aliases let it tell apart (at resolution V: main
        # effects and two-factor interactions); a wider conjunction is a lead, not a verdict.
        confused = [pair for c in culprits for pair in design.confusions(c.factors)][:3]
        if confused:
            aliases = ", ".join(f"{effect_name(e)} = {effect_name(a)}" for e, a in confused)
            return verdict(
                Status.INCONCLUSIVE,
                f"{failure} follows {names}, but the design ({design.describe()}) aliases "
                f"it: {aliases}; run `design: full` over these factors (the others held at "
                f"one level) to tell them apart",
            )
        return verdict(Status.CULPRIT, f"{failure} follows {names} (design: "
                                       f"{design.describe()}; {design.clear_effects()} are not "
                                       f"aliased with each other)", culprits)
    if culprits:
        return verdict(Status.CULPRIT, f"{failure} follows {names}", culprits)
    if failed == 0 and known_bad is not None:
        return verdict(Status.NOT_REPRODUCED, f"the known-bad variant showed no {failure}")
    upper = wilson(failed, sessions)[1]
    if upper <= clean_rate:
        return verdict(
            Status.NO_CULPRIT,
            f"{failed} of {sessions} sessions {said}; upper 95% bound {upper:.2%} "
            f"is within the clean rate {clean_rate:.2%}",
        )
    if failed == 0:
        return verdict(
            Status.INCONCLUSIVE,
            f"no {failure} in {sessions} sessions, too few to call the deployment clean (upper "
            f"95% bound {upper:.2%} above the clean rate {clean_rate:.2%}): run more trials",
        )
    return verdict(
        Status.INCONCLUSIVE,
        f"{failed} of {sessions} sessions {said}, but no factor or interaction explains it "
        f"at alpha {alpha:g}",
    )
