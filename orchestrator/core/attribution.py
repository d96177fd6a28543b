"""Name the culprit: the smallest set of levels whose variants are corrupt while the rest are not.

A greedy conjunction search over pooled session counts. Start from every variant; split by the
factor level with the most significant excess of corruption (one-sided Fisher, Bonferroni over
the candidates of the step); keep splitting inside the matching group while a further level still
matters. Where no level alone stands out, the pairs of levels are tried (a pure interaction
whose trials spread hides behind each of its levels). The conjunction found is one culprit (one
level: a single factor; several: an interaction). Its variants are set aside and the search
repeats on the rest, so independent culprits are found too.

Sessions of one trial share a server: every test counts each variant's sessions at its design
effect, from the spread between its trials (stats/clustered.py), so the p-value that names a
culprit is the trials' evidence, not the pooled sessions' (their p is kept as a description).
A culprit must also hold trial by trial: whole trials as units, a one-sided Mann-Whitney test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from orchestrator.core.evidence import Cell, pooled, spread_of, variant_key
from orchestrator.core.own_effect import OwnEffect
from orchestrator.core.stats.clustered import Dispersion
from orchestrator.core.stats.exact import fisher_greater, trials_greater
from orchestrator.core.stats.proportions import newcombe_difference

MAX_CULPRITS = 4
TRIAL_ALPHA = 0.05


@dataclass(frozen=True)
class Culprit:
    factors: Mapping[str, str]
    corrupted_in: int
    judged_in: int
    corrupted_out: int
    judged_out: int
    ci95: tuple[float, float]  # of the rate difference inside - outside, clustered
    p_value: float  # one-sided Fisher on the sessions counted at their design effects
    trial_p_value: float  # trials as units, one-sided Mann-Whitney
    trials_in: int
    trials_out: int
    own: OwnEffect | None = None  # measured on the culprit alone, where a strategy ran it
    session_p_value: float | None = None  # the pooled sessions' Fisher p: a description only
    effective_in: tuple[int, int] | None = None  # (failing, judged) as independent sessions
    effective_out: tuple[int, int] | None = None
    # the variants (keys) whose sessions the counts pool, with it and without it
    variants_in: tuple[str, ...] = ()
    variants_out: tuple[str, ...] = ()
    # the pooled sessions with it by outcome class, and its trials' service log events by kind
    outcomes_in: Mapping[str, int] = field(default_factory=dict)
    events_in: Mapping[str, int] = field(default_factory=dict)

    @property
    def rate_in(self) -> float:
        return self.corrupted_in / self.judged_in if self.judged_in else 0.0

    @property
    def rate_out(self) -> float:
        return self.corrupted_out / self.judged_out if self.judged_out else 0.0

    @property
    def effect(self) -> float:
        return self.rate_in - self.rate_out


def _refine(
    group: Sequence[Cell], factors: Mapping[str, Sequence[str]], alpha: float,
    spread: Dispersion,
) -> dict[str, str]:
    condition: dict[str, str] = {}
    subset = list(group)
    while True:
        singles = _candidates(subset, factors, condition, 1, spread)
        best = min(singles, default=None, key=lambda c: c[0])
        if best is not None and best[0] * len(singles) <= alpha:
            condition.update(best[1])
            subset = best[2]
            continue
        # A pure interaction whose trials spread: each of its levels alone pools the failing
        # variant with clean ones, its design effect dilutes them, and no level stands out
        # (2 trials a variant, one at 30 of 64 and one at 5). The pairs are tested then, the
        # Bonferroni factor counting the levels tried before them too.
        pairs = _candidates(subset, factors, condition, 2, spread)
        best = min(pairs, default=None, key=lambda c: c[0])
        if best is None or best[0] * (len(singles) + len(pairs)) > alpha:
            return condition
        condition.update(best[1])
        subset = best[2]


def _candidates(
    subset: Sequence[Cell], factors: Mapping[str, Sequence[str]], condition: Mapping[str, str],
    size: int, spread: Dispersion,
) -> list[tuple[float, dict[str, str], list[Cell]]]:
    """Each conjunction of ``size`` levels of factors not yet in ``condition`` that splits
    ``subset``: its one-sided p of more failures inside, its levels, the cells inside."""
    free = [(factor, level) for factor, levels in factors.items() if factor not in condition
            for level in levels]
    found = []
    for chosen in combinations(free, size):
        levels = dict(chosen)
        if len(levels) < size:
            continue  # two levels of one factor
        inside = [c for c in subset if c.matches(levels)]
        outside = [c for c in subset if not c.matches(levels)]
        if inside and outside:
            p = fisher_greater(*pooled(inside, spread), *pooled(outside, spread))
            found.append((p, levels, inside))
    return found


def measure(condition: Mapping[str, str], group: Sequence[Cell],
            spread: Dispersion | None = None) -> Culprit:
    """The culprit's effect over ``group``; ``spread``: between trials (default: the group's
    own)."""
    spread = spread_of(group) if spread is None else spread
    inside = [c for c in group if c.matches(condition)]
    outside = [c for c in group if not c.matches(condition)]
    k_in, n_in = pooled(inside)
    k_out, n_out = pooled(outside)
    eff_in, eff_out = pooled(inside, spread), pooled(outside, spread)
    rates_in = [t.rate for c in inside for t in c.trials if t.judged]
    rates_out = [t.rate for c in outside for t in c.trials if t.judged]
    return Culprit(
        factors=dict(condition),
        corrupted_in=k_in, judged_in=n_in, corrupted_out=k_out, judged_out=n_out,
        ci95=newcombe_difference(*eff_in, *eff_out),
        p_value=fisher_greater(*eff_in, *eff_out),
        trial_p_value=trials_greater(rates_in, rates_out),
        trials_in=len(rates_in), trials_out=len(rates_out),
        session_p_value=fisher_greater(k_in, n_in, k_out, n_out),
        effective_in=eff_in, effective_out=eff_out,
        variants_in=tuple(variant_key(c.levels) for c in inside if c.judged),
        variants_out=tuple(variant_key(c.levels) for c in outside if c.judged),
        outcomes_in=_summed(t.counts for c in inside for t in c.trials),
        events_in=_summed(t.events for c in inside for t in c.trials),
    )


def _summed(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counts:
        for name, n in one.items():
            total[name] = total.get(name, 0) + n
    return total


def find_culprits(
    group: Sequence[Cell], factors: Mapping[str, Sequence[str]], alpha: float
) -> list[Culprit]:
    spread = spread_of(group)
    remaining = list(group)
    culprits: list[Culprit] = []
    while remaining and len(culprits) < MAX_CULPRITS:
        condition = _refine(remaining, factors, alpha, spread)
        if not condition:
            break
        culprit = measure(condition, remaining, spread)
        if culprit.p_value > alpha or culprit.trial_p_value > TRIAL_ALPHA:
            break
        culprits.append(culprit)
        remaining = [c for c in remaining if not c.matches(condition)]
    return _absorb(culprits, group, spread)


def untold_from(condition: Mapping[str, str], group: Sequence[Cell],
                factors: Mapping[str, Sequence[str]], alpha: float) -> list[dict[str, str]]:
    """The other conjunctions of as many levels that the trials do not tell apart from
    ``condition``, at ``alpha``: neither do the variants where only ``condition`` holds fail
    more than those where neither holds (the other would have them clean), nor do those where
    only the other holds fail less than ``condition``'s (it would have them fail). An adaptive
    search flips one factor at a time, and factors it never flipped, or flipped only in trials
    stopped at their first session, go together: attribution named whichever came first."""
    spread = spread_of(group)
    this = [c for c in group if c.matches(condition)]

    def less(failing: Sequence[Cell], passing: Sequence[Cell]) -> bool:
        return bool(failing and passing) and fisher_greater(
            *pooled(failing, spread), *pooled(passing, spread)) <= alpha

    free = [(factor, level) for factor, levels in factors.items() for level in levels]
    found = []
    for chosen in combinations(free, len(condition)):
        other = dict(chosen)
        if len(other) < len(condition) or other == dict(condition):
            continue
        only_this = [c for c in this if not c.matches(other)]
        only_other = [c for c in group if c.matches(other) and not c.matches(condition)]
        neither = [c for c in group if not c.matches(other) and not c.matches(condition)]
        if not (less(only_this, neither) or less(this, only_other)):
            found.append(other)
    return found


def _absorb(culprits: list[Culprit], group: Sequence[Cell],
            spread: Dispersion) -> list[Culprit]:
    """Drop a culprit that narrows a later, wider one (``a=1 AND b=0`` beside ``a=1``): a level
    that does not matter split the culprit by chance, and the wider one explains both. The rest
    are measured again as the search measured them, each on the cells earlier ones leave."""
    def narrower(c: Culprit, other: Culprit) -> bool:
        return set(other.factors.items()) < set(c.factors.items())

    kept = [c for c in culprits if not any(narrower(c, other) for other in culprits)]
    if len(kept) == len(culprits):
        return culprits
    measured: list[Culprit] = []
    for culprit in kept:
        rest = [c for c in group if not any(c.matches(m.factors) for m in measured)]
        measured.append(measure(culprit.factors, rest, spread))
    return measured
