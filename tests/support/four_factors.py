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
