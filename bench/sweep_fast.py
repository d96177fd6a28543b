"""What the sweep benchmark (bench/sweeps.py) patches into the sweep strategy, and why.

``fast_comparisons``: the same answers, sooner. The strategy compares every prefix of a
variant's trials again at each proposal, and the exact test of SAME on session counts builds a
table per pair of sample sizes where the current side looks worse by the margin or more (it
searches without one elsewhere, issue 27), cached 32 at a time where a benchmark meets
hundreds. The comparisons and the trials' tail of SAME are pure functions of their arguments,
so they are memoised here and the table cache is unbounded: no answer changes
(tests/test_bench_sweeps.py replays runs both ways).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

import orchestrator.core.stats.noninferiority as noninferiority
import orchestrator.core.strategies.sweep_compare as sweep
from orchestrator.core.stats.regression import (
    NOISE_FLOOR,
    Comparison,
    compare_counts,
    compare_values,
)


def _values_of_tuples(metric: str, current: tuple[float, ...], baseline: tuple[float, ...],
                      min_relative: float, alpha: float, worse: Literal["lower", "higher"],
                      noise_floor: float, paired: bool, detect: float | None,
                      alpha_worse: float | None, alpha_same: float | None,
                      same: bool) -> Comparison:
    return compare_values(metric, current, baseline, min_relative=min_relative, alpha=alpha,
                          worse=worse, noise_floor=noise_floor, paired=paired, detect=detect,
                          alpha_worse=alpha_worse, alpha_same=alpha_same, same=same)


# One memo per process, kept from one run to the next: the counts of a run repeat another's.
_COUNTS = functools.lru_cache(maxsize=None)(compare_counts)
_VALUES = functools.lru_cache(maxsize=1 << 16)(_values_of_tuples)
_STATISTIC = functools.lru_cache(maxsize=512)(noninferiority._statistic.__wrapped__)
_TAIL = functools.lru_cache(maxsize=1 << 16)(sweep._tail)
Pair = tuple[tuple[int, int], tuple[int, int]]


def _pair(counts: Pair | None) -> Pair | None:
    """A hashable copy (the strategy may pass lists)."""
    return None if counts is None else (
        (counts[0][0], counts[0][1]), (counts[1][0], counts[1][1]))


def memo_counts(metric: str, current: tuple[int, int], baseline: tuple[int, int], *,
                min_effect: float, alpha: float, detect: float | None = None,
                effective: Pair | None = None, p_same_trials: float | None = None,
                alpha_worse: float | None = None, alpha_same: float | None = None,
                same: bool = True) -> Comparison:
    return _COUNTS(metric, tuple(current), tuple(baseline), min_effect=min_effect, alpha=alpha,
                   detect=detect, effective=_pair(effective), p_same_trials=p_same_trials,
                   alpha_worse=alpha_worse, alpha_same=alpha_same, same=same)


def memo_values(metric: str, current: Sequence[float], baseline: Sequence[float], *,
                min_relative: float, alpha: float, worse: Literal["lower", "higher"],
                noise_floor: float = NOISE_FLOOR, paired: bool = False,
                detect: float | None = None, alpha_worse: float | None = None,
                alpha_same: float | None = None, same: bool = True) -> Comparison:
    return _VALUES(metric, tuple(current), tuple(baseline), min_relative, alpha, worse,
                   noise_floor, paired, detect, alpha_worse, alpha_same, same)


@contextmanager
def fast_comparisons() -> Iterator[None]:
    before = (sweep.compare_counts, sweep.compare_values, sweep._tail,
              noninferiority._statistic)
    sweep.compare_counts, sweep.compare_values, sweep._tail = memo_counts, memo_values, _TAIL
    noninferiority._statistic = _STATISTIC
    try:
        yield
    finally:
        (sweep.compare_counts, sweep.compare_values, sweep._tail,
         noninferiority._statistic) = before
