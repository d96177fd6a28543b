"""The verdict, always recomputed from stored trials (never stored itself)."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from experiments.outcomes import WEDGE_LOG_KINDS
from orchestrator.attribution import Culprit, find_culprits, measure
from orchestrator.evidence import Cell, TrialEvidence, cells, pooled, variant_key
from orchestrator.stats.proportions import wilson
from orchestrator.strategies.adaptive import Outcome, Replay
from orchestrator.strategies.commits import CommitReplay
from orchestrator.strategies.design import Design, effect_name
from orchestrator.strategies.design_effects import estimate_effects

# syzkaller's rule: a trial that is mostly infrastructure errors says nothing about the variant.
MAX_INFRA_SHARE = 2 / 3


class Status(StrEnum):
    CULPRIT = "culprit"
    NO_CULPRIT = "no_culprit"
    INCONCLUSIVE = "inconclusive"
    NOT_REPRODUCED = "not_reproduced"


@dataclass(frozen=True)
class CostModel:
    """Real-world seconds per restart and per workload run, and the GPUs one trial holds."""

    restart_s: float
    workload_s: float
    gpus: int


@dataclass(frozen=True)
class Unresolvable:
    """A variant that could not be deployed (like `git bisect skip`), with the last reason."""

    levels: Mapping[str, str]
    attempts: int
    error: str


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    culprits: tuple[Culprit, ...]
    cells: tuple[Cell, ...]
    trials: tuple[TrialEvidence, ...]
    unjudged_trials: int
    cost: CostModel
    log: tuple[dict[str, Any], ...] = ()  # the decision trail, where the strategy keeps one
    wedge_culprits: tuple[Culprit, ...] = ()  # what makes servers error, hang or time out
    unresolvable: tuple[Unresolvable, ...] = ()
    target: str = "corruption"  # what `culprits` explain: corruption, or wedging
    design: Design | None = None  # a factorial campaign's design: what its runs can tell apart
    commits: Mapping[str, Any] | None = None  # a commit search: first bad commit(s), skips

    def to_json(self) -> dict[str, Any]:
        design = {} if self.design is None else {"design": {
            **self.design.to_json(), "effects": estimate_effects(self.design, self.cells)}}
        commits = {"commits": dict(self.commits)} if self.commits is not None else {}
        return {
            **design,
            **commits,
            "target": self.target,
            "unresolvable": [
                {"levels": dict(u.levels), "attempts": u.attempts, "error": u.error}
                for u in self.unresolvable
            ],
            "status": self.status.value,
            "reason": self.reason,
            "culprits": [_culprit_json(c) for c in self.culprits],
            "wedge_culprits": [_culprit_json(c) for c in self.wedge_culprits],
            "variants": [_cell_json(c) for c in self.cells],
            "cost": self.cost_json(),
            "log": list(self.log),
        }

    def workload_shares(self) -> list[float]:
        """The share of a full workload each trial ran: 1, or less for one stopped early
        (its workload time against the median of the full ones)."""
        full = [t.workload_s for t in self.trials if not t.stopped_early and t.workload_s > 0]
        typical = statistics.median(full) if full else 0.0
        return [
            min(1.0, t.workload_s / typical) if t.stopped_early and typical else 1.0
            for t in self.trials
        ]

    def cost_json(self) -> dict[str, Any]:
        restarts = sum(t.restarts for t in self.trials)
        real_s = sum(self.workload_shares()) * self.cost.workload_s + \
            restarts * self.cost.restart_s
        return {
            "trials": len(self.trials),
            "unjudged_trials": self.unjudged_trials,
            "restarts": restarts,
            "stopped_early": sum(t.stopped_early for t in self.trials),
            "sessions": sum(t.sessions for t in self.trials),
            "wall_s": round(sum(t.wall_s for t in self.trials), 3),
            "gpu_s_equivalent": round(real_s * self.cost.gpus, 1),
        }


def _round(value: float) -> float:
    return round(value, 6)


def _culprit_json(culprit: Culprit) -> dict[str, Any]:
    return {
        "factors": dict(culprit.factors),
        "kind": "interaction" if len(culprit.factors) > 1 else "factor",
        "effect": _round(culprit.effect),
        "ci95": [_round(culprit.ci95[0]), _round(culprit.ci95[1])],
        "p_value": culprit.p_value,
        "trial_p_value": culprit.trial_p_value,
        "rate_with": _round(culprit.rate_in),
        "rate_without": _round(culprit.rate_out),
        "corrupted_with": culprit.corrupted_in,
        "sessions_with": culprit.judged_in,
        "corrupted_without": culprit.corrupted_out,
        "sessions_without": culprit.judged_out,
        "trials_with": culprit.trials_in,
        "trials_without": culprit.trials_out,
    }


def _cell_json(cell: Cell) -> dict[str, Any]:
    low, high = wilson(cell.corrupted, cell.judged)
    return {
        "key": variant_key(cell.levels),
        "levels": dict(cell.levels),
        "sessions": cell.sessions,
        "judged": cell.judged,
        "corrupted": cell.corrupted,
        "infra": cell.infra,
        "rate": _round(cell.rate),
        "ci95": [_round(low), _round(high)],
        "trials": len(cell.trials),
        "stopped_early": sum(t.stopped_early for t in cell.trials),
        "log_events": cell.events(WEDGE_LOG_KINDS),  # wedge signs in the services' logs
    }


def _judged_cells(
    evidence: Sequence[TrialEvidence], factors: Mapping[str, Sequence[str]]
) -> tuple[list[TrialEvidence], list[Cell]]:
    judged = [t for t in evidence if t.sessions and t.infra / t.sessions <= MAX_INFRA_SHARE]
    return judged, variant_cells(judged, factors)


def variant_cells(evidence: Sequence[TrialEvidence],
                  factors: Mapping[str, Sequence[str]]) -> list[Cell]:
    """The trials pooled by variant, in the factors' level order."""
    grouped = cells(t for t in evidence if t.sessions)
    order = {name: [*levels] for name, levels in factors.items()}
    grouped.sort(key=lambda c: [order[f].index(c.levels[f]) for f in order if f in c.levels])
    return grouped


def wedging(
    evidence: Sequence[TrialEvidence], factors: Mapping[str, Sequence[str]], alpha: float
) -> tuple[Culprit, ...]:
    """Culprits for errors and timeouts, on every stored trial (a wedge is never corruption)."""
    cells_ = cells(t.as_wedging() for t in evidence if t.sessions)
    return tuple(find_culprits(cells_, factors, alpha))


_REPLAY_STATUS = {
    Outcome.CULPRIT: Status.CULPRIT,
    Outcome.NOT_REPRODUCED: Status.NOT_REPRODUCED,
    Outcome.INCONCLUSIVE: Status.INCONCLUSIVE,
}


def from_replay(
    replay: Replay,
    evidence: Sequence[TrialEvidence],
    factors: Mapping[str, Sequence[str]],
    cost: CostModel,
    unresolvable: Sequence[Unresolvable] = (),
    alpha: float = 0.01,
) -> Verdict:
    """The adaptive strategy's conclusion, with each culprit measured on every explored cell."""
    judged, grouped = _judged_cells(evidence, factors)
    log = tuple(
        {"phase": s.phase, "levels": dict(s.levels), "answer": s.answer,
         "corrupted": s.corrupted, "sessions": s.judged, "unfinished": s.unfinished,
         "trials": s.trials, "p_fail": s.p_fail, "p_pass": s.p_pass}
        for s in replay.trail
    )
    blocked = {variant_key(u.levels): u for u in unresolvable}
    stuck = [blocked[variant_key(v)] for v in replay.needed if variant_key(v) in blocked]
    if stuck:
        levels = ",".join(f"{f}={lvl}" for f, lvl in stuck[0].levels.items())
        status = Status.INCONCLUSIVE
        reason = f"cannot go on: {levels} could not be deployed: {stuck[0].error.splitlines()[0]}"
    elif replay.outcome is None:
        status, reason = Status.INCONCLUSIVE, "unfinished: `bisect resume` continues it"
    else:
        status, reason = _REPLAY_STATUS[replay.outcome], replay.reason
    # Effects are measured on full trials only: a trial stopped early ends with its corrupt
    # sessions (they finish first), so its rate says "failing", not "how much".
    _, full = _judged_cells([t for t in evidence if not t.stopped_early], factors)
    culprits = tuple(measure(c, full) for c in replay.culprits) if status is Status.CULPRIT \
        else ()
    return Verdict(status, reason, culprits, tuple(grouped), tuple(evidence),
                   len(evidence) - len(judged), cost, log, wedging(evidence, factors, alpha),
                   tuple(unresolvable))


_COMMIT_STATUS = {"culprit": Status.CULPRIT, "not_reproduced": Status.NOT_REPRODUCED,
                  "inconclusive": Status.INCONCLUSIVE}


def from_commit_replay(
    replay: CommitReplay,
    commits: Sequence[str],
    evidence: Sequence[TrialEvidence],
    factors: Mapping[str, Sequence[str]],
    cost: CostModel,
    unresolvable: Sequence[Unresolvable] = (),
    alpha: float = 0.01,
) -> Verdict:
    """The change point as a verdict: the first bad commit, its effect measured as every commit
    from it on against every commit before it. When skipped commits (that cannot be deployed)
    sit right before it, the culprit is that run, ``A^..B`` in git's notation (A through B)."""
    judged, grouped = _judged_cells(evidence, factors)
    status = Status.INCONCLUSIVE if replay.status is None else _COMMIT_STATUS[replay.status]
    reason = replay.reason or "unfinished: `bisect resume` continues it"
    why = {u.levels.get("commit"): u for u in unresolvable}
    if replay.unverifiable in why:
        reason += f": {why[replay.unverifiable].error.splitlines()[0]}"
    culprits: tuple[Culprit, ...] = ()
    if replay.status == "culprit" and replay.first_bad:
        first = commits.index(replay.first_bad[0])
        sides = [dataclasses.replace(t, levels={**t.levels, "commit": "after" if commits.index(
            t.levels["commit"]) >= first else "before"}) for t in judged if not t.stopped_early]
        measured = measure({"commit": "after"}, cells(sides))
        named = replay.first_bad[0] if len(replay.first_bad) == 1 else \
            f"{replay.first_bad[0]}^..{replay.first_bad[-1]}"
        culprits = (dataclasses.replace(measured, factors={"commit": named}),)
    tested = {sha: [t for t in judged if t.levels.get("commit") == sha] for sha in commits}
    log = ({"phase": "skipped" if sha in replay.skipped else "posterior",
            "levels": {"commit": sha}, "answer": f"{p:.4f}",
            "corrupted": sum(t.corrupted for t in tested[sha]),
            "sessions": sum(t.judged for t in tested[sha]), "trials": len(tested[sha]),
            "p_fail": p, "p_pass": 0.0,
            **({"reason": why[sha].error.splitlines()[0]} if sha in why else {})}
           for sha, p in zip(commits, replay.posterior, strict=True)
           if p >= 0.001 or tested[sha] or sha in replay.skipped)
    search = {
        "first_bad": list(replay.first_bad), "posterior": _round(replay.mass),
        "credible90": [replay.credible[0], replay.credible[-1]],
        "skipped": [{"commit": sha, "attempts": why[sha].attempts, "error": why[sha].error}
                    for sha in replay.skipped if sha in why],
    }
    return Verdict(status, reason, culprits, tuple(grouped), tuple(evidence),
                   len(evidence) - len(judged), cost, tuple(log),
                   wedging(evidence, factors, alpha), tuple(unresolvable), commits=search)


def decide(
    evidence: Sequence[TrialEvidence],
    factors: Mapping[str, Sequence[str]],
    *,
    alpha: float,
    clean_rate: float,
    cost: CostModel,
    known_bad: Mapping[str, str] | None = None,
    unresolvable: Sequence[Unresolvable] = (),
    design: Design | None = None,
    failure: str = "corruption",
) -> Verdict:
    """``failure`` names what the evidence's failing sessions are (``wedging`` when errors and
    timeouts were made the failures, ``TrialEvidence.as_wedging``), for the reason given."""
    judged, grouped = _judged_cells(evidence, factors)
    failing = "corrupt" if failure == "corruption" else "wedged (an error or a timeout)"

    def verdict(status: Status, reason: str, culprits: Sequence[Culprit] = ()) -> Verdict:
        return Verdict(status, reason, tuple(culprits), tuple(grouped), tuple(evidence),
                       len(evidence) - len(judged), cost,
                       wedge_culprits=wedging(evidence, factors, alpha),
                       unresolvable=tuple(unresolvable), design=design)

    corrupted, sessions = pooled(grouped)
    if sessions == 0:
        return verdict(Status.INCONCLUSIVE, "no session could be judged")
    culprits = find_culprits(grouped, factors, alpha)
    names = "; ".join(
        " AND ".join(f"{f}={lvl}" for f, lvl in c.factors.items()) for c in culprits
    )
    if culprits and design is not None and design.fractional:
        # A fraction names only what its aliases let it tell apart (at resolution V: main
        # effects and two-factor interactions); a wider conjunction is a lead, not a verdict.
        confused = [pair for c in culprits for pair in design.confusions(c.factors)][:3]
        if confused:
            aliases = ", ".join(f"{effect_name(e)} = {effect_name(a)}" for e, a in confused)
            return verdict(
                Status.INCONCLUSIVE,
                f"{failure} follows {names}, but the design ({design.describe()}) aliases "
                f"it: {aliases}; run `design: full` over these factors (the others held at "
                f"one level) to tell them apart",
            )
        return verdict(Status.CULPRIT, f"{failure} follows {names} (design: "
                                       f"{design.describe()}; {design.clear_effects()} are not "
                                       f"aliased with each other)", culprits)
    if culprits:
        return verdict(Status.CULPRIT, f"{failure} follows {names}", culprits)
    if corrupted == 0 and known_bad is not None:
        return verdict(Status.NOT_REPRODUCED, f"the known-bad variant showed no {failure}")
    upper = wilson(corrupted, sessions)[1]
    if upper <= clean_rate:
        return verdict(
            Status.NO_CULPRIT,
            f"{corrupted} of {sessions} sessions {failing}; upper 95% bound {upper:.2%} "
            f"is within the clean rate {clean_rate:.2%}",
        )
    if corrupted == 0:
        return verdict(
            Status.INCONCLUSIVE,
            f"no {failure} in {sessions} sessions, too few to call the deployment clean (upper "
            f"95% bound {upper:.2%} above the clean rate {clean_rate:.2%}): run more trials",
        )
    return verdict(
        Status.INCONCLUSIVE,
        f"{corrupted} of {sessions} sessions {failing}, but no factor or interaction explains it "
        f"at alpha {alpha:g}",
    )
