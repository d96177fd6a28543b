"""Reproduction, the adaptive search's first step: known-bad must fail against known-good before
anything is accused (`not_reproduced` otherwise, or `inconclusive` where it leans failing at its
budget).

Known-bad runs first: while it does not look failing, known-good is not needed. A clean
known-bad is `not_reproduced` once its rate's upper bound is below the clean rate. Otherwise
both run up to the variant budget, the side with fewer trials first; where the test leans at it,
both run on to 12 and 24 trials a side, judged there only, at alpha shared over those two looks
(`looks.runs_to`, `at_look`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.core.evidence import failing_words
from orchestrator.core.stats.compare import Answer, reproduced
from orchestrator.core.stats.proportions import wilson
from orchestrator.core.strategies.base import Status
from orchestrator.core.strategies.looks import (
    LONG_CAP,
    REPRODUCE_LEANS,
    at_look,
    beyond,
    leans,
    runs_to,
)
from orchestrator.core.strategies.sequential import (
    NEVER_STOP,
    Concluded,
    Step,
    Tests,
    VariantCounts,
)

if TYPE_CHECKING:
    from orchestrator.core.strategies.adaptive import Adaptive


def reproduce(strategy: Adaptive, run: Tests) -> None:
    """Returns once known-bad fails against known-good; else asks for trials or concludes."""
    s = strategy
    run.asking = "reproduce"
    # Known-bad first: while it does not look failing, known-good is not needed (a clean
    # known-bad is `not_reproduced` after 3 trials, 0 of 240 sessions, below the 2% clean
    # rate; 1 of 320 takes 4).
    good, bad = run.counts(s.good), run.counts(s.bad)
    if bad.trials < s.reproduce_trials:
        run.need(*[s.bad] * (s.reproduce_trials - bad.trials))
    if _clean(bad, s.clean_rate):
        raise Concluded(Status.NOT_REPRODUCED,
                        f"known-bad: {bad.failures} of {bad.judged} sessions "
                        f"{failing_words(s.failing)}")
    if bad.failures <= s.clean_rate * bad.judged and bad.trials < s.max_trials_per_variant:
        run.need(s.bad)  # it does not look failing yet: only more of known-bad can tell
    if good.trials < s.reproduce_trials:
        run.need(*[s.good] * (s.reproduce_trials - good.trials))
    most = s.max_trials_per_variant
    sides = max(bad.trials, good.trials)
    # past the budget, judged only with both sides at a look (12, 24), at a spent alpha, or
    # both past the last one (other tests ran them on: known-good beside a variant they ran to
    # 24), as `at_look` judges a variant past its last look
    last = beyond(most, LONG_CAP)[-1]
    even = sides <= most or bad.trials == good.trials or min(bad.trials, good.trials) >= last
    level = at_look(s.alpha, sides, most, LONG_CAP) if even else None
    answer, p = reproduced(bad.pair, good.pair, NEVER_STOP if level is None else level)
    run.trail.append(Step("reproduce", s.bad, answer.value, bad.failures, bad.judged,
                          bad.trials, p, 1.0, fail_at=level))
    if answer is Answer.FAIL:
        return
    to = runs_to(most, sides, (p, level), cap=LONG_CAP, within=REPRODUCE_LEANS)
    if good.trials < min(bad.trials, to):
        # known-good's fewer trials hold the p back (known-bad ran alone while it looked
        # clean): it is the side to measure
        run.need(s.good)
    if bad.trials >= to:
        counts = f"known-bad ({bad.failures}/{bad.judged}) against known-good " \
            f"({good.failures}/{good.judged})"
        at = at_look(s.alpha, bad.trials, most, LONG_CAP) or s.alpha
        if leans(p, at):  # a failure too weak or too spread to show at alpha
            raise Concluded(Status.INCONCLUSIVE, f"{counts} leans failing, p = {p:.2g} "
                            f"after {bad.trials} trials, short of alpha {at:g}")
        raise Concluded(Status.NOT_REPRODUCED, f"{counts}: not worse at alpha {s.alpha:g}")
    # the side with fewer trials first: with one pool only the first runs, and known-bad
    # proposed first every time would starve known-good (6 of known-bad against 2)
    run.need(*sorted([s.bad, s.good], key=lambda v: run.counts(v).trials))


def _clean(cell: VariantCounts, clean_rate: float) -> bool:
    return cell.judged > 0 and wilson(*cell.pair)[1] <= clean_rate
