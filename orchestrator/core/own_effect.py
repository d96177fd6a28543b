"""A culprit's own effect: its failure rate with it alone on known-good's background against
known-good and the culprit's neighbours, with the outcome classes it causes.

Measured on the confirmation's variants (orchestrator/core/strategies/confirm.py), not on every
variant that holds the culprit: there another culprit may add failures of its own, and two
culprits would share one effect copied from known-bad.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from experiments.outcomes import WEDGE_LOG_KINDS, Outcome
from orchestrator.core.evidence import (
    Failing,
    Levels,
    TrialEvidence,
    judged_trials,
    variant_key,
)
from orchestrator.core.stats.proportions import newcombe_difference

SHOWN_OUTCOMES = tuple(o.value for o in Outcome if o is not Outcome.OK)


@dataclass(frozen=True)
class OwnEffect:
    variant_with: str  # the culprit alone on known-good's background
    variants_without: tuple[str, ...]  # known-good and the culprit's neighbours
    failed_with: int
    sessions_with: int
    failed_without: int
    sessions_without: int
    ci95: tuple[float, float]  # of rate_with - rate_without
    # sessions that trials stopped early never finished, counted clean where every trial of
    # the culprit alone stopped early (``rated``): its rate is then a lower bound
    unfinished_with: int
    outcomes: Mapping[str, tuple[int, int]]  # outcome class -> (with, without), seen ones only
    log_events: Mapping[str, tuple[int, int]]  # wedge log event kind -> (with, without)

    @property
    def rate_with(self) -> float:
        return self.failed_with / self.sessions_with if self.sessions_with else 0.0

    @property
    def rate_without(self) -> float:
        return self.failed_without / self.sessions_without if self.sessions_without else 0.0

    @property
    def effect(self) -> float:
        return self.rate_with - self.rate_without

    def to_json(self) -> dict[str, object]:
        return {
            "variant_with": self.variant_with,
            "variants_without": list(self.variants_without),
            "rate_with": round(self.rate_with, 6),
            "rate_without": round(self.rate_without, 6),
            "effect": round(self.effect, 6),
            "ci95": [round(self.ci95[0], 6), round(self.ci95[1], 6)],
            "failed_with": self.failed_with,
            "sessions_with": self.sessions_with,
            "failed_without": self.failed_without,
            "sessions_without": self.sessions_without,
            "unfinished_with": self.unfinished_with,
            "outcomes": {k: {"with": a, "without": b} for k, (a, b) in self.outcomes.items()},
            "log_events": {k: {"with": a, "without": b}
                           for k, (a, b) in self.log_events.items()},
        }


def own_effect(culprit: Levels, good: Levels, evidence: Sequence[TrialEvidence],
               failing: Failing) -> OwnEffect | None:
    """The culprit's own effect, or None where its variant alone was never run."""
    alone = variant_key({**good, **culprit})
    without = [dict(good), *({**good, **culprit, f: good[f]} for f in culprit
                             if good[f] != culprit[f])]
    keys = tuple(dict.fromkeys(variant_key(v) for v in without if variant_key(v) != alone))
    inside = rated(judged_trials(
        [t.judged_as(failing) for t in evidence if variant_key(t.levels) == alone]))
    outside = [t for key in keys for t in rated(judged_trials(
        [t.judged_as(failing) for t in evidence if variant_key(t.levels) == key]))]
    if not inside or not outside:
        return None
    k_in, n_in = sum(t.failures for t in inside), sum(t.judged + t.unfinished for t in inside)
    k_out = sum(t.failures for t in outside)
    n_out = sum(t.judged + t.unfinished for t in outside)
    seen_in, seen_out = _summed(t.counts for t in inside), _summed(t.counts for t in outside)
    events_in, events_out = _summed(t.events for t in inside), _summed(t.events for t in outside)
    return OwnEffect(
        alone, keys, k_in, n_in, k_out, n_out, newcombe_difference(k_in, n_in, k_out, n_out),
        sum(t.unfinished for t in inside),
        {o: (seen_in[o], seen_out[o]) for o in SHOWN_OUTCOMES if seen_in[o] or seen_out[o]},
        {k: (events_in[k], events_out[k]) for k in WEDGE_LOG_KINDS
         if events_in[k] or events_out[k]},
    )


def rated(trials: Sequence[TrialEvidence]) -> list[TrialEvidence]:
    """The trials one variant's rate is of: those that ran to their end; where every one
    stopped early, all of them, with the sessions never run counted clean (``unfinished``: a
    lower bound, as a stopped trial ends with its failing sessions). The report's variant rows
    and a culprit's own effect use this one rule, each on the trials not mostly errors and
    timeouts (``judged_trials``), so a variant has one rate on the page."""
    full = [t for t in trials if not t.stopped_early]
    return full or list(trials)


def _summed(counts: Iterable[Mapping[str, int]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for one in counts:
        total.update(one)
    return total
