"""A campaign `inconclusive` at its budget runs on from its stored trials once the budget is
raised (`bisect resume --max-trials`): the real driver loop on simulated pools, a SQLite store."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from bench.noise import IID
from bench.scenarios import scenarios
from bench.simulated import SimulatedPools, scenario_campaign
from db.store import Store
from experiments.campaign import CampaignError
from orchestrator.budgets import budget_spent, raise_budget
from orchestrator.core.strategies.base import Unresolvable
from orchestrator.executor.driver import drive
from orchestrator.stored import campaign_of, verdict_of

pytestmark = pytest.mark.pure

SINGLE = next(s for s in scenarios() if s.name == "single factor, 6%")


def _stored(tmp_path: Path, strategy: dict[str, object]) -> tuple[Store, str]:
    store = Store.open(str(tmp_path / "bisect.db"))
    campaign = scenario_campaign(SINGLE, strategy)
    store.create_campaign("c", campaign.name, campaign.model_dump(mode="json"), "test")
    return store, "c"


def test_a_search_stopped_at_its_budget_runs_on_from_its_trials_once_it_is_raised(
        tmp_path: Path) -> None:
    store, campaign_id = _stored(tmp_path, {"kind": "adaptive", "max_trials": 6})
    pools = SimulatedPools(SINGLE.pool(3, IID))
    drive(store, campaign_id, campaign_of(store, campaign_id), pools)
    stopped = verdict_of(store, campaign_id)
    # the reason says where it stopped: the test left open and the variant it needed
    assert (stopped.status.value, stopped.reason) == ("inconclusive", (
        "trial budget of 6 spent; still open: flip f2 (f0=b,f1=b,f2=a,f3=b: no trial yet)"))
    assert budget_spent(stopped, campaign_id, store) == "--max-trials 12"
    first = [(t.levels, t.counts) for t in stopped.trials]

    raised = raise_budget(store, campaign_id, {"max_trials": 120})
    assert [r.said() for r in raised] == ["strategy.max_trials: 6 -> 120"]
    drive(store, campaign_id, campaign_of(store, campaign_id), pools)
    verdict = verdict_of(store, campaign_id)
    assert verdict.status.value == "culprit", verdict.reason
    assert [dict(c.factors) for c in verdict.culprits] == SINGLE.culprits
    assert [(t.levels, t.counts) for t in verdict.trials[:6]] == first  # none run again
    assert len(verdict.trials) > 6
    assert budget_spent(verdict, campaign_id, store) is None


@pytest.mark.parametrize(("strategy", "wanted", "said"), [
    ({"kind": "adaptive", "max_trials": 40}, {"max_trials": 20},
     "--max-trials 20 is below the campaign's 40 (`strategy.max_trials`): a budget can only be "
     "raised"),
    ({"kind": "adaptive"}, {"max_trials": 200, "max_trials_per_variant": 3},
     "--max-trials-per-variant 3 is below the campaign's 6"),
    ({"kind": "factorial"}, {"max_trials": 200},
     "--max-trials: the factorial strategy of campaign c has no `strategy.max_trials` to raise"),
    ({"kind": "adaptive"}, {"max_trials": 1_000_000},
     "--max-trials 1000000: input should be less than or equal to 100000 (`strategy.max_trials`)"),
])
def test_a_budget_that_cannot_be_raised_is_bad_input_and_changes_nothing(
        tmp_path: Path, strategy: dict[str, object], wanted: dict[str, int], said: str) -> None:
    store, campaign_id = _stored(tmp_path, strategy)
    before = store.get_campaign(campaign_id).spec
    with pytest.raises(CampaignError, match=re.escape(said)):
        raise_budget(store, campaign_id, wanted)
    assert store.get_campaign(campaign_id).spec == before
    assert raise_budget(store, campaign_id, {}) == []  # nothing asked: nothing stored


def test_a_variant_s_budget_is_offered_only_where_no_variant_stopped_the_search(
        tmp_path: Path) -> None:
    store, campaign_id = _stored(tmp_path, {"kind": "adaptive", "max_trials_per_variant": 1,
                                            "reproduce_trials": 1})
    drive(store, campaign_id, campaign_of(store, campaign_id),
          SimulatedPools(SINGLE.pool(0, IID)))
    stopped = verdict_of(store, campaign_id)
    # a neighbour undecided at its budget of one trial (the reproduction, which runs on to
    # four times its budget while it leans, is decided by then)
    assert stopped.reason.startswith("cannot confirm f2=b AND f3=b: without f3=b it neither "
                                     "fails nor passes after 1 trials")
    assert budget_spent(stopped, campaign_id, store) == "--max-trials-per-variant 2"
    # a variant that could not be judged may be what stopped it: more trials would not help
    skipped = Unresolvable({"f0": "a"}, attempts=2, error="the probe exited 125")
    assert budget_spent(dataclasses.replace(stopped, unresolvable=(skipped,)), campaign_id,
                        store) is None
