"""Three-way judgements on session counts: a value, never a binary guess (Pinpoint).

A tested variant FAILS when it is significantly worse than the known-good variant, PASSES when it
is significantly better than the known-bad one and shows no hint of being worse than known-good,
and is UNKNOWN otherwise — which means "add trials", up to a budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from orchestrator.core.stats.clustered import INDEPENDENT, Dispersion
from orchestrator.core.stats.exact import binomial_at_most, fisher_greater

Counts = tuple[int, int]  # (corrupted, judged)
# A pass must look like known-good, not merely better than known-bad: a variant at 3/80 against
# 0/160 (p = 0.04) is not clean, it is a weaker failure that one more trial will show.
SUSPICION = 0.2
# A pass must also rule out a failure this share of known-bad's rate: where two culprits made
# known-bad fail, a variant that keeps one of them fails at about half its rate, and against
# known-bad alone it would pass by luck (0 of 80 sessions where 5% fail: 1.6% of trials).
WEAKER_SHARE = 0.5


class Answer(StrEnum):
    FAIL = "fail"
    PASS = "pass"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Judgement:
    answer: Answer
    p_fail: float  # p that the variant is worse than known-good
    p_pass: float  # p that known-bad is worse than the variant
    counts: Counts
    alpha: float


def judge(variant: Counts, good: Counts, bad: Counts, alpha: float,
          pass_alpha: float | None = None, curtailed: Counts | None = None,
          seen: Counts | None = None, weaker_share: float = WEAKER_SHARE,
          at_most: Callable[[float], float] | None = None,
          smallest: float | None = None) -> Judgement:
    """``pass_alpha`` (default ``alpha``) is the stricter level a PASS may need: a PASS names a
    level as necessary to the failure, so a scan of many variants shares one error budget.

    ``curtailed``: when trials of the variant were stopped early, ``variant`` counts its full
    trials only and ``curtailed`` every trial, each stopped one with its unfinished sessions
    counted clean. Failing sessions finish first, so a stopped trial leans failing: a FAIL may
    rest on it (counting the unfinished clean can only weaken a FAIL), a PASS never does.
    ``seen``: every trial's judged sessions, the unfinished left out; a PASS is judged on them.
    The failures a stopped trial saw are evidence against passing, and leaving that trial out
    would keep only the trials that happened to run clean.
    ``weaker_share``: of ``bad``'s rate, the weaker failure a PASS must rule out (none at 0:
    where ``bad`` is the culprit alone, a variant fails as it does or not at all).
    ``at_most``: how likely the variant's few failures are at a given true rate, trial by
    trial (sessions clustered by trial: stats/clustered.py); default: its judged sessions as
    independent ones, exact binomial.
    ``smallest``: the most the weaker failure may exceed known-good's rate by (None: no
    bound). A PASS that says a variant is quiet, no failure left in it, must rule out the
    smallest failure the campaign targets, however high known-bad measured.

    Counts are sessions as independent ones: clustered by trial, a caller gives each side's
    at its design effect (stats/clustered.py)."""
    p_fail = fisher_greater(*(curtailed or variant), *good)
    level = alpha if pass_alpha is None else pass_alpha
    # the weaker failure's rate: known-good's own (the background every variant fails at) and
    # half of what known-bad's culprits add to it
    clean = good[0] / good[1] if good[1] else 0.0
    excess = weaker_share * max(0.0, bad[0] / bad[1] - clean) if bad[1] else 0.0
    weaker = clean + (excess if smallest is None else min(excess, smallest)) if bad[1] else 0.0
    judged = variant if seen is None else seen
    p_pass = fisher_greater(*bad, *judged)
    if weaker_share:
        p_pass = max(p_pass, binomial_at_most(*judged, weaker) if at_most is None
                     else at_most(weaker))
    suspicion = fisher_greater(*judged, *good) if curtailed else p_fail
    if p_fail <= alpha:
        answer = Answer.FAIL
    elif p_pass <= level and suspicion > SUSPICION:
        answer = Answer.PASS
    else:
        answer = Answer.UNKNOWN
    return Judgement(answer, p_fail, p_pass, variant, alpha)


def reproduced(bad: Counts, good: Counts, alpha: float) -> tuple[Answer, float]:
    """Does known-bad fail against known-good? FAIL means reproduced."""
    p = fisher_greater(*bad, *good)
    return (Answer.FAIL if p <= alpha else Answer.UNKNOWN), p


class StopRule(Protocol):
    """When a trial may end before its planned sessions: asked after each finished session."""

    @property
    def failing(self) -> frozenset[str] | None:
        """The outcomes it counts, where not the campaign's target."""
        ...

    def decided(self, corrupted: int, planned: int) -> bool:
        """Whether ``corrupted`` failures so far (of ``planned`` sessions) settle the trial."""
        ...


@dataclass(frozen=True)
class StopWhenFailing:
    """Ends a trial as soon as its variant's FAIL is certain, whatever the remaining sessions.

    Curtailed, not peeking: the test assumes every session still to come is clean, so stopping
    never turns a pass into a fail. Reproduction trials never stop early: their per-trial
    rates are evidence of their own.
    """

    prior: Counts  # the variant's earlier trials' sessions, unfinished ones counted clean
    good: Counts  # known-good's, as independent sessions (at its design effect)
    alpha: float
    failing: frozenset[str] | None = None  # the outcomes it counts, where not the target's
    prior_trials: int = 0  # how many trials ``prior`` counts
    spread: Dispersion = INDEPENDENT  # between trials: this trial's sessions are clustered too

    def decided(self, corrupted: int, planned: int) -> bool:
        k0, n0 = self.prior
        counts = self.spread.effective((k0 + corrupted, n0 + planned), self.prior_trials + 1)
        return fisher_greater(*counts, *self.good) <= self.alpha
