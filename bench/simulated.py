"""The strategies on the real campaign loop: a scenario's simulated pool as an ``Executor``.

``run_strategy`` stores a campaign built from the scenario (its factors, known-good and
known-bad, the strategy's section, the real-world cost), then runs the driver's own loop
(``orchestrator.executor.driver.drive``) on it: the loop asks the registered strategy, gives
each trial its stop rule, stores every session, and the verdict is recomputed from the store
as `bisect verdict` does. Only the pools are simulated (bench/scenarios.py draws the sessions,
each trial with its pool's offset and clock of the noise between trials, bench/noise.py).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from bench.scenarios import COST, ROUNDS, SESSIONS, Pool, Scenario
from db.records import SessionRow, TrialTiming
from db.store import Store
from experiments.campaign import Campaign
from orchestrator.core.verdict import Verdict
from orchestrator.executor.base import TrialOrder, TrialReport
from orchestrator.executor.driver import drive
from orchestrator.stored import verdict_of


class SimulatedPools:
    """The ``Executor`` of simulated pools that share one scenario's draws. A trial runs when
    its report is asked for, in the order trials were submitted: the draws come in the order the
    driver reads them, and with one pool each trial is decided after every earlier one. Its
    report has no performance figures (nothing is timed)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.orders: deque[tuple[str, TrialOrder]] = deque()

    @property
    def busy(self) -> set[str]:
        return {name for name, _ in self.orders}

    def submit(self, pool: str, order: TrialOrder) -> None:
        assert pool not in self.busy, f"{pool} runs a trial already"
        self.orders.append((pool, order))

    def next_report(self) -> tuple[str, TrialReport]:
        name, order = self.orders.popleft()
        seen = self.pool.trial(order.levels, order.stop_rule, order.failing, pool=name)
        outcomes = [outcome for outcome, n in sorted(seen.counts.items()) for _ in range(n)]
        sessions = [SessionRow(idx, f"s{idx}", outcome, ROUNDS, None, None, 0.0)
                    for idx, outcome in enumerate(outcomes)]
        timing = TrialTiming(wall_s=0.0, restart_s=COST.restart_s, workload_s=seen.workload_s,
                             restarts=seen.restarts, stopped_early=seen.stopped_early)
        return name, TrialReport(order.trial_id, None, timing, sessions)

    def shutdown(self) -> None:
        self.orders.clear()


def scenario_campaign(scenario: Scenario, strategy: dict[str, Any], pools: int = 1) -> Campaign:
    """The scenario as a campaign file would say it: each level an env value (the simulated
    pools read only the names), ``pools`` pools, the seed investigation's real-world cost."""
    return Campaign.model_validate({
        "name": f"bench: {scenario.name}",
        "nodes": [{"name": "local", "transport": "local", "workdir": "/nonexistent"}],
        "pools": [{"name": f"pool-{index}", "endpoint": "http://127.0.0.1:9", "services": [{
            "name": f"server-{index}", "node": "local", "start": ["true"],
            "health_url": "http://127.0.0.1:9/health"}]} for index in range(1, pools + 1)],
        "factors": [{"name": name, "levels": {level: {"env": {name.upper(): level}}
                                                for level in levels}}
                    for name, levels in scenario.factors.items()],
        "workload": {"sessions": SESSIONS, "rounds": ROUNDS, "seed": 1},
        "strategy": {"target": scenario.target, **strategy},
        "cost": {"restart_s": COST.restart_s, "workload_s": COST.workload_s, "gpus": COST.gpus},
        "known_good": scenario.good,
        "known_bad": scenario.bad,
    })


def run_strategy(store: Store, campaign_id: str, scenario: Scenario, strategy: dict[str, Any],
                 pool: Pool, pools: int = 1) -> Verdict:
    """One campaign of ``strategy`` on ``pools`` simulated pools drawing from ``pool``, through
    the real loop, to its stored verdict."""
    campaign = scenario_campaign(scenario, strategy, pools)
    store.create_campaign(campaign_id, campaign.name, campaign.model_dump(mode="json"), "bench")
    drive(store, campaign_id, campaign, SimulatedPools(pool))
    return verdict_of(store, campaign_id)
