"""What the sweep benchmark (bench/sweeps.py) patches into the sweep strategy, and why.

``fast_comparisons``: the same answers, sooner. The strategy compares every prefix of a
variant's trials again at each proposal, and the exact test of SAME on session counts builds a
table per pair of sample sizes (cached 32 at a time, where a benchmark meets hundreds). Both
comparisons are pure functions of their arguments, so they are memoised here and the table
cache is unbounded: no answer changes (tests/test_bench_sweeps.py replays runs both ways).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

import orchestrator.core.stats.noninferiority as noninferiority
import orchestrator.core.strategies.sweep as sweep
from orchestrator.core.stats.regression import (
    NOISE_FLOOR,
    Comparison,
    compare_counts,
    compare_values,
)


def _values_of_tuples(metric: str, current: tuple[float, ...], baseline: tuple[float, ...],
                      min_relative: float, alpha: float, worse: Literal["lower", "higher"],
                      noise_floor: float, paired: bool) -> Comparison:
    return compare_values(metric, current, baseline, min_relative=min_relative, alpha=alpha,
                          worse=worse, noise_floor=noise_floor, paired=paired)


# One memo per process, kept from one run to the next: the counts of a run repeat another's.
_COUNTS = functools.lru_cache(maxsize=None)(compare_counts)
_VALUES = functools.lru_cache(maxsize=1 << 16)(_values_of_tuples)
_STATISTIC = functools.lru_cache(maxsize=512)(noninferiority._statistic.__wrapped__)
Pair = tuple[tuple[int, int], tuple[int, int]]


def memo_counts(metric: str, current: tuple[int, int], baseline: tuple[int, int], *,
                min_effect: float, alpha: float, detect: float | None = None,
                effective: Pair | None = None) -> Comparison:
    return _COUNTS(metric, tuple(current), tuple(baseline), min_effect=min_effect, alpha=alpha,
                   detect=detect, effective=None if effective is None else (
                       (effective[0][0], effective[0][1]), (effective[1][0], effective[1][1])))


def memo_values(metric: str, current: Sequence[float], baseline: Sequence[float], *,
                min_relative: float, alpha: float, worse: Literal["lower", "higher"],
                noise_floor: float = NOISE_FLOOR, paired: bool = False) -> Comparison:
    return _VALUES(metric, tuple(current), tuple(baseline), min_relative, alpha, worse,
                   noise_floor, paired)


@contextmanager
def fast_comparisons() -> Iterator[None]:
    before = sweep.compare_counts, sweep.compare_values, noninferiority._statistic
    sweep.compare_counts, sweep.compare_values = memo_counts, memo_values
    noninferiority._statistic = _STATISTIC
    try:
        yield
    finally:
        sweep.compare_counts, sweep.compare_values, noninferiority._statistic = before
