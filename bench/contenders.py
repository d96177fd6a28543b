"""What the benchmark compares: the strategies, two baselines and an oracle, on one scenario.

Each returns the culprits it names ([] for "nothing to blame", None for no answer); its cost is
what the pool ran. The adaptive strategy and the oracle run on the real campaign loop
(bench/simulated.py: the driver's loop, the store, the verdict as `bisect verdict` recomputes
it), each with its own stop rules; the factorial strategy runs its fixed plan, every trial in
full, and its verdict is the same function `bisect verdict` calls; the baselines are what an
engineer does by hand (fixed trials, every trial in full).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import Field

from bench.scenarios import ALPHA, COST, Levels, Pool, Scenario
from experiments.campaign import Campaign
from experiments.strategy_config import AdaptiveConfig
from orchestrator.core.evidence import Failing, TrialEvidence, failing_for, target_of
from orchestrator.core.stats.exact import fisher_greater
from orchestrator.core.strategies.adaptive import Adaptive
from orchestrator.core.strategies.base import Status
from orchestrator.core.strategies.factorial import Factorial, decide, fraction
from orchestrator.core.strategies.registry import register
from orchestrator.core.verdict import Verdict

Loop = Callable[[dict[str, Any]], Verdict]  # a `strategy:` section, run on the real loop
Contender = Callable[[Scenario, Pool, Loop], list[Levels] | None]


def _seen(s: Scenario, trials: Sequence[TrialEvidence]) -> list[TrialEvidence]:
    """Trials as the strategy sees them (stored.evidence): judged against the scenario's
    target (wedges are the failures if targeted)."""
    return [t.judged_as(failing_for(s.target)) for t in trials]


def _named(verdict: Verdict) -> list[Levels] | None:
    """Every set the verdict names: its culprits, and the culprits of wedging beside them."""
    wedges = [dict(c.factors) for c in verdict.wedge_culprits]
    named = [dict(c.factors) for c in verdict.culprits] if verdict.status is Status.CULPRIT \
        else []
    named += [w for w in wedges if w not in named]
    if verdict.status in (Status.CULPRIT, Status.NOT_REPRODUCED, Status.NO_CULPRIT) or named:
        return named
    return None


def run_adaptive(s: Scenario, pool: Pool, loop: Loop, per_variant: int | None = None,
                 campaign: int | None = None) -> list[Levels] | None:
    """``per_variant``: the budget of trials a variant, ``campaign``: of the campaign (else
    the strategy's defaults)."""
    return _named(loop({"kind": "adaptive", "alpha": ALPHA, **_budget(per_variant, campaign)}))


def _budget(per_variant: int | None, campaign: int | None) -> dict[str, int]:
    """The `strategy:` keys of a budget other than the defaults."""
    return {**({} if per_variant is None else {"max_trials_per_variant": per_variant}),
            **({} if campaign is None else {"max_trials": campaign})}


def run_factorial(s: Scenario, pool: Pool, loop: Loop, repeats: int = 2,
                  fractional: bool = False) -> list[Levels] | None:
    """The factorial strategy, on every variant or on a resolution-V fraction (which is the full
    design up to 4 factors), ``repeats`` trials each, every trial in full."""
    strategy = Factorial(s.factors, repeats, fraction(s.factors, 5, s.bad) if fractional else None)
    trials = [pool.trial(levels) for levels in strategy.plan]
    verdict = decide(_seen(s, trials), s.factors, alpha=ALPHA, clean_rate=0.02, cost=COST,
                     known_bad=s.bad, design=strategy.design, failing=failing_for(s.target))
    # the wedging culprits it names too: attribution over its cells, which cover the design
    return _named(verdict)


def _flip(levels: Levels, factor: str, s: Scenario) -> Levels:
    other = s.good[factor] if s.good[factor] != levels[factor] else next(
        lvl for lvl in s.factors[factor] if lvl != levels[factor])
    return {**levels, factor: other}


def _pair(trials: Sequence[TrialEvidence]) -> tuple[int, int]:
    return sum(t.failures for t in trials), sum(t.judged for t in trials)


def run_one_at_a_time(s: Scenario, pool: Pool, loop: Loop, trials: int = 2) -> list[Levels] | None:
    """Flip each factor of known-bad alone; blame those whose flip clears the failure."""
    def counts(levels: Levels) -> tuple[int, int]:
        return _pair(_seen(s, [pool.trial(levels) for _ in range(trials)]))

    bad, good = counts(s.bad), counts(s.good)
    if fisher_greater(*bad, *good) > ALPHA:
        return []
    blamed = {f: s.bad[f] for f in s.factors
              if fisher_greater(*bad, *counts(_flip(s.bad, f, s))) <= ALPHA}
    return [blamed] if blamed else None


class OracleConfig(AdaptiveConfig):
    """The oracle's `strategy:` section: the adaptive one's, plus the planted culprits."""

    kind: Literal["oracle"] = "oracle"  # type: ignore[assignment]
    truth: list[dict[str, str]]  # what fails for the target
    # what causes the other failure (orchestrator/core/strategies/both_failures.py)
    other_truth: list[dict[str, str]] = Field(default_factory=list)


class Oracle(Adaptive):
    """The adaptive strategy told the answer: it reproduces as adaptive does, with the same
    sequential tests and early stops, then takes each planted culprit as found and tests only
    what confirmation tests (the culprit alone on known-good's background, its neighbours) and
    whether another culprit is left. A plug-in strategy kind, registered here: the loop runs
    it as any other."""

    def __init__(self, campaign: Campaign, plan: OracleConfig) -> None:
        assert campaign.known_good is not None and campaign.known_bad is not None
        # the plan's settings as the adaptive kind takes them: at a budget, the same budget
        super().__init__(campaign.level_names(), campaign.known_good, campaign.known_bad,
                         alpha=plan.alpha, clean_rate=plan.clean_rate,
                         min_trials=plan.min_trials, failing=failing_for(plan.target),
                         reproduce_trials=plan.reproduce_trials,
                         max_trials_per_variant=plan.max_trials_per_variant,
                         max_trials=plan.max_trials)
        self.campaign, self.plan = campaign, plan
        self.truth = plan.truth  # the planted culprits of the failure this replay judges

    def judging(self, failing: Failing) -> Oracle:
        """The oracle of the other failure: told that one's planted culprits."""
        plan = self.plan.model_copy(update={"target": target_of(failing),
                                            "truth": self.plan.other_truth,
                                            "other_truth": self.plan.truth})
        return Oracle(self.campaign, plan).meeting(list(self.skipped.values()))

    def _culprit_in(self, run: Any, bad: dict[str, str]
                    ) -> tuple[dict[str, str], list[str], bool]:
        # the planted culprit still whole in ``bad``, with its levels another culprit may not
        # share (to break it by); confirmation then tests it as adaptive's own finds are
        for culprit in self.truth:
            if all(bad[f] == level for f, level in culprit.items()):
                others = [c for c in self.truth if c is not culprit]
                return dict(culprit), [f for f in culprit if not any(
                    c.get(f) == culprit[f] for c in others)], len(self.truth) > 1
        return {}, [], False

    def _completed(self, spare: Sequence[str], several: bool) -> bool:
        return False  # told the culprit: nothing was completed (its spare levels break it)


register(OracleConfig, Oracle)


def run_oracle(s: Scenario, pool: Pool, loop: Loop, per_variant: int | None = None,
               campaign: int | None = None) -> list[Levels] | None:
    wedges = s.planted_wedges
    truth, other = ([c for c in s.culprits if c not in wedges], wedges) \
        if s.target == "corruption" else (wedges, [c for c in s.culprits if c not in wedges])
    return _named(loop({"kind": "oracle", "alpha": ALPHA, "truth": truth,
                        "other_truth": other, **_budget(per_variant, campaign)}))


CONTENDERS: dict[str, Contender] = {
    "adaptive": run_adaptive,
    "fractional factorial x2": lambda s, pool, loop: run_factorial(s, pool, loop,
                                                                  fractional=True),
    "factorial x2 (baseline)": run_factorial,
    "one-at-a-time x2 (baseline)": run_one_at_a_time,
    # the same with 4 trials per variant: what one-at-a-time costs to get closer to right
    "one-at-a-time x4": lambda s, pool, loop: run_one_at_a_time(s, pool, loop, trials=4),
    "oracle": run_oracle,
}
# Run only when named (``--only``): what a larger budget buys where the default falls short
BUDGETS: dict[str, Contender] = {
    "adaptive-12": lambda s, pool, loop: run_adaptive(s, pool, loop, per_variant=12),
    "adaptive-24": lambda s, pool, loop: run_adaptive(s, pool, loop, per_variant=24),
    # and a campaign's budget four times the default (120 trials)
    "adaptive-12-480": lambda s, pool, loop: run_adaptive(s, pool, loop, per_variant=12,
                                                          campaign=480),
    "adaptive-24-480": lambda s, pool, loop: run_adaptive(s, pool, loop, per_variant=24,
                                                          campaign=480),
    # the oracle at that budget: what the adaptive one's cost is compared with there
    "oracle-24-480": lambda s, pool, loop: run_oracle(s, pool, loop, per_variant=24,
                                                      campaign=480),
}
