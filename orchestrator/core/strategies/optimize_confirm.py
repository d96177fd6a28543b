"""The confirmation of ``optimize`` (phase 3 of optimize.py): which configurations run again.

A learning sampler's leader is re-run as the search goes (``leader_again``); after the budget,
the best candidates are re-run until each is proven safe on ``confirm_trials`` trials, the next
one moving up where one falls (``reruns_wanted``). Production runs again beside the leader's re-runs
until it has ``confirm_trials`` trials and a trial on a pool of the leader's, each of its
re-runs on one pool with a trial of the leader, one after the other there (``Beside``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from experiments.optimize_config import OptimizeConfig
from orchestrator.core.evidence import Levels, TrialEvidence, variant_key
from orchestrator.core.pairs import Beside, fresh_pairs
from orchestrator.core.strategies.base import Unresolvable
from orchestrator.core.strategies.optimize_rank import Candidate, candidates, ranked

# Confirmation re-runs may promote the next candidate when one falls; this many rounds of the
# top at most, so a ranking that keeps flipping still ends.
CONFIRM_ROUNDS = 2


def leader_again(done: Sequence[TrialEvidence], pending: Sequence[Levels],
                 plan: OptimizeConfig) -> list[dict[str, str]]:
    """The best plausible candidate, once more, while it is not yet settled and none of its
    trials runs: a fast configuration is proven (or shown unsafe) as soon as it leads,
    not after the whole budget (bench/optimize.py: the answer is named sooner). Random and
    grid search keep their own order: they are the baselines a search is measured by."""
    plausible = ranked([c for c in candidates(done, plan) if c.plausible])
    if not plausible:
        return []
    best = plausible[0]
    settled = best.safe and best.trials >= plan.confirm_trials
    running = any(variant_key(levels) == best.key for levels in pending)
    # one that its trials cannot settle (a rate just under the limit) leaves the budget
    # to the sampler after this many
    spent = best.trials >= plan.confirm_trials * CONFIRM_ROUNDS
    return [] if settled or running or spent else [dict(best.levels)]


def reruns_wanted(done: Sequence[TrialEvidence], pending: Sequence[Levels], beyond: int,
                  plan: OptimizeConfig, production: Levels | None,
                  unresolvable: Sequence[Unresolvable]) -> list[dict[str, str]]:
    """One more trial of each of the best plausible candidates not yet settled (proven
    safe on ``confirm_trials`` trials), while the confirmation budget lasts (``beyond``: the
    trials started past the search's budget). A candidate its re-runs show unsafe drops out,
    and the next one moves up."""
    if beyond >= plan.confirm_top * plan.confirm_trials * CONFIRM_ROUNDS:
        return []
    running = Counter(variant_key(levels) for levels in pending)
    most = plan.confirm_trials * CONFIRM_ROUNDS  # trials of one candidate, at most
    every = candidates(done, plan)
    top = ranked([c for c in every if c.plausible])[:plan.confirm_top]
    wanted = []
    for best in top:
        settled = best.safe and best.trials >= plan.confirm_trials
        if not settled and not running[best.key] and best.trials < most:
            wanted.append(dict(best.levels))
    # production beside the leader, in the confirmation's hours, until it has as many
    # trials as a confirmed answer (measured once at the start, the answer could not be
    # tested against it at all) and a trial on a pool of the leader's (else nothing links
    # their pools, and a pool's speed would rank them: optimize_pools.py)
    if top and production is not None and top[0].key != variant_key(production):
        key = variant_key(production)
        measured = next((c for c in every if c.key == key), None)
        asked = any(variant_key(levels) == key for levels in wanted)  # as a candidate
        short = measured is not None and (
            measured.trials < plan.confirm_trials or bool(_apart(done, key, top[0].key))
        ) and not running[key] and key not in {variant_key(u.levels) for u in unresolvable}
        if measured is not None and (asked or short):
            others = [levels for levels in wanted if variant_key(levels) != key]
            return _beside_leader(others, production, measured, top[0], done, running)
    return wanted


def _beside_leader(wanted: list[dict[str, str]], production: Levels, measured: Candidate,
                   leader: Candidate, done: Sequence[TrialEvidence],
                   running: Counter[str]) -> list[dict[str, str]]:
    """``wanted`` with production's re-run beside the leader's trial, on one pool, one after
    the other there (``Beside``): with several pools, production's own pool would
    otherwise stand between the two (tests/test_optimize_pools.py). The leader re-run now:
    a fresh pair, the side with fewer trials first (with one pool they then alternate);
    the leader settled: production next on the pool of the leader's last trial; one of
    the leader's trials running: production waits for it to end."""
    if running[leader.key]:
        return wanted
    again = [index for index, levels in enumerate(wanted) if variant_key(levels) == leader.key]
    if again:
        first, second = ((production, wanted[again[0]]) if measured.trials < leader.trials
                         else (wanted[again[0]], production))
        wanted[again[0]:again[0] + 1] = fresh_pairs([first], [second])
        return wanted
    # next on the pool of the leader's last trial, or of its last on a pool production
    # never ran on
    last = max(_apart(done, measured.key, leader.key)
               or [t for t in done if variant_key(t.levels) == leader.key],
               key=lambda t: t.seq)
    return [Beside(production, last.seq), *wanted]


def _apart(done: Sequence[TrialEvidence], production: str, leader: str) -> list[TrialEvidence]:
    """The leader's trials on pools where production never ran."""
    ran = {t.pool for t in done if variant_key(t.levels) == production}
    return [t for t in done if variant_key(t.levels) == leader and t.pool not in ran]
