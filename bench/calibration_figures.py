"""The calibration benchmark's figures: a count of a total with its 95% Wilson interval, and
(stated probability, wrong) points binned by what was stated."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from orchestrator.core.stats.proportions import wilson


def share(count: int, total: int, name: str = "wrong") -> dict[str, Any]:
    """``count`` of ``total`` (under ``name``) with its 95% Wilson interval."""
    low, high = wilson(count, total)
    return {"n": total, name: count, "rate": count / total if total else None,
            "wilson95": [low, high]}


def rate(wrong: int, total: int) -> dict[str, Any]:
    """A wrong rate with its 95% Wilson interval."""
    return share(wrong, total)


def in_bin(p: float, low: float, high: float) -> bool:
    return low <= p < high or (high == 1.0 and p == 1.0)


def binned(points: Sequence[tuple[float, bool]], bins: Sequence[tuple[float, float]]
           ) -> list[dict[str, Any]]:
    """For (stated probability, wrong) points: per bin, the wrong rate against the stated one."""
    rows = []
    for low, high in bins:
        inside = [(p, w) for p, w in points if in_bin(p, low, high)]
        rows.append({"bin": [low, high], **rate(sum(w for _, w in inside), len(inside)),
                     "mean_stated": float(np.mean([p for p, _ in inside])) if inside else None})
    return rows
