"""Where a sweep's variant stands (``Judged``), and how it is said: its JSON, its reason
words and its decision trail (`bisect log`). The sweep strategy (sweep.py) decides; this says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from experiments.strategy_config import NamedVariant
from orchestrator.core.stats.clustered import Dispersion
from orchestrator.core.stats.regression import Comparison, Difference, moved, said_change
from orchestrator.core.trail import at_words, p_words, variant_words

BINARY = ("corruption", "wedging")
CONTINUOUS = ("throughput", "p99_latency")
METRICS = (*BINARY, *CONTINUOUS)
# A variant's state as a reader says it (`bisect sweep`, the sweep report)
STATES: Mapping[str, str] = {
    "clean": "same as the baseline", "regression": "REGRESSION (confirmed)",
    "unconfirmed": "a difference the fresh trials did not show again",
    "uncontrolled": "performance differs from the baseline's trials of another day, with no "
                    "control beside it (the build did not move): not an alert",
    "inconclusive": "undecided within the budget", "new": "no baseline to compare with",
    "undeployable": "skipped: its trials failed before it was measured",
    "measuring": "unfinished",
    "confirming": "unfinished (confirming)"}


@dataclass(frozen=True)
class Judged:
    """Where one variant stands. ``state``: measuring (more trials needed), clean,
    uncontrolled (settled, but performance differs from another day's trials with no control
    beside it), inconclusive (UNKNOWN at the budget), confirming (a suspect's fresh trials
    running), regression (confirmed), unconfirmed (the fresh trials did not show it again),
    new (no baseline to compare with)."""

    variant: NamedVariant
    state: str
    trials: int  # the trials the detection used (and as many controls, where they run)
    comparisons: tuple[Comparison, ...]
    suspected: tuple[str, ...] = ()  # metrics found DIFFERENT, to confirm
    confirmation: tuple[Comparison, ...] = ()
    confirm_trials: int = 0  # fresh trials of the suspect (and as many controls)
    needed: tuple[dict[str, str], ...] = ()  # the trials it still needs
    controls: int = 0  # fresh trials of the baseline's build beside the detection's
    uncontrolled: tuple[str, ...] = ()  # performance metrics DIFFERENT with no control

    @property
    def regressed(self) -> tuple[str, ...]:
        return tuple(c.metric for c in self.confirmation if c.answer == Difference.DIFFERENT)


def _comparison_json(c: Comparison) -> dict[str, Any]:
    return {"metric": c.metric, "answer": c.answer.value, "baseline": c.baseline,
            "current": c.current, "change": c.change,
            "interval": [x if math.isfinite(x) else None for x in c.interval],  # strict JSON
            "p_worse": c.p_worse, "p_same": c.p_same, "min_effect": c.min_effect,
            "alpha": c.alpha,
            **({"counts": [list(x) for x in c.counts]} if c.counts is not None else {}),
            **({"effective": [list(x) for x in c.effective]} if c.effective is not None
               else {}),
            **({"p_same_trials": c.p_same_trials} if c.p_same_trials is not None else {}),
            **({"alpha_worse": c.alpha_worse} if c.alpha_worse is not None else {}),
            **({"alpha_same": c.alpha_same} if c.alpha_same is not None else {}),
            **({"values": [list(x) for x in c.values]} if c.values is not None else {})}


def judged_json(j: Judged, state: str) -> dict[str, Any]:
    return {"name": j.variant.name, "levels": dict(j.variant.levels), "state": state,
            "trials": j.trials, "comparisons": [_comparison_json(c) for c in j.comparisons],
            "suspected": list(j.suspected), "confirm_trials": j.confirm_trials,
            "confirmation": [_comparison_json(c) for c in j.confirmation],
            "regressed": list(j.regressed), "controls": j.controls,
            "uncontrolled": list(j.uncontrolled)}


def _said(c: Comparison) -> str:
    if c.metric in BINARY:
        return (f"{c.metric} {c.baseline:.1%} -> {c.current:.1%} "
                f"({c.change * 100:+.1f} points)")
    return said_change(c.metric, c.change)  # a drop negative: "throughput -31%"


def drift_words(j: Judged) -> str:
    said = ", ".join(_said(c) for c in j.comparisons if c.metric in j.uncontrolled)
    return f"{j.variant.name}: {said}"


def regression_words(j: Judged) -> str:
    said = ", ".join(_said(c) for c in j.confirmation if c.answer == Difference.DIFFERENT)
    return f"{j.variant.name}: {said}"


_WHAT: Mapping[str, str] = {"corruption": "corrupted sessions", "wedging": "errors and timeouts",
                            "throughput": "output tokens/s", "p99_latency": "p99 e2e latency"}


@dataclass(frozen=True)
class SweepStep:
    """One comparison the run decided on, in the trail: a metric of a variant against its
    reference, at detection (``compare``) or on a suspect's fresh trials (``confirm``)."""

    phase: str
    variant: NamedVariant
    trials: int
    comparison: Comparison

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "variant": self.variant.name,
                "levels": dict(self.variant.levels), "trials": self.trials,
                "what": _WHAT[self.comparison.metric], **_comparison_json(self.comparison)}

    def line(self) -> str:
        c = self.comparison
        return (f"{self.phase:<8} {self.variant.name:<16} {c.metric:<12} {c.answer.value:<10} "
                f"{self.change()}  in {self.trials} trial(s)  "
                f"p(worse)={p_words(c.p_worse)}{at_words(c.level_worse)} "
                f"p(same)={p_words(c.p_same)}{at_words(c.level_same)}  "
                f"{variant_words(self.variant.levels)}")

    def change(self) -> str:
        """The change as a reader says it: rates in points, figures in percent; with the
        change its SAME rules out: the threshold where a variant is compared, 40% of it where a
        suspect's fresh trials confirm it (a suspect is made at 40% of the threshold)."""
        c = self.comparison
        said = "rules out" if self.phase == "confirm" else "threshold"
        if c.metric in BINARY:
            return (f"{c.baseline:.1%} -> {c.current:.1%} "
                    f"({c.change * 100:+.1f} points, {said} +{c.min_effect * 100:g})")
        # signed as the metric moved (a throughput drop negative), its threshold as far the
        # bad way
        return (f"{moved(c.metric, c.change):+.1%} ({said} "
                f"{moved(c.metric, c.min_effect):+.0%})")


def trail(j: Judged) -> list[SweepStep]:
    """The decision trail (`bisect log`): each comparison the run decided on."""
    return [*(SweepStep("compare", j.variant, j.trials, c) for c in j.comparisons),
            *(SweepStep("confirm", j.variant, j.confirm_trials, c) for c in j.confirmation)]


@dataclass(frozen=True)
class SweepFinding:
    """A sweep run's comparisons: each variant against its baseline, in its final state
    (``undeployable`` where its trials failed before it was measured), and the spread between
    trials of each session metric."""

    baseline_run: int | None
    variants: tuple[tuple[Judged, str], ...]  # each variant and its state
    dispersion: Mapping[str, Dispersion]
    kind: ClassVar[str] = "sweep"

    def to_json(self) -> dict[str, Any]:
        return {"baseline_run": self.baseline_run,
                "variants": [judged_json(j, state) for j, state in self.variants],
                "dispersion": {metric: spread.to_json()
                               for metric, spread in self.dispersion.items()}}
