"""The adaptive strategy: reproduce, delta-debug, test the neighbours, look for more culprits.

It is a replay: from the stored evidence alone, the whole decision procedure is run again from
the start. Every test that still needs trials stops the replay and becomes the proposal; a
finished replay is the conclusion. So the strategy keeps no state, a resumed campaign goes on
exactly where it was, and the verdict and `bisect log` are recomputed from the same replay.

1. Reproduce (reproduce.py): known-bad must fail against known-good, otherwise `not_reproduced` (or
   `inconclusive` where it leans failing at its budget). Known-bad runs first: while it does not
   look failing, known-good is not needed.
2. Necessity scan: flip each factor of known-bad alone; the flips that pass name the levels the
   failure needs — among them those good and bad share (an interaction with the background,
   such as HiCache being on in both). One sequential test per factor, all proposed at once. An
   UNKNOWN test adds a trial where it helps most: to the variant, or to known-good or known-bad
   when the variant already has more trials than that reference. A flip whose first full trial
   looks passing is taken as passing: confirmation (step 4) proves the set it goes into, and a
   level let in by luck fails its neighbour there (not under background noise, where every PASS
   is proven in the scan). Where many factors differ,
   a flip back to known-good's level gets a first look that stops at its first failing
   session, and one sufficiency test (known-good plus only the found levels still fails)
   proves all the flips let go innocent at once. When it does not fail and no flip passes,
   the found levels need one of several others (f2 AND (f3 OR f6)): ddmin completes them.
3. If no flip passes (every flip still fails, or only looked failing), several culprits are
   most often active at once: Zeller's ddmin over the factors where good and bad differ
   isolates one 1-minimal failing set, and its shared background is scanned as in step 2. Its
   FAILs only narrow the search (p <= 0.05, sequential.NARROWING): confirmation proves the end.
4. Confirm (confirm.py, Go's bisect): known-good with exactly the culprit set must fail and
   each of its neighbours must pass, or the set is made smaller or completed. A neighbour that
   holds only some of the bad levels of a flip the scan passed, at a tenth of the level its
   own PASS needs, passes by that PASS with no trial (monotone failures: `confirm._implied`).
5. More culprits (Go's bisect): break the culprit in known-bad — by a level another culprit
   may not share, if it has one — and if that still fails, another culprit is there, and
   steps 2-5 run again from it. That it does not is a claim that known-bad is quiet without
   the culprit: it must rule out the campaign's smallest failure, its clean rate, trial by
   trial, not only half of known-bad's rate (sequential.Tests.test's ``quiet``).
6. Under background noise, each of several culprits must still make known-bad fail with the
   others broken; one that does not (it was named on a lucky FAIL) is dropped, and a culprit
   left alone is confirmed again as the only one.

All of it for the campaign's target first, then for the other failure where known-bad shows it
too (or looks failing so), or instead where the target is not reproduced (both_failures.py).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Self

from orchestrator.core.evidence import (
    CORRUPTING,
    Failing,
    Levels,
    TrialEvidence,
    target_of,
    variant_key,
)
from orchestrator.core.stats.clustered import INDEPENDENT
from orchestrator.core.stats.compare import Answer, StopWhenFailing, reproduced
from orchestrator.core.strategies.adaptive_said import conclude_replay
from orchestrator.core.strategies.base import Conclusion, Status, Unresolvable
from orchestrator.core.strategies.both_failures import Replaying
from orchestrator.core.strategies.confirm import confirm
from orchestrator.core.strategies.reproduce import reproduce
from orchestrator.core.strategies.sequential import (
    Concluded,
    NeedTrials,
    Step,
    Tests,
    VariantCounts,
    cells_of,
    leans_passing,
)
from orchestrator.core.trail import culprit_words

__all__ = ["Adaptive", "Replay", "Step", "conclude_replay"]

MAX_CULPRITS = 3
# First looks pay when at least three flips can be let go: the sufficiency test costs about one
# proof of failing, a look saves part of one (bench/strategies.py).
LOOK_FROM_FACTORS = 4
_WithLevels = Callable[[Sequence[str]], dict[str, str]]  # a subset of factors -> a variant


@dataclass(frozen=True)
class Replay:
    needed: tuple[dict[str, str], ...]  # variants that need one more trial now
    outcome: Status | None  # None while trials are needed
    culprits: tuple[dict[str, str], ...]
    trail: tuple[Step, ...]
    reason: str = ""
    # a needed variant whose trial may stop at this p of failing instead of at alpha
    stop_at: Mapping[str, float] = field(default_factory=dict)
    failing: Failing | None = None  # set when it bisected another failure than the target's
    also: Replay | None = None  # the other failure known-bad shows, bisected beside the target
    fail_level: float | None = None  # the p a needed trial stops at where not in stop_at

    @property
    def concluded(self) -> Status | None:
        return self.outcome

    @property
    def asking(self) -> Replay:
        """The replay whose tests need the trials now (the target's first)."""
        return self.also if self.also is not None and self.outcome is not None else self

    def named(self, failing: Failing) -> Replay:
        """This replay as the other failure's: its trail lines named by it (`wedging: flip
        f3`)."""
        name = target_of(failing)
        trail = tuple(dataclasses.replace(step, phase=f"{name}: {step.phase}")
                      for step in self.trail)
        return dataclasses.replace(self, trail=trail, failing=failing)

    def followed_by(self, other: Replay) -> Replay:
        return dataclasses.replace(self, trail=(*self.trail, *other.trail))


class Adaptive(Replaying[Replay]):
    ENDS = ("known-bad", "known-good's")

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
        failing: Failing = CORRUPTING,
    ) -> None:
        self.factors = {name: list(levels) for name, levels in factors.items()}
        self.good, self.bad = dict(good), dict(bad)
        self.alpha, self.clean_rate = alpha, clean_rate
        self.min_trials, self.reproduce_trials = min_trials, reproduce_trials
        self.max_trials_per_variant, self.max_trials = max_trials_per_variant, max_trials
        self.failing = failing  # what counts as failing: named in the reason given
        # variants that cannot be judged (`meeting`), by key: like `git bisect skip`, a test of
        # one has no answer, and the search goes on with the others
        self.skipped: dict[str, Unresolvable] = {}

    def pass_alpha(self, good: VariantCounts) -> float:
        """The level a PASS needs against known-bad. A PASS accuses a level, and the scan gives
        every innocent factor several looks at passing by luck: half of alpha. When known-good
        fails too (background noise), "no worse than known-good" no longer holds a weaker
        failure back, so the comparison with known-bad carries it alone, Bonferroni over the
        factors. (What it bought in false accusations: BENCHMARKS.md, "Strategies".)"""
        return self.alpha / (max(2, len(self.factors)) if good.failures else 2)

    # -- the protocol (`propose` and `replay`: Replaying's, for both failures) -----------------

    def stop_rule(
        self, levels: Levels, done: Sequence[TrialEvidence]
    ) -> StopWhenFailing | None:
        if variant_key(levels) in (variant_key(self.good), variant_key(self.bad)):
            return None
        asking = self.replay(done).asking
        failing = asking.failing or self.failing  # the failure whose test needs the trial
        cells = cells_of([t.judged_as(failing) for t in done])
        spread = next((cell.spread for cell in cells.values()), INDEPENDENT)
        prior = cells.get(variant_key(levels), VariantCounts(spread=spread))
        good = cells.get(variant_key(self.good), VariantCounts(spread=spread))
        level = asking.stop_at.get(variant_key(levels), asking.fail_level or self.alpha)
        return StopWhenFailing((prior.failures, prior.judged + prior.unfinished), good.pair,
                               level, failing, prior.trials, spread)

    def judging(self, failing: Failing) -> Adaptive:
        return Adaptive(self.factors, self.good, self.bad, alpha=self.alpha,
                        clean_rate=self.clean_rate, min_trials=self.min_trials,
                        reproduce_trials=self.reproduce_trials,
                        max_trials_per_variant=self.max_trials_per_variant,
                        max_trials=self.max_trials, failing=failing,
                        ).meeting(list(self.skipped.values()))

    def bad_trials(self, evidence: Sequence[TrialEvidence]) -> list[TrialEvidence]:
        return [t for t in evidence if variant_key(t.levels) == variant_key(self.bad)]

    def shows(self, seen: Sequence[TrialEvidence]) -> bool:
        """Known-bad fails this way against known-good at alpha, or its reproduction's
        trials look failing so: each of them failed so, more of their sessions than the clean
        rate (one restart that hiccupped is not enough to run both ends on). Its reproduction
        then runs both on. Those first trials only, so that the answer stays once the twin's
        own trials are added."""
        cells = cells_of(seen)
        bad, good = cells.get(variant_key(self.bad)), cells.get(variant_key(self.good))
        if bad is None or good is None:
            return False
        first = self.bad_trials(seen)[:self.reproduce_trials]
        looks = all(t.failures for t in first) and \
            sum(t.failures for t in first) > self.clean_rate * sum(t.judged for t in first)
        return looks or reproduced(bad.pair, good.pair, self.alpha)[0] is Answer.FAIL

    def replay_target(self, evidence: Sequence[TrialEvidence]) -> Replay:
        """The procedure for ``self.failing`` alone."""
        good = [t for t in evidence if variant_key(t.levels) == variant_key(self.good)]
        run = Tests(self, cells_of(evidence), len(evidence),
                    good_was_clean=not any(t.failures for t in good[:self.reproduce_trials]))
        culprits: list[dict[str, str]] = []
        try:
            reproduce(self, run)
            bad = dict(self.bad)
            searched_several = False
            while len(culprits) < MAX_CULPRITS:
                found, spare, several = self._culprit_in(run, bad)
                if not found:
                    break
                searched_several = searched_several or several
                culprit = confirm(self, run, found, bad, several=several or bool(culprits),
                                  completed=self._completed(spare, several))
                spare = [f for f in spare if f in culprit]
                culprits.append(culprit)
                broken = self._break(bad, culprit, spare)
                if run.test(broken, "more culprits?", quiet=True) is not Answer.FAIL:
                    break
                bad = broken
            kept = self._each_alone(run, culprits)
            if len(kept) == 1 and (searched_several or len(culprits) > 1):
                # confirmed as one of several, it is known-bad's only culprit after all
                kept = [confirm(self, run, kept[0], self.bad)]
            culprits = kept
        except NeedTrials as need:
            return Replay(need.variants, None, tuple(culprits), tuple(run.trail),
                          stop_at=need.stop_at, fail_level=run.fail_level())
        except Concluded as stop:
            return Replay((), stop.outcome, tuple(culprits), tuple(run.trail), stop.reason)
        names = "; ".join(culprit_words(c) for c in culprits)
        skipped = {variant_key(s.levels) for s in run.trail if s.answer == "skipped"}
        said = f" (found past {len(skipped)} skipped variant(s), as `git bisect skip`)" \
            if skipped else ""
        return Replay((), Status.CULPRIT, tuple(culprits), tuple(run.trail),
                      f"{target_of(self.failing)} follows {names}{said}")

    def conclude(self, done: Sequence[TrialEvidence],
                 unresolvable: Sequence[Unresolvable]) -> Conclusion:
        return conclude_replay(self.replay(done), done, self.factors, unresolvable, self.good,
                               self.bad)

    def meeting(self, unresolvable: Sequence[Unresolvable]) -> Self:
        """The same strategy, told which variants cannot be judged (deploys that failed, or
        the user's probe exiting 125): as `git bisect skip`, a test of one answers nothing and
        the search goes on with other variants (a flip skipped is not found needed, delta
        debugging takes a skipped subset as not failing, a neighbour skipped keeps its level).
        Only known-good, known-bad and the culprit alone cannot be done without: the
        conclusion then says which one and why."""
        if not unresolvable:
            return self
        told = copy.copy(self)
        told.skipped = {variant_key(u.levels): u for u in unresolvable}
        return told

    def _each_alone(self, run: Tests, culprits: list[dict[str, str]]
                    ) -> list[dict[str, str]]:
        """The culprits that hold no other one (a set holding another is not minimal) and,
        under background noise, still make known-bad fail with every other one broken. Each
        was found in known-bad with those before it broken; a culprit named on a clean
        variant's lucky FAIL explains nothing of known-bad once the real ones are gone (a
        claim that known-bad is quiet there, judged as "more culprits?" is).
        (Without noise a FAIL is no luck, and the test would only cost trials.)"""
        minimal = [c for i, c in enumerate(culprits) if c not in culprits[:i]
                   and not any(o.items() < c.items() for o in culprits)]
        if len(minimal) < 2 or not run.noisy():
            return minimal
        kept = []
        for culprit in minimal:
            alone = dict(self.bad)
            for other in minimal:
                if other is not culprit:
                    alone = self._break(alone, other, [f for f in other if f not in culprit])
            whole = all(alone[f] == level for f, level in culprit.items())
            if not whole or run.test(alone, "confirm: alone in known-bad",
                                     quiet=True) is Answer.FAIL \
                    or run.skipped(alone):  # no answer: nothing against it
                kept.append(culprit)
        return kept or minimal

    # -- the phases ---------------------------------------------------------------------------

    def _culprit_in(self, run: Tests, bad: dict[str, str]
                    ) -> tuple[dict[str, str], list[str], bool]:
        """One culprit behind ``bad``'s failure, those of its factors whose flip alone does
        not cure ``bad`` (another culprit shares the rest: breaking one of them keeps it), and
        whether several culprits made ``bad`` fail (no single flip cured it)."""
        # One conjunction behind the failure (the common case): exactly its levels are the ones
        # whose single flip makes the failing variant pass. One test per factor, no ddmin.
        necessary, completion = self._necessary(run, bad, list(self.factors))
        if necessary:
            return necessary, completion, False
        # Every single flip still fails: several culprits are active at once. Delta debugging
        # isolates one minimal failing set; its shared background is then scanned the same way.
        delta = [f for f in self.factors if bad[f] != self.good[f]]

        def with_levels(subset: Sequence[str]) -> dict[str, str]:
            return {**self.good, **{f: bad[f] for f in subset}}

        minimal = self._ddmin(run, delta, with_levels, narrowing=True)
        failing = with_levels(minimal)
        background = [f for f in self.factors if f not in delta]
        culprit = {**{f: failing[f] for f in minimal},
                   **self._necessary(run, failing, background)[0]}
        return {f: culprit[f] for f in self.factors if f in culprit}, [], True

    def _completed(self, spare: Sequence[str], several: bool) -> bool:
        """Whether the culprit `_culprit_in` found was completed by delta debugging: levels
        whose flips alone did not cure known-bad, which another culprit holds too (what a
        neighbour keeping its level must then rule out: `confirm`'s ``completed``)."""
        return bool(spare) and not several

    def _necessary(
        self, run: Tests, failing: dict[str, str], factors: Sequence[str]
    ) -> tuple[dict[str, str], list[str]]:
        """The levels of ``failing`` whose flip alone makes it pass, and the factors whose
        levels complete them (see below; most often none).

        The flips are independent tests: all that still need trials are proposed at once, so
        free pools run them side by side. With many factors, a flip back to known-good's level
        first gets a look that ends at its first failing session, and a flip that looks
        failing is let go unproven. One sufficiency test then proves all of those innocent at
        once: when known-good with only the found levels of ``failing`` still fails, none of
        the other levels is needed (putting back known-bad's levels does not cure a failure).
        If it does not fail, the flips let go are tested to the end after all; and if none of
        them passes either, the found levels are needed but not enough: the failure also needs
        one of several other levels (f2 AND (f3 OR f6)). Delta debugging over the other
        differing factors then finds a minimal set that completes them on known-good's
        background, and the culprit is both. "Not sufficient" is a claim of quiet (known-good
        with the found levels does not fail): it rules out the clean rate, not half of
        known-bad's (the two-culprit scenario's seed 55: UNKNOWN at 13 trials, taken as not
        sufficient, the set completed with an innocent level)."""
        differ = [f for f in factors if self.good[f] != failing[f]]
        # A single failing session says "failing" only against a clean known-good; and it is
        # known-good's reproduction that decides, so later trials of it do not switch looks off
        # half-way.
        look = run.good_was_clean and len(differ) >= LOOK_FROM_FACTORS
        found, let_go = self._scan(run, failing, factors, look=look)
        completion: list[str] = []
        if let_go and found:
            sufficient = {**self.good, **found}
            if run.test(sufficient, "sufficient?", quiet=True) is not Answer.FAIL:
                more = self._scan(run, failing, let_go, look=False)[0]
                if not more:
                    rest = [f for f in differ if f not in found]
                    completion = self._ddmin(run, rest, lambda subset: {
                        **sufficient, **{f: failing[f] for f in subset}})
                found |= more | {f: failing[f] for f in completion}
        # No flip passed and the rest looked failing: most often several culprits are active
        # at once, and proving every flip failing would buy nothing delta debugging needs.
        return {f: found[f] for f in factors if f in found}, completion

    def _scan(self, run: Tests, failing: dict[str, str], factors: Sequence[str], *,
              look: bool) -> tuple[dict[str, str], list[str]]:
        """Flip each factor alone: the levels whose flip passes, and the flips let go."""
        found: dict[str, str] = {}
        let_go: list[str] = []
        waiting: list[dict[str, str]] = []
        stop_at: dict[str, float] = {}
        for factor in factors:
            # only a flip back to known-good's level can be proven innocent by sufficiency
            first_look = look and self.good[factor] != failing[factor]
            try:
                # a first full trial that looks passing will do: confirmation proves the set
                # (under background noise, where a PASS is weaker, every PASS is proven here)
                answer = run.test(self._flip(failing, factor), f"flip {factor}",
                                  look=first_look, provisional=not run.noisy())
            except NeedTrials as need:
                waiting.extend(need.variants)
                stop_at.update(need.stop_at)
                continue
            if answer is Answer.PASS:  # what confirmation's neighbours may lean on
                run.scan_passes.append(run.trail[-1])
            if answer is Answer.PASS or leans_passing(run.trail[-1]):
                # undecided at its budget but leaning passing: as confirmation keeps a level
                # whose neighbour does, the level goes into the set it proves
                found[factor] = failing[factor]
            elif answer is Answer.UNKNOWN and first_look:
                let_go.append(factor)
        if waiting:  # one trial each: two flips waiting on known-good need one more of it
            raise NeedTrials(*{variant_key(v): v for v in waiting}.values(), stop_at=stop_at)
        return found, let_go

    def _flip(self, levels: dict[str, str], factor: str) -> dict[str, str]:
        """Another level of one factor: known-good's where it differs, else the next one."""
        if self.good[factor] != levels[factor]:
            return {**levels, factor: self.good[factor]}
        return {**levels, factor: next(lvl for lvl in self.factors[factor]
                                       if lvl != levels[factor])}

    def _ddmin(self, run: Tests, delta: list[str], with_levels: _WithLevels, *,
               narrowing: bool = False) -> list[str]:
        """Zeller's ddmin: a 1-minimal subset of ``delta`` whose variant fails. ``narrowing``:
        its FAILs only narrow the search (sequential.NARROWING), the caller proves the end."""
        n = 2
        while len(delta) >= 2:
            size = -(-len(delta) // n)
            chunks = [delta[i:i + size] for i in range(0, len(delta), size)]
            for chunk in chunks:
                if run.test(with_levels(chunk), "ddmin subset",
                            narrowing=narrowing) is Answer.FAIL:
                    delta, n = chunk, 2
                    break
            else:
                for chunk in chunks if len(chunks) > 2 else []:
                    rest = [f for f in delta if f not in chunk]
                    if run.test(with_levels(rest), "ddmin complement",
                                narrowing=narrowing) is Answer.FAIL:
                        delta, n = rest, max(n - 1, 2)
                        break
                else:
                    if n >= len(delta):
                        return delta
                    n = min(len(delta), 2 * n)
        return delta

    def _break(self, bad: dict[str, str], culprit: Mapping[str, str],
               spare: Sequence[str]) -> dict[str, str]:
        """Known-bad with the culprit broken by one flip: of a ``spare`` factor if there is one
        (the other culprits that share the rest stay whole), else preferring known-good's
        level."""
        factor = next(iter(spare), None) or next(
            (f for f in culprit if self.good[f] != culprit[f]), next(iter(culprit)))
        return self._flip(bad, factor)
