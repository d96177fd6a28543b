"""The adaptive strategy: reproduce, delta-debug, test the neighbours, look for more culprits.

It is a replay: from the stored evidence alone, the whole decision procedure is run again from
the start. Every test that still needs trials stops the replay and becomes the proposal; a
finished replay is the conclusion. So the strategy keeps no state, a resumed campaign goes on
exactly where it was, and the verdict and `bisect log` are recomputed from the same replay.

1. Reproduce: known-bad must fail against known-good, otherwise `not_reproduced`. Known-bad runs
   first: while it does not look failing, known-good is not needed.
2. Necessity scan: flip each factor of known-bad alone; the flips that pass name the levels the
   failure needs — among them those good and bad share (an interaction with the background,
   such as HiCache being on in both). One sequential test per factor, all proposed at once. An
   UNKNOWN test adds a trial where it helps most: to the variant, or to known-good or known-bad
   when the variant already has more trials than that reference.
3. If every flip still fails, several culprits are active at once: Zeller's ddmin over the
   factors where good and bad differ isolates one 1-minimal failing set, and its shared
   background is scanned as in step 2.
4. More culprits (Go's bisect): break the culprit in known-bad; if that still fails, another
   culprit is there, and steps 2-4 run again from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from orchestrator.evidence import Levels, TrialEvidence, variant_key
from orchestrator.stats.compare import (
    Answer,
    Judgement,
    StopWhenFailing,
    judge,
    reproduced,
)
from orchestrator.stats.proportions import wilson
from orchestrator.strategies.base import not_yet_running

MAX_CULPRITS = 3
_WithLevels = Callable[[Sequence[str]], dict[str, str]]  # a subset of factors -> a variant


class Outcome(StrEnum):
    CULPRIT = "culprit"
    NOT_REPRODUCED = "not_reproduced"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Step:
    """One line of the decision trail."""

    phase: str
    levels: Mapping[str, str]
    answer: str
    corrupted: int
    judged: int
    trials: int
    p_fail: float
    p_pass: float


@dataclass(frozen=True)
class Replay:
    needed: tuple[dict[str, str], ...]  # variants that need one more trial now
    outcome: Outcome | None  # None while trials are needed
    culprits: tuple[dict[str, str], ...]
    trail: tuple[Step, ...]
    reason: str = ""


class _NeedTrials(Exception):
    def __init__(self, *variants: dict[str, str]) -> None:
        self.variants = variants


class _Stop(Exception):
    def __init__(self, outcome: Outcome, reason: str) -> None:
        self.outcome, self.reason = outcome, reason


@dataclass
class _Counts:
    corrupted: int = 0
    judged: int = 0
    trials: int = 0

    @property
    def pair(self) -> tuple[int, int]:
        return (self.corrupted, self.judged)


@dataclass
class _Run:
    strategy: Adaptive
    cells: dict[str, _Counts]
    total_trials: int
    trail: list[Step] = field(default_factory=list)

    def counts(self, levels: Mapping[str, str]) -> _Counts:
        return self.cells.get(variant_key(levels), _Counts())

    def test(self, levels: dict[str, str], phase: str) -> Answer:
        """FAIL or PASS; once the variant's trial budget is spent, PASS on the evidence at hand
        when it is clearly better than known-bad and not worse than known-good, else UNKNOWN."""
        s = self.strategy
        cell = self.counts(levels)
        known = {variant_key(s.bad): Answer.FAIL, variant_key(s.good): Answer.PASS}
        if variant_key(levels) in known:  # reproduced already: no trial of its own
            answer = known[variant_key(levels)]
            self.trail.append(Step(phase, levels, f"{answer.value} (known)", cell.corrupted,
                                   cell.judged, cell.trials, float("nan"), float("nan")))
            return answer
        if cell.trials < s.min_trials:
            self.need(levels)
        good, bad = self.counts(s.good), self.counts(s.bad)
        pass_alpha = s.pass_alpha(good)
        j = judge(cell.pair, good.pair, bad.pair, s.alpha, pass_alpha)
        answer, said = j.answer, j.answer.value
        if answer is Answer.UNKNOWN:
            more = self._next_for(levels, cell, good, bad, j)
            if more:
                self.need(*more)
            if j.p_pass <= pass_alpha and j.p_fail > s.alpha:
                # Budget spent on a variant that is clearly better than known-bad and not worse
                # than known-good: under background noise the suspicion margin can stay unmet
                # for ever by chance, so the evidence at hand decides.
                answer, said = Answer.PASS, "pass (at budget)"
        self.trail.append(Step(phase, levels, said, cell.corrupted, cell.judged, cell.trials,
                               j.p_fail, j.p_pass))
        return answer

    def _next_for(self, levels: dict[str, str], cell: _Counts, good: _Counts, bad: _Counts,
                  j: Judgement) -> list[dict[str, str]]:
        """What would settle an UNKNOWN best: a reference with fewer trials than the variant is
        the weak side of a comparison the variant already wins (a variant clearly better than
        known-bad is held back only by known-good's small sample, and the other way round), so
        it gets the trial; otherwise the variant does, up to its budget."""
        s = self.strategy
        most = min(cell.trials, s.max_trials_per_variant)
        if j.p_pass <= s.pass_alpha(good) and good.trials < most:
            return [dict(s.good)]
        if j.p_fail > s.alpha and bad.trials < most:
            return [dict(s.bad)]
        return [levels] if cell.trials < s.max_trials_per_variant else []

    def need(self, *variants: dict[str, str]) -> None:
        if self.total_trials >= self.strategy.max_trials:
            raise _Stop(Outcome.INCONCLUSIVE, f"trial budget of {self.strategy.max_trials} spent")
        raise _NeedTrials(*variants)


def _cells(evidence: Sequence[TrialEvidence]) -> dict[str, _Counts]:
    cells: dict[str, _Counts] = {}
    for trial in evidence:
        cell = cells.setdefault(variant_key(trial.levels), _Counts())
        cell.corrupted += trial.corrupted
        cell.judged += trial.judged
        cell.trials += 1
    return cells


class Adaptive:
    def __init__(
        self,
        factors: Mapping[str, Sequence[str]],
        good: Mapping[str, str],
        bad: Mapping[str, str],
        *,
        alpha: float = 0.01,
        clean_rate: float = 0.02,
        min_trials: int = 1,
        reproduce_trials: int = 2,
        max_trials_per_variant: int = 6,
        max_trials: int = 120,
        failure: str = "corruption",
    ) -> None:
        self.factors = {name: list(levels) for name, levels in factors.items()}
        self.good, self.bad = dict(good), dict(bad)
        self.alpha, self.clean_rate = alpha, clean_rate
        self.min_trials, self.reproduce_trials = min_trials, reproduce_trials
        self.max_trials_per_variant, self.max_trials = max_trials_per_variant, max_trials
        self.failure = failure  # what failing means here, for the reason given

    def pass_alpha(self, good: _Counts) -> float:
        """The level a PASS needs against known-bad. A PASS accuses a level, and the scan gives
        every innocent factor several looks at passing by luck: half of alpha. When known-good
        fails too (background noise), "no worse than known-good" no longer holds a weaker
        failure back, so the comparison with known-bad carries it alone, Bonferroni over the
        factors. (bench/strategies.py: false accusations 1.7% -> 0.3% on "single factor, 6%"
        over 300 seeds, 2% -> 0.5% on "1% noise + 6% 2-way" over 200.)"""
        return self.alpha / (max(2, len(self.factors)) if good.corrupted else 2)

    # -- the protocol -------------------------------------------------------------------------

    def propose(self, done: Sequence[TrialEvidence], pending: Sequence[Levels]) -> list[
            dict[str, str]]:
        return not_yet_running(self.replay(done).needed, pending)

    def stop_rule(
        self, levels: Levels, done: Sequence[TrialEvidence]
    ) -> StopWhenFailing | None:
        if variant_key(levels) in (variant_key(self.good), variant_key(self.bad)):
            return None
        cells = _cells(done)
        prior = cells.get(variant_key(levels), _Counts())
        return StopWhenFailing(prior.pair, cells.get(variant_key(self.good), _Counts()).pair,
                               self.alpha)

    def replay(self, evidence: Sequence[TrialEvidence]) -> Replay:
        cells = _cells(evidence)
        run = _Run(self, cells, len(evidence))
        culprits: list[dict[str, str]] = []
        try:
            self._reproduce(run)
            bad = dict(self.bad)
            while len(culprits) < MAX_CULPRITS:
                culprit = self._culprit_in(run, bad)
                culprits.append(culprit)
                broken = self._break(bad, culprit)
                if run.test(broken, "more culprits?") is not Answer.FAIL:
                    break
                bad = broken
        except _NeedTrials as need:
            return Replay(need.variants, None, tuple(culprits), tuple(run.trail))
        except _Stop as stop:
            return Replay((), stop.outcome, tuple(culprits), tuple(run.trail), stop.reason)
        names = "; ".join(" AND ".join(f"{f}={v}" for f, v in c.items()) for c in culprits)
        return Replay((), Outcome.CULPRIT, tuple(culprits), tuple(run.trail),
                      f"{self.failure} follows {names}")

    # -- the phases ---------------------------------------------------------------------------

    def _reproduce(self, run: _Run) -> None:
        # Known-bad first: while it does not look failing, known-good is not needed (a clean
        # known-bad is `not_reproduced` after 3 trials, 0 of 240 sessions, below the 2% clean
        # rate; 1 of 320 takes 4).
        good, bad = run.counts(self.good), run.counts(self.bad)
        if bad.trials < self.reproduce_trials:
            run.need(*[self.bad] * (self.reproduce_trials - bad.trials))
        if self._clean(bad):
            raise _Stop(Outcome.NOT_REPRODUCED,
                        f"known-bad: {bad.corrupted} of {bad.judged} sessions corrupt")
        if bad.corrupted <= self.clean_rate * bad.judged and \
                bad.trials < self.max_trials_per_variant:
            run.need(self.bad)  # it does not look failing yet: only more of known-bad can tell
        if good.trials < self.reproduce_trials:
            run.need(*[self.good] * (self.reproduce_trials - good.trials))
        answer, p = reproduced(bad.pair, good.pair, self.alpha)
        run.trail.append(Step("reproduce", self.bad, answer.value, bad.corrupted, bad.judged,
                              bad.trials, p, 1.0))
        if answer is Answer.FAIL:
            return
        if bad.trials >= self.max_trials_per_variant:
            raise _Stop(Outcome.NOT_REPRODUCED,
                        f"known-bad ({bad.corrupted}/{bad.judged}) is not worse than known-good "
                        f"({good.corrupted}/{good.judged}) at alpha {self.alpha:g}")
        run.need(self.bad, self.good)

    def _clean(self, cell: _Counts) -> bool:
        return cell.judged > 0 and wilson(*cell.pair)[1] <= self.clean_rate

    def _culprit_in(self, run: _Run, bad: dict[str, str]) -> dict[str, str]:
        # One conjunction behind the failure (the common case): exactly its levels are the ones
        # whose single flip makes the failing variant pass. One test per factor, no ddmin.
        necessary = self._necessary(run, bad, list(self.factors))
        if necessary:
            return necessary
        # Every single flip still fails: several culprits are active at once. Delta debugging
        # isolates one minimal failing set; its shared background is then scanned the same way.
        delta = [f for f in self.factors if bad[f] != self.good[f]]

        def with_levels(subset: Sequence[str]) -> dict[str, str]:
            return {**self.good, **{f: bad[f] for f in subset}}

        minimal = self._ddmin(run, delta, with_levels)
        failing = with_levels(minimal)
        background = [f for f in self.factors if f not in delta]
        culprit = {**{f: failing[f] for f in minimal},
                   **self._necessary(run, failing, background)}
        return {f: culprit[f] for f in self.factors if f in culprit}

    def _necessary(
        self, run: _Run, failing: dict[str, str], factors: Sequence[str]
    ) -> dict[str, str]:
        """The levels of ``failing`` whose flip alone makes it pass.

        The flips are independent tests: all that still need trials are proposed at once, so
        free pools run them side by side."""
        found = {}
        waiting: list[dict[str, str]] = []
        for factor in factors:
            try:
                if run.test(self._flip(failing, factor), f"flip {factor}") is Answer.PASS:
                    found[factor] = failing[factor]
            except _NeedTrials as need:
                waiting.extend(need.variants)
        if waiting:  # one trial each: two flips waiting on known-good need one more of it
            raise _NeedTrials(*{variant_key(v): v for v in waiting}.values())
        return found

    def _flip(self, levels: dict[str, str], factor: str) -> dict[str, str]:
        """Another level of one factor: known-good's where it differs, else the next one."""
        if self.good[factor] != levels[factor]:
            return {**levels, factor: self.good[factor]}
        return {**levels, factor: next(lvl for lvl in self.factors[factor]
                                       if lvl != levels[factor])}

    def _ddmin(self, run: _Run, delta: list[str], with_levels: _WithLevels) -> list[str]:
        n = 2
        while len(delta) >= 2:
            size = -(-len(delta) // n)
            chunks = [delta[i:i + size] for i in range(0, len(delta), size)]
            for chunk in chunks:
                if run.test(with_levels(chunk), "ddmin subset") is Answer.FAIL:
                    delta, n = chunk, 2
                    break
            else:
                for chunk in chunks if len(chunks) > 2 else []:
                    rest = [f for f in delta if f not in chunk]
                    if run.test(with_levels(rest), "ddmin complement") is Answer.FAIL:
                        delta, n = rest, max(n - 1, 2)
                        break
                else:
                    if n >= len(delta):
                        return delta
                    n = min(len(delta), 2 * n)
        return delta

    def _break(self, bad: dict[str, str], culprit: Mapping[str, str]) -> dict[str, str]:
        """Known-bad with the culprit broken by one flip, preferring known-good's level."""
        factor = next((f for f in culprit if self.good[f] != culprit[f]), next(iter(culprit)))
        return self._flip(bad, factor)
