"""A sweep of one variant, production, and its trials as plain values (the sweep strategy's
pure tests)."""

from __future__ import annotations

from experiments.strategy_config import BaselineTrial, NamedVariant, SweepConfig, Thresholds
from orchestrator.core.evidence import Latency, Performance, TrialEvidence

PRODUCTION = NamedVariant(name="production", levels={"hicache": "off"})
WATCH_COUNTS = Thresholds(corruption=0.05, wedging=0.05, throughput=None, p99_latency=None)


def trial(levels: dict[str, str], leaks: int, sessions: int = 80,
          throughput: float | None = None, p99_ms: float = 300) -> TrialEvidence:
    performance = None if throughput is None else Performance(
        wall_s=10, requests=sessions, completed=sessions, output_tokens=1000, good_sessions=0,
        request_throughput=1.0, output_throughput=throughput, goodput=0.0,
        e2e=Latency(100, 200, p99_ms))
    return TrialEvidence(dict(levels), {"ok": sessions - leaks, "leak": leaks},
                         performance=performance)


def plan(baseline: list[BaselineTrial], **changes: object) -> SweepConfig:
    settings: dict[str, object] = {"thresholds": WATCH_COUNTS, **changes}
    return SweepConfig(variants=[PRODUCTION], production="production", baseline=baseline,
                       **settings)  # type: ignore[arg-type]


def clean_baseline(trials: int = 3) -> list[BaselineTrial]:
    return [BaselineTrial(variant="production", counts={"ok": 80}) for _ in range(trials)]


# the current build and the baseline's, where the run can put it back (``confirm_build``)
NOW = {"hicache": "off", "build": "current"}
THEN = {"hicache": "off", "build": "baseline"}
