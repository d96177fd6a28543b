"""A simulated serving space with a planted trade-off, for `bisect optimize` on the real loop.

Four factors as a real SGLang campaign would declare them: ``max_running`` (16..256 step 16),
``chunk`` (chunked prefill, 1024..8192 step 1024), ``mem`` (mem-fraction-static, 0.70..0.90 step
0.05) and ``hicache`` (off/on). Output throughput grows with running requests until the KV
pool (set by ``mem``) saturates, then falls with queueing; HiCache adds 25%; a chunk far from
4096 costs a little. The trap: with HiCache on, more than 96 running requests corrupt 30% of
sessions, and those are the fastest configurations. The best safe configuration is HiCache on
at 96 running requests, mem 0.90, chunk 4096 (``BEST``, 2,003 tok/s; the best with HiCache off
makes 1,740); every trial's throughput carries a seeded +-5% noise, so one lucky trial can
mislead a search that does not re-run. With ``noise`` (bench/noise.py; IID unless told) a
trial's corruption rate and speed (throughput times it, TTFT divided by it) also carry the
noise between trials: a restart's draw, its pool's offsets, the drift over simulated time.
"""

from __future__ import annotations

import math
import random
from collections import deque
from typing import TYPE_CHECKING, Any

from bench.noise import IID, Fleet, TrialNoise, scaled
from db.records import SessionRow, TrialTiming
from experiments.campaign import Campaign
from orchestrator.executor.base import TrialOrder, TrialReport

if TYPE_CHECKING:  # the strategy imports scipy: not for the space alone
    from orchestrator.core.strategies.optimize import Search

SESSIONS, ROUNDS = 60, 4
BEST = {"max_running": "96", "chunk": "4096", "mem": "0.9", "hicache": "on"}
PRODUCTION = {"max_running": "48", "chunk": "2048", "mem": "0.8", "hicache": "off"}
KNOWN_GOOD = {"max_running": "32", "chunk": "2048", "mem": "0.8", "hicache": "off"}
RESTART_S, WORKLOAD_S, GPUS = 90.0, 485.0, 8  # the seed investigation's real-world cost


def knob_campaign(strategy: dict[str, Any], pools: int = 1) -> Campaign:
    return Campaign.model_validate({
        "name": "bench: knob space",
        "nodes": [{"name": "local", "transport": "local", "workdir": "/nonexistent"}],
        "pools": [{"name": f"pool-{index}", "endpoint": "http://127.0.0.1:9", "services": [{
            "name": f"server-{index}", "node": "local", "start": ["true"],
            "health_url": "http://127.0.0.1:9/health"}]} for index in range(1, pools + 1)],
        "factors": [
            {"name": "max_running", "range": {"min": 16, "max": 256, "step": 16,
                                              "integer": True, "flag": "--max-running-requests"}},
            {"name": "chunk", "range": {"min": 1024, "max": 8192, "step": 1024, "integer": True,
                                        "flag": "--chunked-prefill-size"}},
            {"name": "mem", "range": {"min": 0.7, "max": 0.9, "step": 0.05,
                                      "flag": "--mem-fraction-static"}},
            {"name": "hicache", "levels": {"off": None,
                                           "on": {"flags": ["--enable-hierarchical-cache"]}}},
        ],
        "workload": {"sessions": SESSIONS, "rounds": ROUNDS, "seed": 1},
        "strategy": {"kind": "optimize", "production": PRODUCTION, **strategy},
        "known_good": KNOWN_GOOD,
        "cost": {"restart_s": RESTART_S, "workload_s": WORKLOAD_S, "gpus": GPUS},
    })


def throughput(levels: dict[str, str]) -> float:
    """The space's true output tokens per second (no noise)."""
    running, chunk, mem = int(levels["max_running"]), int(levels["chunk"]), float(levels["mem"])
    capacity = 120 * mem  # running requests the KV pool holds before it saturates
    served = running if running <= capacity else capacity - 0.5 * (running - capacity)
    speed = 40.0 * max(served, 1.0) ** 0.8
    speed *= 1.25 if levels["hicache"] == "on" else 1.0
    speed *= 1 + 0.2 * (mem - 0.7)  # a larger pool also evicts less
    return speed * (1 - 0.02 * abs(math.log2(chunk / 4096)))


def corruption(levels: dict[str, str]) -> float:
    return 0.3 if levels["hicache"] == "on" and int(levels["max_running"]) > 96 else 0.0


class KnobPools:
    """An ``Executor`` whose trials are drawn from the space: sessions leak at the planted
    rate (a stop rule may end them early), throughput carries the seeded noise; ``noise``:
    between trials, on each pool (IID: as before issue 27)."""

    def __init__(self, seed: int, noise: TrialNoise = IID) -> None:
        self.random = random.Random(seed)
        self.fleet = Fleet(noise, seed)
        self.orders: deque[tuple[str, TrialOrder]] = deque()

    @property
    def busy(self) -> set[str]:
        return {name for name, _ in self.orders}

    def submit(self, pool: str, order: TrialOrder) -> None:
        self.orders.append((pool, order))

    def next_report(self) -> tuple[str, TrialReport]:
        name, order = self.orders.popleft()
        draw = self.fleet.trial(name)
        rate, outcomes = scaled(corruption(order.levels), draw.rate), []
        for _ in range(SESSIONS):
            outcomes.append("leak" if self.random.random() < rate else "ok")
            failed = outcomes.count("leak")
            if order.stop_rule is not None and order.stop_rule.decided(failed, SESSIONS):
                break
        share = len(outcomes) / SESSIONS
        self.fleet.elapse(name, RESTART_S + WORKLOAD_S * share)
        tokens = throughput(order.levels) * self.random.uniform(0.95, 1.05)
        tokens = tokens if draw.speed == 1.0 else tokens * draw.speed
        sessions = [SessionRow(i, f"s{i}", outcome, ROUNDS, None, None, 0.0)
                    for i, outcome in enumerate(outcomes)]
        timing = TrialTiming(wall_s=0.0, restart_s=RESTART_S, workload_s=WORKLOAD_S * share,
                             restarts=1, stopped_early=share < 1)
        # larger chunks: the first token sooner; more running requests: later
        ttft = 200.0 * (4096 / int(order.levels["chunk"])) ** 0.5 * (
            int(order.levels["max_running"]) / 64) ** 0.3 * self.random.uniform(0.95, 1.05)
        ttft = ttft if draw.speed == 1.0 else ttft / draw.speed
        latency = {"p50_ms": ttft / 2, "p90_ms": ttft * 0.8, "p99_ms": ttft}
        performance = {"wall_s": WORKLOAD_S * share, "requests": len(outcomes) * ROUNDS,
                       "completed": len(outcomes) * ROUNDS, "output_tokens": int(tokens * 10),
                       "good_sessions": outcomes.count("ok"),
                       "request_throughput": tokens / 100, "output_throughput": tokens,
                       "goodput": outcomes.count("ok") / (WORKLOAD_S * share),
                       "ttft": latency, "tpot": None, "itl": None, "e2e": latency}
        return name, TrialReport(order.trial_id, None, timing, sessions,
                                 performance=performance)

    def shutdown(self) -> None:
        self.orders.clear()


def run_search(directory: str, strategy: dict[str, Any], seed: int = 1,
               campaign_id: str = "knobs", pools: KnobPools | None = None,
               search: Search | None = None) -> dict[str, Any]:
    """One `optimize` campaign on the space through the driver's loop, its store (and the study
    next to it, unless ``search`` is given: a study of the caller's) in ``directory``; the
    verdict JSON, as `bisect verdict --json` gives it."""
    from pathlib import Path

    from db.store import Store
    from orchestrator.executor.driver import drive
    from orchestrator.stored import verdict_of

    campaign = knob_campaign(strategy)
    with Store.open(str(Path(directory) / "bisect.db")) as store:
        if campaign_id not in {c.id for c in store.list_campaigns()}:
            store.create_campaign(campaign_id, campaign.name, campaign.model_dump(mode="json"),
                                  "bench")
        drive(store, campaign_id, campaign, pools or KnobPools(seed), search=search)
        return verdict_of(store, campaign_id).to_json()


if __name__ == "__main__":  # what the test of both Optuna generations runs in its own process
    import json
    import sys

    import optuna

    answer = run_search(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]))
    print(json.dumps({"optuna": optuna.__version__, "verdict": answer}))
