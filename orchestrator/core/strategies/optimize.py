"""The `optimize` strategy: the fastest configuration that stays clean.

Three phases, each decided from the stored trials alone:

1. the production configuration and known-good, measured first (the search starts from what
   runs, and an answer worse than production is never the answer);
2. the search: a sampler (Optuna's, behind ``Search``; orchestrator/search/) picks each next
   configuration from every measurement so far, up to ``trials`` trials;
3. confirmation: the leading candidate is re-run as a learning search (TPE, GP) goes, out of
   its budget, and after the budget the best candidates until each is proven safe on
   ``confirm_trials`` trials, the ranking recomputed on all of them: a configuration that
   looked fast and clean on one lucky trial is named only if its re-runs agree. Production
   runs again beside the leader's re-runs until it has ``confirm_trials`` trials, so that the
   answer is never left untested against a single trial of it (its trials may still be the
   run's first, hours before the answer's: a paired final phase would remove that drift).

Each trial is one measurement of one configuration; a configuration's corruption that is
already certain above the limit stops its trial early (``StopAboveLimit``). The conclusion
ranks the configurations proven safe (optimize_rank.py) and lists the unsafe ones that looked
fast, with why they were rejected. The answer is compared with production (known-good where
none is declared) measured in the same run, a one-sided Welch test on per-trial objective
values: not shown better, it is named "no better than production".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from experiments.optimize_config import OptimizeConfig
from orchestrator.core.evidence import CORRUPTING, Levels, TrialEvidence, variant_key
from orchestrator.core.stats.exact import binomial_at_most
from orchestrator.core.strategies.base import (
    UNFINISHED,
    Conclusion,
    Status,
    Strategy,
    Unresolvable,
)
from orchestrator.core.strategies.optimize_rank import (
    Candidate,
    VersusProduction,
    candidates,
    figure,
    pareto,
    ranked,
    versus_production,
)

# Confirmation re-runs may promote the next candidate when one falls; this many rounds of the
# top at most, so a ranking that keeps flipping still ends.
CONFIRM_ROUNDS = 2


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
                fixed = self._leader(done, pending)  # the leader re-run as they go
            fixed = fixed[:free]
            count = min(free - len(fixed), self.budget - searched - len(fixed))
            if not fixed and count <= 0:
                return []
            return self.search.suggest(told, fixed, pending, max(0, count))
        reruns = self._reruns(done, pending, searched)[:free]
        if reruns:
            return self.search.suggest(told, reruns, pending, 0)
        if not pending:
            self.search.close(told)
        return []

    def _leader(self, done: Sequence[TrialEvidence], pending: Sequence[Levels]) -> list[
            dict[str, str]]:
        """The best plausible candidate, once more, while it is not yet settled and none of its
        trials runs: a fast configuration is proven (or shown unsafe) as soon as it leads,
        not after the whole budget (bench/optimize.py: the answer is named sooner). Random and
        grid search keep their own order: they are the baselines a search is measured by."""
        plausible = ranked([c for c in candidates(done, self.plan) if c.plausible])
        if not plausible:
            return []
        best = plausible[0]
        settled = best.safe and best.trials >= self.plan.confirm_trials
        running = any(variant_key(levels) == best.key for levels in pending)
        # one that its trials cannot settle (a rate just under the limit) leaves the budget
        # to the sampler after this many
        spent = best.trials >= self.plan.confirm_trials * CONFIRM_ROUNDS
        return [] if settled or running or spent else [dict(best.levels)]

    def _reruns(self, done: Sequence[TrialEvidence], pending: Sequence[Levels],
                searched: int) -> list[dict[str, str]]:
        """One more trial of each of the best plausible candidates not yet settled (proven
        safe on ``confirm_trials`` trials), while the confirmation budget lasts. A candidate
        its re-runs show unsafe drops out, and the next one moves up."""
        plan = self.plan
        if searched - self.budget >= plan.confirm_top * plan.confirm_trials * CONFIRM_ROUNDS:
            return []
        running = Counter(variant_key(levels) for levels in pending)
        most = plan.confirm_trials * CONFIRM_ROUNDS  # trials of one candidate, at most
        every = candidates(done, plan)
        top = ranked([c for c in every if c.plausible])[:plan.confirm_top]
        wanted = []
        for best in top:
            settled = best.safe and best.trials >= plan.confirm_trials
            if not settled and not running[best.key] and best.trials < most:
                wanted.append(dict(best.levels))
        # production beside the leader, in the confirmation's hours, until it has as many
        # trials as a confirmed answer: measured once at the start, the answer could not be
        # tested against it at all
        production = self.production()
        if top and production is not None and top[0].key != variant_key(production):
            key = variant_key(production)
            measured = next((c for c in every if c.key == key), None)
            asked = any(variant_key(levels) == key for levels in wanted)  # as a candidate
            if not asked and measured is not None and measured.trials < plan.confirm_trials \
                    and not running[key] and key not in {variant_key(u.levels)
                                                         for u in self.unresolvable}:
                # the side with fewer trials first: with one pool they then alternate
                wanted.insert(0 if measured.trials < top[0].trials else 1, dict(production))
        return wanted

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

    def versus(self, best: Candidate, every: Sequence[Candidate]) -> VersusProduction | None:
        """The answer against production. ``every`` is of this run's trials only (the
        conclusion's ``done``: this campaign's), so production was measured in the same window
        as the answer, not taken from another day."""
        levels = self.production()
        if not levels:
            return None
        key = variant_key(levels)
        return versus_production(best, next((c for c in every if c.key == key), None),
                                 self.plan.alpha)

    def conclude(self, done: Sequence[TrialEvidence],
                 unresolvable: Sequence[Unresolvable]) -> Conclusion:
        every = candidates(done, self.plan)
        safe = ranked([c for c in every if c.safe])
        named = [c for c in safe if c.trials >= self.plan.confirm_trials]
        log = tuple(self.trail(done))
        against = self.versus(named[0], every) if named else None
        payload = self._payload(every, safe, named, done, unresolvable, log, against)
        if named:
            return Conclusion(Status.OPTIMUM, self._answer(named[0], against),
                              optimize=payload, log=log)
        if not done:
            return Conclusion(Status.INCONCLUSIVE, UNFINISHED, optimize=payload)
        why = (f"{len(safe)} safe configuration(s), none with {self.plan.confirm_trials} trials"
               if safe else f"none of {len(every)} configuration(s) was proven safe")
        return Conclusion(Status.INCONCLUSIVE, why, optimize=payload, log=log)

    @staticmethod
    def _answer(best: Candidate, against: VersusProduction | None) -> str:
        """The conclusion's reason: the best safe configuration, or, when it is not shown
        better than production, that it is no better than production."""
        shown = ", ".join(f"{e.metric} {e.mean:.4g}" for e in best.objectives
                          if e.mean is not None)
        def trials(n: int) -> str:
            return f"{n} trial{'s' * (n != 1)}"

        named = f"{best.key} ({shown}; {trials(best.trials)})"
        if against is None or against.production is None:
            return f"best safe configuration: {named}"
        if against.is_production:
            return f"production is the best safe configuration: {named}"
        first = against.objectives[0]
        test = ("fewer than 2 trials on a side" if first.p_value is None
                else f"one-sided Welch p={first.p_value:.2g}")
        change = "" if first.difference is None else f"{first.difference:+.4g} {first.metric}, "
        production = f"{against.production.key}, {trials(against.production.trials)}"
        if not against.production.safe:
            production += ", itself not proven safe"
        if against.shown_better:
            return (f"best safe configuration: {named}; better than production "
                    f"({production}): {change}{test}")
        return (f"no better than production ({production}: {change}{test}): the best safe "
                f"configuration {named} is not shown better")

    def trail(self, done: Sequence[TrialEvidence]) -> list[dict[str, Any]]:
        """`bisect log`'s lines: each trial in order, what it measured, and where its
        configuration stood after it (safe, unproven, unsafe) and which one led."""
        seeds = {variant_key(s) for s in self.seeds}
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
            steps.append({
                "phase": "re-run" if again else "seed" if key in seeds else "search",
                "levels": dict(trial.levels), "trial": trial.seq,
                "objective": self.plan.objectives[0], "value": value,
                "corrupted": trial.judged_as(CORRUPTING).failures,
                "sessions": trial.sessions, "trials": mine.trials,
                "standing": "safe" if mine.safe else "unproven" if mine.plausible else "unsafe",
                "leader": lead[0].key if lead else None})
        return steps

    def _payload(self, every: Sequence[Candidate], safe: Sequence[Candidate],
                 named: Sequence[Candidate], done: Sequence[TrialEvidence],
                 unresolvable: Sequence[Unresolvable],
                 trail: Sequence[Mapping[str, Any]],
                 against: VersusProduction | None = None) -> dict[str, Any]:
        plan = self.plan
        front = {c.key for c in pareto(named)} if len(plan.objectives) > 1 else set()
        fastest = sorted(every, key=lambda c: c.score(), reverse=True)
        unsafe = [c for c in fastest if not c.plausible]
        unproven = [c for c in fastest if c.plausible and not c.safe]
        seeds = {variant_key(s) for s in self.seeds}
        rows = []
        for c in safe:
            rows.append({**c.to_json(), "confirmed": c.trials >= plan.confirm_trials,
                         "pareto": c.key in front, "seed": c.key in seeds})
        return {
            "objectives": list(plan.objectives),
            "limits": {"corruption": plan.max_corruption, "wedging": plan.max_wedging,
                       "slo": plan.slo.limits(), "alpha": plan.alpha},
            "sampler": plan.sampler,
            "best": dict(named[0].levels) if named else None,
            "ranked": rows,
            "pareto": [c.to_json() for c in named if c.key in front],
            # shown unsafe (a bound or an SLO broken): fast ones first, each with why
            "rejected": [{**c.to_json(), "seed": c.key in seeds} for c in unsafe],
            # not shown unsafe, but measured too little to be proven safe (not re-run)
            "unproven": [{**c.to_json(), "seed": c.key in seeds} for c in unproven],
            "undeployable": [{"levels": dict(u.levels), "attempts": u.attempts,
                              "error": u.error} for u in unresolvable],
            # the search's picks and the seeds, and the re-runs of configurations measured
            "trials": {"total": len(done),
                       "search": sum(1 for step in trail if step["phase"] != "re-run"),
                       "confirmation": sum(1 for step in trail if step["phase"] == "re-run"),
                       "stopped_early": sum(t.stopped_early for t in done)},
            "production": dict(plan.production) if plan.production else None,
            # the answer against production (or known-good) measured in this run: a one-sided
            # Welch test on per-trial objective values; None: nothing named, or no production
            "versus_production": None if against is None else against.to_json(),
        }
