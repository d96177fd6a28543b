"""Stored `optimize` campaigns for the report tests: the real search loop (driver, Optuna
study in memory, confirmation) on bench/knob_space.py's simulated pools, whose fastest
configurations are corrupt (HiCache on above 96 running requests).

- ``optimum``: two objectives (output throughput, p99 TTFT), a corruption limit of 5%: a
  confirmed Pareto front, a fast configuration rejected, many unproven.
- ``undecided``: a 0.5% limit and four search trials: no configuration can be proven safe
  (0 of 360 sessions, its most, bounds the rate at 0.8%), so the search names none.

Use: ``from tests.support.optimize_campaigns import optimize_campaigns_fixture  # noqa: F401``
in a test module, then a test takes ``optimize_campaigns: OptimizeCampaigns``. They are run
once per test session (``_RUN``), however many modules take them (seconds each).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest

from bench.knob_space import KnobPools, knob_campaign
from db.store import Store
from orchestrator.executor.driver import drive
from orchestrator.search.study import OptunaSearch
from tests.support.scratch import in_memory

TWO_OBJECTIVES = ["output_throughput", "ttft_p99_ms"]


@dataclass(frozen=True)
class OptimizeCampaigns:
    db_path: Path
    optimum: str  # campaign ids
    undecided: str
    # their Optuna studies, in memory: the reports read the store alone, and the study's
    # SQLite file is test_optimize_search's (its stored search)
    studies: Mapping[str, optuna.Study]

    @property
    def store_arg(self) -> str:
        return str(self.db_path)


_RUN: list[OptimizeCampaigns] = []  # the campaigns, once run
_SCRATCH = ExitStack()  # their directory in memory (tests/support/scratch.py), for the session


@pytest.fixture(scope="session", name="optimize_campaigns")
def optimize_campaigns_fixture() -> Iterator[OptimizeCampaigns]:
    if not _RUN:
        _RUN.append(_run(_SCRATCH.enter_context(in_memory())))
    yield _RUN[0]
    _SCRATCH.close()  # at the session's end: every module's instance ends then


def _run(directory: Path) -> OptimizeCampaigns:
    db_path = directory / "bisect.db"
    studies: dict[str, optuna.Study] = {}
    with Store.open(str(db_path)) as store:
        for campaign_id, strategy in (
                ("opt-optimum", {"trials": 20, "max_corruption": 0.05,
                                 "objectives": TWO_OBJECTIVES}),
                ("opt-undecided", {"trials": 4, "max_corruption": 0.005})):
            campaign = knob_campaign(strategy)
            store.create_campaign(campaign_id, campaign.name, campaign.model_dump(mode="json"),
                                  "bench")
            search = OptunaSearch(campaign, campaign_id, None)
            drive(store, campaign_id, campaign, KnobPools(1), search=search)
            studies[campaign_id] = search.study
    return OptimizeCampaigns(db_path, "opt-optimum", "opt-undecided", studies)
