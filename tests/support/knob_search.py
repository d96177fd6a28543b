"""The search settings of the `optimize` tests on bench/knob_space.py, and ``Slow``: the knob
space's pools with each trial a little slower, so that a driver can be killed mid-search (the
killed driver runs in a child process, which imports them from here)."""

from __future__ import annotations

import time

from bench.knob_space import KnobPools
from orchestrator.executor.base import TrialReport

SEARCH = {"trials": 40, "max_corruption": 0.05, "seed": 1}
# What the tests of the search's parts run: the trade-off found or not, a shorter search
SHORT = {**SEARCH, "trials": 14, "confirm_top": 2}


class Slow(KnobPools):
    def next_report(self) -> tuple[str, TrialReport]:
        time.sleep(0.15)
        return super().next_report()
