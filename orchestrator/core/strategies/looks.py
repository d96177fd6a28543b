"""How long a sequential test runs, and at which trial counts it may answer: a budget, running
on past it while the test leans, and the looks that share a level between them (alpha
spending, Bonferroni). Shared by the adaptive search (sequential.py, reproduce.py, confirm.py)
and the sweep (sweep_compare.py)."""

from __future__ import annotations

from collections.abc import Sequence

# A test that leans one way at its variant's trial budget (its p short of the level it needs,
# but at most `LEANS_AT`) may run up to `EXTENDED` times the budget. Restarts that land low or
# high make a variant's first trials mislead more often than sessions do; stopping short of a
# level would leave a failing variant UNKNOWN, which a caller then takes as not failing (a
# superset completed around it, a reproduction given up), or a clean one short of its PASS.
LEANS_AT = 0.1
EXTENDED = 2


def leans(p: float | None, level: float) -> bool:
    """Whether a test's ``p`` falls short of its ``level``, but not far (`LEANS_AT`)."""
    return p is not None and level < p <= LEANS_AT


def budget(max_trials: int, *tests: tuple[float | None, float]) -> int:
    """A variant's trials before it is left undecided: ``max_trials``, or `EXTENDED` times it
    where a test's ``(p, level)`` leans."""
    return max_trials * (EXTENDED if any(leans(p, level) for p, level in tests) else 1)


# An adaptive test that leans at its variant's budget runs on (`runs_to`), judged only at the
# budget's doublings (`beyond`), at its level shared over those looks (`at_look`): the level it
# had within the budget is spent as before, and running on adds at most that level once more,
# only to tests that leaned (stopping for futility adds none). A test within the search runs
# on up to `EXTENDED` times the budget (12 trials, one look at its level); those that the
# verdict rests on most, up to `LONG_CAP` times (looks at 12 and 24 trials, each at half the
# level): the reproduction, a neighbour's FAIL that would drop a level confirmation found
# needed, and a test whose answer short of a FAIL is taken as the variant being quiet (no other
# culprit left, a set that does not fail alone: sequential.Tests.test's ``quiet``). Past the
# budget a trial stops early only at its next look's level (sequential.Tests.past_budget).
# At a 1% background, a 6% interaction and restarts that halve or double a rate,
# known-bad shows against known-good in 75% of cases at 6 trials a side, 96% at 12, 100% at 24
# (BENCHMARKS.md), so the reproduction runs on while its p is within `REPRODUCE_LEANS`.
LONG_CAP = 4
REPRODUCE_LEANS = 0.25


def beyond(max_trials: int, cap: int = EXTENDED) -> tuple[int, ...]:
    """The trial counts past the budget where a test that runs on is judged."""
    return tuple(max_trials << k for k in range(1, cap.bit_length()))


def at_look(level: float, trials: int, max_trials: int, cap: int = EXTENDED) -> float | None:
    """The level a test of ``trials`` is judged at: ``level`` within the budget; past it, at a
    look of `beyond`, ``level`` shared over those looks (`spent`); between them None: no
    answer, so that running on cannot peek its way to a FAIL or a PASS. Past the last look (a
    variant other tests ran too) it is judged at the last look's level."""
    if trials <= max_trials:
        return level
    looks_past = beyond(max_trials, cap)
    return spent(level, looks_past) if trials in looks_past or trials > looks_past[-1] \
        else None


def runs_to(max_trials: int, trials: int, *tests: tuple[float | None, float | None],
            cap: int = EXTENDED, within: float = LEANS_AT) -> int:
    """The trials a test may run to: ``max_trials``, or the next look of `beyond` while one of
    its ``(p, level)`` leans: short of its level (None between looks) but ``within``."""
    if trials < max_trials or not any(
            p is not None and (level is None or level < p) and p <= within
            for p, level in tests):
        return max_trials
    return next((n for n in beyond(max_trials, cap) if n > trials), cap * max_trials)


def looks(first: int, max_trials: int) -> tuple[int, ...]:
    """The trial counts a group-sequential test judges at: ``first``, doubling from it, and the
    budget with its extension (``max_trials``, `EXTENDED` times it). A test judged after every
    trial looks ten times or more within a budget, and each look is one more chance for noise
    to cross the level; at these few, fixed looks ``alpha`` can be split between them."""
    last = EXTENDED * max_trials
    doubling = {first << k for k in range(max(0, last).bit_length()) if first << k <= last}
    return tuple(sorted(n for n in doubling | {max_trials, last} if n >= first))


def spent(alpha: float, at: Sequence[int]) -> float:
    """The level of each of the looks ``at``, so that all of them together err at most
    ``alpha`` (Bonferroni: the looks share their trials, so this is on the safe side)."""
    return alpha / max(1, len(at))
