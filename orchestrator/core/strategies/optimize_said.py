"""What an ``optimize`` conclusion says: its reason in a sentence, and the verdict's
``optimize`` section (the ranking, the rejected, the trials by phase, the answer against
production). Pure: values in, words and plain dicts out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from experiments.optimize_config import OptimizeConfig
from orchestrator.core.evidence import Levels, TrialEvidence, variant_key
from orchestrator.core.strategies.base import Unresolvable
from orchestrator.core.strategies.optimize_rank import Candidate, pareto
from orchestrator.core.strategies.optimize_versus import VersusProduction
from orchestrator.core.trail import variant_words

if TYPE_CHECKING:
    from orchestrator.core.strategies.optimize import Standing


def trials(count: int) -> str:
    return f"{count} trial{'s' * (count != 1)}"


def reason(best: Candidate, against: VersusProduction | None) -> str:
    """The conclusion's reason: the best safe configuration, or, when it is not shown better
    than production, that it is no better than production."""
    shown = ", ".join(f"{e.metric} {e.mean:.4g}" for e in best.objectives if e.mean is not None)
    named = f"{best.key} ({shown}; {trials(best.trials)})"
    if against is None or against.production is None:
        return f"best safe configuration: {named}"
    if against.is_production:
        return f"production is the best safe configuration: {named}"
    first = against.objectives[0]
    if against.paired:
        test = (f"{len(against.pairs)} of {against.wanted} pairs of the final phase"
                if first.p_value is None else
                f"one-sided paired t p={first.p_value:.2g}, {len(against.pairs)} pairs")
    else:
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


@dataclass(frozen=True)
class SearchStep:
    """One trial of a search in the trail: what it measured, and where its configuration
    stood after it (safe, unproven, unsafe) and which one led."""

    phase: str  # seed, search, re-run or final
    levels: Mapping[str, str]
    trial: int  # its sequence number
    objective: str
    value: float | None  # of the first objective (None: no figure was measured)
    corrupted: int
    sessions: int
    trials: int  # of its configuration, so far
    standing: str
    leader: str | None  # the best safe configuration's key, so far

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "levels": dict(self.levels), "trial": self.trial,
                "objective": self.objective, "value": self.value, "corrupted": self.corrupted,
                "sessions": self.sessions, "trials": self.trials, "standing": self.standing,
                "leader": self.leader}

    def line(self) -> str:
        value = "–" if self.value is None else f"{self.value:.4g}"
        lead = f"  leader {self.leader}" if self.leader else ""
        return (f"trial {self.trial:<4} {self.phase:<7} {self.objective} {value:<9} "
                f"{self.corrupted}/{self.sessions} corrupt  {self.standing} after "
                f"{self.trials} trial(s)  {variant_words(self.levels)}{lead}")


@dataclass(frozen=True)
class SearchFinding:
    """What a search found: where its configurations stand on the run's trials, and the
    answer against production; said (``to_json``) as the verdict's ``optimize`` section."""

    plan: OptimizeConfig
    seeded: tuple[Levels, ...]
    standing: Standing
    done: tuple[TrialEvidence, ...]
    unresolvable: tuple[Unresolvable, ...]
    trail: tuple[SearchStep, ...]
    against: VersusProduction | None = None
    kind: ClassVar[str] = "optimize"

    def to_json(self) -> dict[str, Any]:
        """The verdict's ``optimize`` section."""
        plan, standing, done, trail = self.plan, self.standing, self.done, self.trail
        unresolvable, against = self.unresolvable, self.against
        every, safe, named = standing.every, standing.safe, standing.named
        front = {c.key for c in pareto(named)} if len(plan.objectives) > 1 else set()
        fastest = sorted(every, key=lambda c: c.score(), reverse=True)
        unsafe = [c for c in fastest if not c.plausible]
        unproven = [c for c in fastest if c.plausible and not c.safe]
        seeds = {variant_key(s) for s in self.seeded}
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
                              "error": u.error, "why": u.why()} for u in unresolvable],
            # the search's picks and the seeds, the re-runs of configurations measured, and the
            # final phase's pairs of production and the answer
            "trials": {"total": len(done),
                       "search": sum(1 for step in trail
                                     if step.phase not in ("re-run", "final")),
                       "confirmation": sum(1 for step in trail if step.phase == "re-run"),
                       "final": sum(1 for step in trail if step.phase == "final"),
                       "stopped_early": sum(t.stopped_early for t in done)},
            "production": dict(plan.production) if plan.production else None,
            # the answer against production (or known-good) measured in this run: a one-sided
            # paired t-test on the final phase's pairs (Welch on all trials where production
            # was shown unsafe); None: nothing named, or no production
            "versus_production": None if against is None else against.to_json(),
        }
