"""The search settings of the `optimize` tests on bench/knob_space.py; ``Slow``: the knob
space's pools with each trial a little slower, so that a driver can be killed mid-search (the
killed driver runs in a child process, which imports them from here); ``memory_search``: a
search's study in memory."""

from __future__ import annotations

import time
from typing import Any

from bench.knob_space import KnobPools, knob_campaign
from orchestrator.executor.base import TrialReport
from orchestrator.search.study import OptunaSearch

# 24 trials: on the pools of seeds 1 to 5 the search names the best safe configuration in 5 of
# 5, and its interval holds the true best in 4 (seed 2, test_optimize_search's, among them; 40
# trials: 5 of 5, twice as long); at 20 it names another in all 5
SEARCH = {"trials": 24, "max_corruption": 0.05, "seed": 1}
# What the tests of the search's parts run: the trade-off found or not, a shorter search
SHORT = {**SEARCH, "trials": 14, "confirm_top": 2}


class Slow(KnobPools):
    def next_report(self) -> tuple[str, TrialReport]:
        time.sleep(0.15)
        return super().next_report()


def memory_search(strategy: dict[str, Any], campaign_id: str = "knobs") -> OptunaSearch:
    """The study of ``run_search(..., strategy, search=...)`` in memory, for the tests that are
    not about where a study is kept (test_optimize_search's stored search is): a search of 24
    trials spends three quarters of its CPU in the SQLite study's commits and rereads."""
    return OptunaSearch(knob_campaign(strategy), campaign_id, None)
