"""The `optimize` strategy: the fastest configuration that stays clean.

Four phases, each decided from the stored trials alone:

1. the production configuration and known-good, measured first (the search starts from what
   runs, and an answer worse than production is never the answer);
2. the search: a sampler (Optuna's, behind ``Search``; orchestrator/search/) picks each next
   configuration from every measurement so far, up to ``trials`` trials;
3. confirmation (optimize_confirm.py): the leading candidate is re-run as a learning search
   (TPE, GP) goes, out of its budget, and after the budget the best candidates until each is
   proven safe on ``confirm_trials`` trials, the ranking recomputed on all of them: a
   configuration that looked fast and clean on one lucky trial is named only if its re-runs
   agree. Production runs again beside the leader's re-runs until it has ``confirm_trials``
   trials, so that the answer is never left untested against a single trial of it: each re-run
   of it on one pool with a trial of the leader, one after the other there (``Beside``);
4. the final phase (optimize_final.py): once confirmation has settled the answer, and it is
   not production, production and the answer run alternated in ``confirm_trials`` fresh pairs
   (``2 * confirm_trials`` trials more; production shown unsafe: none), each pair's two trials
   one after the other. Production's earlier trials may be the run's first, hours before the
   answer's, on a machine that has drifted since; a pair's two trials share the hour. The
   answer stays the one confirmation settled while all its trials keep it safe: its final
   trials test it, they do not reopen the choice (``Optimize.standing``).

Each trial is one measurement of one configuration; a configuration's corruption that is
already certain above the limit stops its trial early (``StopAboveLimit``). The conclusion
ranks the configurations proven safe (optimize_rank.py) and lists the unsafe ones that looked
fast, with why they were rejected. The answer is compared with production (known-good where
none is declared) on the final phase's pairs only, a one-sided paired t-test on the pairs' log
ratios (a Welch test on all trials where production was shown unsafe): not shown better, or
before the pairs have run, it is named "no better than production".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from experiments.optimize_config import OptimizeConfig
from orchestrator.core.evidence import CORRUPTING, Levels, TrialEvidence, variant_key
from orchestrator.core.pairs import Beside, first_units
from orchestrator.core.stats.exact import binomial_at_most
from orchestrator.core.strategies.base import (
    UNFINISHED,
    Conclusion,
    Status,
    Strategy,
    Unresolvable,
)
from orchestrator.core.strategies.optimize_confirm import (
    CONFIRM_ROUNDS,
    leader_again,
    reruns_wanted,
)
from orchestrator.core.strategies.optimize_final import Final, final_phase, paired
from orchestrator.core.strategies.optimize_rank import Candidate, candidates, figure, ranked
from orchestrator.core.strategies.optimize_said import SearchFinding, SearchStep, reason
from orchestrator.core.strategies.optimize_versus import VersusProduction, versus_production


@dataclass(frozen=True)
class Told:
    """One finished trial as the search is told it: the objectives it measured (None where it
    measured none) and the constraints of its configuration on all its trials so far."""

    seq: int
    levels: Levels
    values: tuple[float, ...] | None
    constraints: Mapping[str, float]


class Search(Protocol):
    """The sampler's side (orchestrator/search/study.py holds Optuna's)."""

    def suggest(self, told: Sequence[Told], fixed: Sequence[Levels],
                pending: Sequence[Levels], count: int) -> list[dict[str, str]]:
        """``fixed`` (measured as given), then up to ``count`` configurations of the sampler's
        choosing; ``told``: every finished trial; ``pending``: those running."""
        ...

    def failed(self) -> int:
        """Trials that ended without a measurement (a deployment that failed)."""
        ...

    def close(self, told: Sequence[Told]) -> None:
        """The search is over: the last trials told, nothing left running."""
        ...


@runtime_checkable
class Searching(Protocol):
    """A strategy whose proposals come from a search the driver attaches."""

    def with_search(self, search: Search) -> Strategy: ...


@dataclass(frozen=True)
class Standing:
    """Where the configurations stand on a run's trials (``Optimize.standing``)."""

    every: list[Candidate]  # in the order first measured
    safe: list[Candidate]  # best first
    named: list[Candidate]  # safe and confirmed, the answer first
    final: Final | None  # the final phase, once it began
    settled: str | None  # the answer confirmation settled, while still safe


@dataclass(frozen=True)
class StopAboveLimit:
    """Ends a trial once its configuration's corruption is certain above the limit: even if
    every session still to come were clean, the one-sided binomial test at ``alpha`` says the
    rate exceeds ``limit``. Curtailed as ``StopWhenFailing``: stopping never turns a pass into
    a fail."""

    prior: tuple[int, int]  # (corrupted, judged) of the configuration's earlier trials
    limit: float
    alpha: float
    failing: frozenset[str] | None = None

    def decided(self, corrupted: int, planned: int) -> bool:
        k, n = self.prior[0] + corrupted, self.prior[1] + planned
        return k > 0 and 1.0 - binomial_at_most(k - 1, n, self.limit) <= self.alpha


class Optimize:
    def __init__(self, plan: OptimizeConfig, factors: Sequence[str], pools: int,
                 known_good: Levels | None = None, search: Search | None = None,
                 grid: int | None = None) -> None:
        """``grid``: the number of configurations a grid sampler enumerates (its budget at
        most); a grid measures production and known-good among them, not before."""
        self.plan, self.factors, self.pools, self.search = plan, list(factors), pools, search
        self.known_good, self.grid = known_good, grid
        seeds = [s for s in (plan.production, known_good) if s] if grid is None else []
        self.seeds = [dict(s) for i, s in enumerate(seeds)
                      if variant_key(s) not in {variant_key(o) for o in seeds[:i]}]
        self.budget = plan.trials if grid is None else min(plan.trials, grid)
        self.unresolvable: tuple[Unresolvable, ...] = ()
        # where the final phase began, and the trials up to it: every trial before it had
        # ended, so a later replay of the same run finds it where it was
        self._began: tuple[int, tuple[TrialEvidence, ...]] | None = None

    def _copy(self, search: Search | None, unresolvable: Sequence[Unresolvable]) -> Optimize:
        other = Optimize(self.plan, self.factors, self.pools, self.known_good, search, self.grid)
        other.unresolvable = tuple(unresolvable)
        return other

    def with_search(self, search: Search) -> Optimize:
        return self._copy(search, self.unresolvable)

    def meeting(self, unresolvable: Sequence[Unresolvable]) -> Optimize:
        return self._copy(self.search, unresolvable)

    # -- what the search is told --------------------------------------------------------

    def told(self, done: Sequence[TrialEvidence]) -> list[Told]:
        """Each finished trial with its configuration's constraints on its trials so far."""
        result: list[Told] = []
        seen: dict[str, list[TrialEvidence]] = {}
        for trial in sorted(done, key=lambda t: t.seq):
            key = variant_key(trial.levels)
            seen.setdefault(key, []).append(trial)
            judged = candidates(seen[key], self.plan)[0]
            values = [figure(trial, metric) for metric in self.plan.objectives]
            measured = tuple(v for v in values if v is not None)
            result.append(Told(trial.seq, dict(trial.levels),
                               measured if len(measured) == len(values) else None,
                               judged.constraints()))
        return result

    # -- the protocol ----------------------------------------------------------------

    def propose(self, done: Sequence[TrialEvidence], pending: Sequence[Levels]) -> list[
            dict[str, str]]:
        if self.search is None:
            raise RuntimeError("the optimize strategy proposes through a search: "
                               "`with_search` first (the driver attaches one)")
        told = self.told(done)
        free = max(0, self.pools - len(pending))
        searched = len(done) + len(pending) + self.search.failed()
        if searched < self.budget:
            ran = Counter(variant_key(levels) for levels in [*(t.levels for t in done),
                                                             *pending])
            skipped = {variant_key(u.levels) for u in self.unresolvable}
            fixed = [s for s in self.seeds if not ran[variant_key(s)]
                     and variant_key(s) not in skipped]
            if not fixed and self.plan.sampler in ("tpe", "gp"):  # samplers that learn:
                fixed = leader_again(done, pending, self.plan)  # the leader re-run as they go
            fixed = fixed[:free]
            count = min(free - len(fixed), self.budget - searched - len(fixed))
            if not fixed and count <= 0:
                return []
            return self.search.suggest(told, fixed, pending, max(0, count))
        standing = self.standing(done, searched)
        if standing.final is None:
            reruns = first_units(self._reruns(done, pending, searched), free)
            if reruns:
                return self._asked(told, reruns, pending)
        elif not pending:  # pairs start with nothing else running: each pair's trials
            pairs = self._pairs_wanted(standing, free)  # adjacent on one pool (Beside)
            if pairs:
                return self._asked(told, pairs, pending)
        if not pending:
            self.search.close(told)
        return []

    def _asked(self, told: Sequence[Told], wanted: Sequence[dict[str, str]],
               pending: Sequence[Levels]) -> list[dict[str, str]]:
        """``wanted`` measured as given, through the search (it records them), each pair's
        partner still ``Beside`` its mate."""
        assert self.search is not None
        asked = self.search.suggest(told, wanted, pending, 0)
        return [Beside(got, want.mate) if isinstance(want, Beside) else got
                for want, got in zip(wanted, asked, strict=True)]

    def _reruns(self, done: Sequence[TrialEvidence], pending: Sequence[Levels],
                searched: int) -> list[dict[str, str]]:
        """The confirmation's next re-runs (optimize_confirm.py), ``searched`` trials started."""
        return reruns_wanted(done, pending, searched - self.budget, self.plan,
                             self.production(), self.unresolvable)


    # -- the final phase (optimize_final.py) ---------------------------------------------

    def final(self, done: Sequence[TrialEvidence], started: int = 0) -> Final | None:
        """The final phase in these trials: after the first trial at which the search's budget
        was spent and confirmation wanted nothing more; None before. ``started``: the trials
        started, failed deployments included (a failure after the last trial done counts)."""
        if self._began is not None:
            after, before = self._began
            if _upto(done, after) == before:
                return Final(after, tuple(sorted((t for t in done if t.seq > after),
                                                 key=lambda t: t.seq)))
        final = final_phase(done, self.budget,
                            lambda before, k: not self._reruns(before, [], k), started)
        if final is not None:
            self._began = final.after, _upto(done, final.after)
        return final

    def standing(self, done: Sequence[TrialEvidence], started: int = 0) -> Standing:
        """Every configuration, the safe ones best first and those confirmed. Once the final
        phase began, the answer confirmation settled stays first while all its trials keep it
        safe: its final trials test it against production, they do not reopen the choice (its
        earlier trials are why it led, and a runner-up's are as lucky)."""
        every = candidates(done, self.plan)
        safe = ranked([c for c in every if c.safe])
        final = self.final(done, started)
        settled = None
        if final is not None:
            before = candidates([t for t in done if t.seq <= final.after], self.plan)
            first = [c for c in ranked([c for c in before if c.safe])
                     if c.trials >= self.plan.confirm_trials][:1]
            if first and any(c.key == first[0].key and c.trials >= self.plan.confirm_trials
                             for c in safe):
                settled = first[0].key
                safe = sorted(safe, key=lambda c: c.key != settled)  # stable: the rest as ranked
        named = [c for c in safe if c.trials >= self.plan.confirm_trials]
        return Standing(every, safe, named, final, settled)

    def _paired_with(self, standing: Standing) -> Levels | None:
        """Production, where the answer is to be paired with it: the answer confirmation
        settled (or, before the final phase, the leading one), not production; production
        measured and not shown unsafe."""
        levels, named = self.production(), standing.named
        if not named or not levels or named[0].key == variant_key(levels):
            return None
        if standing.final is not None and named[0].key != standing.settled:
            return None  # the settled answer fell (its final trials showed it unsafe)
        key = variant_key(levels)
        mine = next((c for c in standing.every if c.key == key), None)
        return levels if mine is not None and self._pairable(mine) else None

    def _pairable(self, production: Candidate) -> bool:
        """Production not shown unsafe, and deployable: the final phase runs it."""
        return production.plausible and production.key not in {
            variant_key(u.levels) for u in self.unresolvable}

    def _pairs_wanted(self, standing: Standing, pools: int) -> list[dict[str, str]]:
        production = self._paired_with(standing)
        if production is None or standing.final is None:
            return []
        count = self.plan.confirm_trials
        return standing.final.wanted(production, standing.named[0].levels, count,
                                     2 * count * CONFIRM_ROUNDS, pools)

    def stop_rule(self, levels: Levels, done: Sequence[TrialEvidence]) -> StopAboveLimit | None:
        if self.plan.target != "corruption":
            return None
        mine = [t for t in done if variant_key(t.levels) == variant_key(levels)]
        prior = (sum(t.failures for t in mine), sum(t.judged for t in mine))
        return StopAboveLimit(prior, self.plan.max_corruption, self.plan.alpha)

    def production(self) -> Levels | None:
        """What the answer is compared with: the campaign's production configuration, else
        its known-good one (each measured first in this run)."""
        return self.plan.production or self.known_good or None

    def versus(self, standing: Standing) -> VersusProduction | None:
        """The answer (``standing.named[0]``) against production, on the final phase's pairs
        (none yet: not tested); a Welch test on all trials where production was shown unsafe
        (no final phase). Only this run's trials (the conclusion's ``done``): never production
        from another day."""
        levels = self.production()
        if not levels or not standing.named:
            return None
        best, key = standing.named[0], variant_key(levels)
        production = next((c for c in standing.every if c.key == key), None)
        against = versus_production(best, production, self.plan.alpha)
        if production is None or against.is_production or not self._pairable(production):
            return against
        final = standing.final  # its pairs are of the answer it settled, only
        pairs = ([] if final is None or standing.settled != best.key
                 else final.pairs(levels, best.levels))
        return VersusProduction(
            best, against.production,
            tuple(paired(metric, pairs, self.plan.alpha) for metric in self.plan.objectives),
            paired=True, pairs=tuple((p.seq, a.seq) for p, a in pairs),
            wanted=self.plan.confirm_trials)

    def conclude(self, done: Sequence[TrialEvidence],
                 unresolvable: Sequence[Unresolvable]) -> Conclusion:
        standing = self.standing(done)
        every, safe, named = standing.every, standing.safe, standing.named
        log = tuple(self.trail(done, standing.final))
        against = self.versus(standing)
        found = SearchFinding(self.plan, tuple(self.seeds), standing, tuple(done),
                              tuple(unresolvable), log, against)
        if named:
            return Conclusion(Status.OPTIMUM, reason(named[0], against), log=log, finding=found)
        if not done:
            return Conclusion(Status.INCONCLUSIVE, UNFINISHED, finding=found)
        why = (f"{len(safe)} safe configuration(s), none with {self.plan.confirm_trials} trials"
               if safe else f"none of {len(every)} configuration(s) was proven safe")
        return Conclusion(Status.INCONCLUSIVE, why, log=log, finding=found)

    def trail(self, done: Sequence[TrialEvidence], final: Final | None = None) -> list[
            SearchStep]:
        """`bisect log`'s lines: each trial in order, what it measured, and where its
        configuration stood after it (safe, unproven, unsafe) and which one led."""
        seeds = {variant_key(s) for s in self.seeds}
        final = self.final(done) if final is None else final
        after = math.inf if final is None else final.after
        seen: list[TrialEvidence] = []
        steps = []
        for trial in sorted(done, key=lambda t: t.seq):
            key = variant_key(trial.levels)
            again = any(variant_key(t.levels) == key for t in seen)
            seen.append(trial)
            now = candidates(seen, self.plan)
            mine = next(c for c in now if c.key == key)
            lead = ranked([c for c in now if c.safe])
            value = figure(trial, self.plan.objectives[0])
            steps.append(SearchStep(
                "final" if trial.seq > after else "re-run" if again
                else "seed" if key in seeds else "search",
                dict(trial.levels), trial.seq, self.plan.objectives[0], value,
                trial.judged_as(CORRUPTING).failures, trial.sessions, mine.trials,
                "safe" if mine.safe else "unproven" if mine.plausible else "unsafe",
                lead[0].key if lead else None))
        return steps


def _upto(done: Sequence[TrialEvidence], after: int) -> tuple[TrialEvidence, ...]:
    return tuple(sorted((t for t in done if t.seq <= after), key=lambda t: t.seq))
