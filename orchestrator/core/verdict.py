"""The verdict, always recomputed from stored trials (never stored itself): a strategy's
conclusion (``Strategy.conclude``) with what every strategy shares: the variants' cells, the
cost, the culprits of wedging (each failure's culprits in their own field) and the variants
that could not be judged (deploys that failed, or the user's probe skipped)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from experiments.outcomes import WEDGE_LOG_KINDS
from orchestrator.core.attribution import Culprit, find_culprits, untold_from
from orchestrator.core.evidence import (
    CORRUPTING,
    MAX_INFRA_SHARE,
    WEDGING,
    Cell,
    Failing,
    TrialEvidence,
    cells,
    judged_trials,
    spread_of,
    target_of,
    variant_key,
)
from orchestrator.core.stats.clustered import Dispersion
from orchestrator.core.stats.proportions import wilson
from orchestrator.core.strategies.base import Conclusion, Status, Unresolvable
from orchestrator.core.trail import Finding, TrailEntry, culprit_words, finding_json

__all__ = ["MAX_INFRA_SHARE", "CostModel", "Status", "Unresolvable", "Verdict", "judged_cells",
           "judged_trials", "shown_cells", "variant_cells", "verdict_from", "wedging"]

# how the wedge culprits of a campaign that did not bisect wedging were found
ATTRIBUTED = "found on the stored trials"


@dataclass(frozen=True)
class CostModel:
    """Real-world seconds per restart and per workload run, and the GPUs one trial holds."""

    restart_s: float
    workload_s: float
    gpus: int


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    culprits: tuple[Culprit, ...]
    cells: tuple[Cell, ...]
    trials: tuple[TrialEvidence, ...]
    unjudged_trials: int
    cost: CostModel
    log: tuple[TrailEntry, ...] = ()  # the decision trail, where the strategy keeps one
    # what makes servers error, hang or time out (a wedging campaign's: its `culprits`)
    wedge_culprits: tuple[Culprit, ...] = ()
    unresolvable: tuple[Unresolvable, ...] = ()
    failing: Failing = CORRUPTING  # what `culprits` explain (the JSON's `target`)
    finding: Finding | None = None  # what the strategy's kind found beyond culprits
    also: Conclusion | None = None  # the other failure, where the strategy bisected it too
    target_reason: str | None = None  # the target's own, where `reason` says `also`'s too
    wedge_reason: str = ATTRIBUTED  # how `wedge_culprits` were found, where attributed

    def failures(self) -> dict[str, dict[str, Any]]:
        """A culprit list per failure, each in its own entry: the target's (`culprits`), and
        the other's where it was bisected (beside the target, or instead of a target known-bad
        did not reproduce) or, for wedging, found on the stored trials by attribution."""
        other = self.also
        by: dict[str, dict[str, Any]] = {target_of(self.failing): {
            "status": self.status.value, "reason": self.target_reason or self.reason,
            "culprits": [_culprit_json(c) for c in self.culprits]}}
        if other is not None:
            by[target_of(other.failing or CORRUPTING)] = {
                "status": other.status.value, "reason": other.reason,
                "culprits": [_culprit_json(c) for c in other.culprits],
                **_finding(other.finding)}
        elif self.failing != WEDGING:
            by["wedging"] = {"status": "attributed", "reason": self.wedge_reason,
                             "culprits": [_culprit_json(c) for c in self.wedge_culprits]}
        return by

    def culprits_of(self) -> dict[str, tuple[Culprit, ...]]:
        """The culprits of each failure that ``failures`` names, as values (the report reads
        which variants and sessions each one pooled)."""
        other = self.also
        by = {target_of(self.failing): self.culprits}
        if other is not None:
            by[target_of(other.failing or CORRUPTING)] = other.culprits
        elif self.failing != WEDGING:
            by["wedging"] = self.wedge_culprits
        return by

    def to_json(self) -> dict[str, Any]:
        failures = self.failures()
        spread = spread_of(self.cells)
        return {
            **_finding(self.finding),
            "target": target_of(self.failing),
            "unresolvable": [
                {"levels": dict(u.levels), "attempts": u.attempts, "error": u.error,
                 "why": u.why()}
                for u in self.unresolvable
            ],
            "status": self.status.value,
            "reason": self.reason,
            # the target's; then each failure's own, whatever the target (never the other's)
            "culprits": failures[target_of(self.failing)]["culprits"],
            "corruption_culprits": failures.get("corruption", {}).get("culprits", []),
            "wedge_culprits": failures.get("wedging", {}).get("culprits", []),
            "failures": failures,
            # the spread of corruption rates between trials of one variant (stats/clustered.py)
            "dispersion": spread.to_json(),
            "variants": [_cell_json(c, spread) for c in self.cells],
            "cost": self.cost_json(),
            "log": [entry.to_json() for entry in self.log],
        }

    def finding_json(self, kind: str) -> dict[str, Any] | None:
        """The finding's JSON where the strategy is of ``kind`` (``"commits"``...), else None."""
        return finding_json(self.finding, kind)

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


def _finding(finding: Finding | None) -> dict[str, Any]:
    return {} if finding is None else {finding.kind: finding.to_json()}


def _round(value: float) -> float:
    return round(value, 6)


def _culprit_json(culprit: Culprit) -> dict[str, Any]:
    return {
        "factors": dict(culprit.factors),
        "kind": "interaction" if len(culprit.factors) > 1 else "factor",
        "effect": _round(culprit.effect),
        "ci95": [_round(culprit.ci95[0]), _round(culprit.ci95[1])],
        "p_value": culprit.p_value,  # sessions counted at their design effects
        "trial_p_value": culprit.trial_p_value,
        "session_p_value": culprit.session_p_value,  # pooled sessions: a description only
        **({"effective": {"with": list(culprit.effective_in),
                          "without": list(culprit.effective_out or (0, 0))}}
           if culprit.effective_in is not None else {}),
        "rate_with": _round(culprit.rate_in),
        "rate_without": _round(culprit.rate_out),
        "corrupted_with": culprit.corrupted_in,
        "sessions_with": culprit.judged_in,
        "corrupted_without": culprit.corrupted_out,
        "sessions_without": culprit.judged_out,
        "trials_with": culprit.trials_in,
        "trials_without": culprit.trials_out,
        **({"own": culprit.own.to_json()} if culprit.own is not None else {}),
    }


def _cell_json(cell: Cell, spread: Dispersion) -> dict[str, Any]:
    # the interval of its trials' evidence: sessions at the variant's design effect
    effective = cell.effective(spread)
    low, high = wilson(*effective)
    return {
        "key": variant_key(cell.levels),
        "levels": dict(cell.levels),
        "sessions": cell.sessions,
        "judged": cell.judged,
        "corrupted": cell.failures,  # as the cells were judged: for corruption (verdict_from)
        "infra": cell.infra,
        "rate": _round(cell.rate),
        "ci95": [_round(low), _round(high)],
        "effective": list(effective),  # (corrupted, judged) as independent sessions
        "trials": len(cell.trials),
        "stopped_early": sum(t.stopped_early for t in cell.trials),
        "log_events": cell.events(WEDGE_LOG_KINDS),  # wedge signs in the services' logs
    }


def judged_cells(
    evidence: Sequence[TrialEvidence], factors: Mapping[str, Sequence[str]]
) -> tuple[list[TrialEvidence], list[Cell]]:
    """The trials that can be judged, and their cells."""
    judged = judged_trials(evidence)
    return judged, variant_cells(judged, factors)


def shown_cells(evidence: Sequence[TrialEvidence],
                factors: Mapping[str, Sequence[str]]) -> list[Cell]:
    """The cells a verdict shows: the trials that can be judged, judged for corruption
    whatever the target (a wedged variant: its errors and timeouts beside 0 corrupted)."""
    return variant_cells([t.judged_as(CORRUPTING) for t in judged_trials(evidence)], factors)


def variant_cells(evidence: Sequence[TrialEvidence],
                  factors: Mapping[str, Sequence[str]]) -> list[Cell]:
    """The trials pooled by variant, in the factors' level order."""
    grouped = cells(t for t in evidence if t.sessions)
    order = {name: [*levels] for name, levels in factors.items()}
    grouped.sort(key=lambda c: [_place(order[f], c.levels[f]) for f in order if f in c.levels])
    return grouped


def _place(levels: Sequence[str], level: str) -> tuple[int, float]:
    """Where a level sorts: a switch's in its declared order, a numeric knob's by value (its
    levels are the values of a range, none declared)."""
    if level in levels:
        return levels.index(level), 0.0
    try:
        return len(levels), float(level)
    except ValueError:
        return len(levels), math.inf


def wedging(
    evidence: Sequence[TrialEvidence], factors: Mapping[str, Sequence[str]], alpha: float
) -> tuple[tuple[Culprit, ...], str]:
    """Culprits for errors and timeouts, on every stored trial (a wedge is never corruption),
    and how they were found. A culprit the trials do not tell apart from other levels (they
    were never apart, or apart only where little was measured) is not named: which of them
    wedges is not told; the reason says which."""
    cells_ = cells(t.judged_as(WEDGING) for t in evidence if t.sessions)
    named, untold = [], []
    for culprit in find_culprits(cells_, factors, alpha):
        alike = untold_from(culprit.factors, cells_, factors, alpha)
        if alike:
            order = list(factors)
            told = sorted([dict(culprit.factors), *alike],
                          key=lambda c: [(order.index(f), level) for f, level in c.items()])
            untold.append(" or ".join(culprit_words(c) for c in told))
        else:
            named.append(culprit)
    if not untold:
        return tuple(named), ATTRIBUTED
    return tuple(named), (f"{ATTRIBUTED}; wedging follows {'; '.join(untold)}, not told apart "
                          "by them")


def verdict_from(
    conclusion: Conclusion,
    evidence: Sequence[TrialEvidence],
    factors: Mapping[str, Sequence[str]],
    cost: CostModel,
    unresolvable: Sequence[Unresolvable] = (),
    alpha: float = 0.01,
    failing: Failing = CORRUPTING,
) -> Verdict:
    """A strategy's conclusion with what every strategy's verdict shows; ``failing``: what the
    evidence was judged against (the campaign's target). The variants are shown judged for
    corruption whatever the target (a wedged variant: its errors and timeouts beside 0
    corrupted). A wedging campaign's culprits are its wedge culprits; a corruption campaign's
    wedge culprits are those it bisected beside its target, or instead of a target known-bad
    did not reproduce (its own `culprits` are then none), else attributed on every trial."""
    failing = conclusion.failing or failing
    judged = judged_trials(evidence)
    shown = shown_cells(evidence, factors)
    also = conclusion.also
    wedge_reason = ATTRIBUTED
    if failing == WEDGING:
        wedge = conclusion.culprits  # the target's culprits are the wedge's
    elif also is not None and (also.failing or CORRUPTING) == WEDGING:
        wedge = also.culprits  # bisected beside the target: confirmed, as the target's are
    else:
        wedge, wedge_reason = wedging(evidence, factors, alpha)
    return Verdict(conclusion.status, conclusion.reason, conclusion.culprits, tuple(shown),
                   tuple(evidence), len(evidence) - len(judged), cost, conclusion.log,
                   wedge, tuple(unresolvable), failing, finding=conclusion.finding, also=also,
                   target_reason=conclusion.target_reason, wedge_reason=wedge_reason)
