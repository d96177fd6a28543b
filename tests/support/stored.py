"""A stored campaign's parts as plain values, for the tests that fill a store through the Store
API: its sessions, metric samples and timing, a fixed time, and a valid campaign file."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from db import MetricRow, SessionRow, TrialTiming

TIMING = TrialTiming(wall_s=12.5, restart_s=3.0, workload_s=9.0, restarts=2)
AT = datetime(2026, 12, 1, 10, 0, 0, 125000, tzinfo=UTC)


def sessions(n: int, leaks: int = 0) -> list[SessionRow]:
    return [
        SessionRow(idx=i, key=f"s{i}", outcome="leak" if i < leaks else "ok", turns=4,
                   first_bad_turn=2 if i < leaks else None,
                   evidence="<｜DSML｜invoke" if i < leaks else None, latency_s=0.5 + i / 100)
        for i in range(n)
    ]


def metrics(n: int) -> list[MetricRow]:
    return [MetricRow(service="decode", t=i * 0.5, name="sglang:num_running_reqs",
                      labels={"tp_rank": str(i % 2)}, value=float(i)) for i in range(n)]


def campaign_spec(name: str) -> dict[str, Any]:
    """A valid campaign file (as `bisect validate` takes it): two factors, one pool."""
    service = {"name": "sglang", "node": "gpu-a",
               "start": "python -m sglang.launch_server --port 30000",
               "health_url": "http://127.0.0.1:30000/health"}
    return {
        "name": name,
        "nodes": [{"name": "gpu-a", "workdir": "/var/tmp/bisect"}],
        "pools": [{"name": "pool-1", "endpoint": "http://127.0.0.1:30000", "services": [service]}],
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": "0"}},
                                           "bf16": {"env": {"BF16_INDEX_K": "1"}}}},
            {"name": "hicache", "levels": {"off": None,
                                           "on": {"flags": "--enable-hierarchical-cache"}}},
        ],
        "workload": {"sessions": 80, "rounds": 4, "timeout_s": 60},
        "strategy": {"kind": "factorial", "repeats": 3},
        "cost": {"restart_s": 90, "workload_s": 485, "gpus": 16},
    }
