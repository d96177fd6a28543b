"""Hand-written evidence for the adaptive strategy's pure tests: four two-level factors, known-good
all ``a``, known-bad all ``b``, trials of 80 sessions."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.core.evidence import TrialEvidence

FACTORS = {f"f{i}": ["a", "b"] for i in range(4)}
GOOD = dict.fromkeys(FACTORS, "a")
BAD = dict.fromkeys(FACTORS, "b")


def trial(levels: Mapping[str, str], corrupt: int) -> TrialEvidence:
    """One full trial of ``levels`` with ``corrupt`` of its 80 sessions leaking."""
    return TrialEvidence(dict(levels), {"ok": 80 - corrupt, "leak": corrupt})


def with_(*factors: str) -> dict[str, str]:
    """Known-good with known-bad's level of ``factors``."""
    return {**GOOD, **dict.fromkeys(factors, "b")}


def flip(factor: str) -> dict[str, str]:
    """Known-bad with known-good's level of ``factor``."""
    return {**BAD, factor: "a"}


def traced(trace: str) -> list[TrialEvidence]:
    """Trials as a benchmark trace lists them, in order: ``bbab:6`` is f0..f3 at b, b, a, b
    with 6 of its 80 sessions leaking; ``bbab:9/9s`` a trial stopped early after 9 sessions,
    9 of them leaking."""
    trials = []
    for item in trace.split():
        name, counts = item.split(":")
        levels = {f"f{i}": level for i, level in enumerate(name)}
        if counts.endswith("s"):
            corrupt, judged = map(int, counts[:-1].split("/"))
            trials.append(TrialEvidence(levels, {"ok": judged - corrupt, "leak": corrupt},
                                        stopped_early=True, planned=80))
        else:
            trials.append(trial(levels, int(counts)))
    return trials
