"""The strategy benchmark's contenders at a larger budget (bench/contenders.py ``BUDGETS``):
each asks the adaptive strategy for its budget, and runs through the real loop to a verdict."""

from __future__ import annotations

from typing import Any

import pytest

from bench.contenders import BUDGETS, Oracle
from bench.noise import IID
from bench.scenarios import ALPHA, scenarios
from bench.simulated import scenario_campaign
from bench.strategies import _seeds
from orchestrator.core.strategies.registry import strategy_for

pytestmark = pytest.mark.pure

NO_CULPRIT = next(s for s in scenarios() if s.name.startswith("no culprit"))


class Asked(Exception):
    pass


@pytest.mark.parametrize(("name", "budget"), [
    ("adaptive-12", {"max_trials_per_variant": 12}),
    ("adaptive-24", {"max_trials_per_variant": 24}),
    ("adaptive-12-480", {"max_trials_per_variant": 12, "max_trials": 480}),
    ("adaptive-24-480", {"max_trials_per_variant": 24, "max_trials": 480}),
])
def test_a_budget_contender_asks_for_its_budget(name: str, budget: dict[str, int]) -> None:
    asked: list[dict[str, Any]] = []

    def loop(strategy: dict[str, Any]) -> Any:
        asked.append(strategy)
        raise Asked

    with pytest.raises(Asked):
        BUDGETS[name](NO_CULPRIT, NO_CULPRIT.pool(0, IID), loop)
    assert asked == [{"kind": "adaptive", "alpha": ALPHA, **budget}]


def test_the_oracle_at_a_budget_asks_for_it_beside_the_truth() -> None:
    asked: list[dict[str, Any]] = []

    def loop(strategy: dict[str, Any]) -> Any:
        asked.append(strategy)
        raise Asked

    with pytest.raises(Asked):
        BUDGETS["oracle-24-480"](NO_CULPRIT, NO_CULPRIT.pool(0, IID), loop)
    assert asked == [{"kind": "oracle", "alpha": ALPHA, "truth": [], "other_truth": [],
                      "max_trials_per_variant": 24, "max_trials": 480}]
    # and runs at it, as the adaptive kind does (it once kept the defaults: 6 and 120)
    oracle = strategy_for(scenario_campaign(NO_CULPRIT, asked[0]))
    assert isinstance(oracle, Oracle)
    assert (oracle.max_trials_per_variant, oracle.max_trials) == (24, 480)


def test_a_budget_contender_runs_to_a_verdict() -> None:
    [row] = _seeds(NO_CULPRIT.name, "adaptive-12", [0], 2, IID)
    assert row["correct"] and not row["accused"] and row["trials"] >= 3
