"""Pairs of trials run side by side on one pool, as Pinpoint runs A and B on one device: a
pool's own speed (a faster GPU, a cooler node) is then shared by both trials of a pair and
leaves their comparison, whatever pool each pair ran on.

A strategy asks for a pair with ``Beside``: a proposal to run on the same pool as its mate, right
after it. The driver honours it (orchestrator/executor/placement.py); to every other reader it
is the plain levels. The pairs are found again in the stored trials alone (``pairs_on_pools``),
so a resumed run and a report read the same pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from orchestrator.core.evidence import Levels, TrialEvidence, variant_key


class Beside(dict[str, str]):
    """Levels to run on one pool with ``mate``, right after it: the trial of that number (its
    ``seq``, a trial already run whose partner is missing) or, where None, the proposal just
    before this one in the list (the two are a fresh pair)."""

    def __init__(self, levels: Levels, mate: int | None = None) -> None:
        super().__init__(levels)
        self.mate = mate


def fresh_pairs(firsts: Sequence[Levels], seconds: Sequence[Levels]) -> list[dict[str, str]]:
    """``firsts[i]`` then ``seconds[i]`` beside it, pair after pair; one left over alone."""
    out: list[dict[str, str]] = []
    for index in range(max(len(firsts), len(seconds))):
        pair = [dict(levels) for levels in (*firsts[index:index + 1], *seconds[index:index + 1])]
        out += pair[:1] + [Beside(levels) for levels in pair[1:]]
    return out


def first_units(proposals: Sequence[dict[str, str]], count: int) -> list[dict[str, str]]:
    """The first ``count`` proposals that each take a free pool, with the fresh partners that
    follow them there (a fresh pair takes one pool: cut after its first trial, it would lose
    its second)."""
    out: list[dict[str, str]] = []
    taken = 0
    for levels in proposals:
        partner = isinstance(levels, Beside) and levels.mate is None and bool(out)
        if not partner:
            if taken == count:
                break
            taken += 1
        out.append(levels)
    return out


Pair = tuple[TrialEvidence, TrialEvidence]


def pairs_on_pools(first: Sequence[TrialEvidence], second: Sequence[TrialEvidence]
                   ) -> tuple[list[Pair], list[TrialEvidence]]:
    """The pairs (a trial of ``first``, one of ``second``) that ran on one pool, each pool's in
    the order they ran (its i-th trial of one side with its i-th of the other: with one pool,
    a sweep's pairs as they always were), all in the order each pair ended; and the trials
    still waiting for a partner on their pool, in the order they ran."""
    firsts = {id(trial) for trial in first}

    def walk(ran: Sequence[TrialEvidence]) -> tuple[list[Pair], list[TrialEvidence]]:
        mine = [trial for trial in ran if id(trial) in firsts]
        theirs = [trial for trial in ran if id(trial) not in firsts]
        count = min(len(mine), len(theirs))
        return list(zip(mine[:count], theirs[:count], strict=True)), mine[count:] + theirs[count:]

    return on_each_pool([*first, *second], walk)


def adjacent_on_pools(trials: Sequence[TrialEvidence], first: str, second: str,
                      walk: Callable[[Sequence[TrialEvidence], str, str],
                                     tuple[list[Pair], TrialEvidence | None]]
                      ) -> tuple[list[Pair], list[TrialEvidence]]:
    """``walk`` (the pairs of adjacent trials of variants ``first`` and ``second`` in one
    sequence, and the last one waiting) on each pool's trials apart: the pairs in the order
    each ended, and every pool's trial waiting for its partner."""

    def on_one(ran: Sequence[TrialEvidence]) -> tuple[list[Pair], list[TrialEvidence]]:
        made, waiting = walk(ran, first, second)
        return made, [] if waiting is None else [waiting]

    return on_each_pool(trials, on_one)


def on_each_pool(trials: Sequence[TrialEvidence],
                 walk: Callable[[Sequence[TrialEvidence]],
                                tuple[list[Pair], list[TrialEvidence]]]
                 ) -> tuple[list[Pair], list[TrialEvidence]]:
    """``walk`` (a pool's trials in the order they ran: its pairs and the trials left waiting)
    on each pool's trials apart: all the pairs in the order each ended, and the trials waiting,
    in the order they ran. The one grouping of both ways to pair."""
    pools: dict[str, list[TrialEvidence]] = {}
    for trial in sorted(trials, key=_seq):
        pools.setdefault(trial.pool, []).append(trial)
    pairs: list[Pair] = []
    alone: list[TrialEvidence] = []
    for ran in pools.values():
        made, waiting = walk(ran)
        pairs += made
        alone += waiting
    pairs.sort(key=lambda pair: max(_seq(pair[0]), _seq(pair[1])))
    return pairs, sorted(alone, key=_seq)


def partner_of(trial: TrialEvidence, first: Levels, second: Levels) -> Beside:
    """The trial that completes ``trial``'s pair, on its pool."""
    other = second if variant_key(trial.levels) == variant_key(first) else first
    return Beside(other, trial.seq)


def _seq(trial: TrialEvidence) -> int:
    return trial.seq
