"""Proposed variants go to the free pools that restart the fewest services for them."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.campaign import Campaign
from orchestrator.executor.placement import place, restarts_between

pytestmark = pytest.mark.pure

GOOD = {"index_k": "fp8", "hicache": "off", "topk_v2": "off", "commit": "old"}
BAD = {"index_k": "bf16", "hicache": "on", "topk_v2": "on", "commit": "old"}


def pd_pool(name: str, node: str) -> dict[str, Any]:
    """A disaggregated pool: prefill and decode servers on one node, as systemd units."""
    return {"name": name, "endpoint": f"http://{node}:8000", "services": [
        {"name": f"{name}-{role}", "node": node, "start": ["python", "-m", "sglang", role],
         "health_url": f"http://{node}:8000/health"}
        for role in ("prefill", "decode")]}


def campaign() -> Campaign:
    decode = ["p0-decode", "p1-decode"]
    return Campaign.model_validate({
        "name": "placement",
        "nodes": [{"name": "n0", "workdir": "/srv/a"}, {"name": "n1", "workdir": "/srv/b"}],
        "pools": [pd_pool("p0", "n0"), pd_pool("p1", "n1")],
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": "0"}},
                                           "bf16": {"env": {"BF16_INDEX_K": "1"}}}},
            {"name": "hicache", "levels": {"off": {}, "on": {"flags": ["--enable-hicache"]}}},
            # touches the decode servers only: prefill does not restart for it
            {"name": "topk_v2", "services": decode,
             "levels": {"off": {}, "on": {"env": {"TOPK_V2": "1"}}}},
            {"name": "commit", "levels": {
                "old": {}, "new": {"git": {"tree": "/srv/sglang", "ref": "abc123"}}}},
        ],
        "known_good": GOOD,
        "known_bad": BAD,
    })


def test_only_the_services_a_change_touches_restart() -> None:
    c = campaign()
    pool = c.pools[0]
    assert restarts_between(c, pool, None, GOOD) == 2  # nothing runs yet
    assert restarts_between(c, pool, GOOD, GOOD) == 0
    assert restarts_between(c, pool, GOOD, {**GOOD, "topk_v2": "on"}) == 1  # decode only
    assert restarts_between(c, pool, GOOD, {**GOOD, "hicache": "on"}) == 2
    # new files on the node: every service there restarts, though no flag or env changed
    assert restarts_between(c, pool, GOOD, {**GOOD, "commit": "new"}) == 2


def test_each_pool_takes_the_variant_closest_to_what_it_runs() -> None:
    c = campaign()
    running = {"p0": BAD, "p1": GOOD}
    # In the strategy's order the first proposal would go to p0: it goes where it runs already.
    assert place(c, ["p0", "p1"], [GOOD, BAD], running) == [("p1", GOOD), ("p0", BAD)]
    near_bad = {**BAD, "topk_v2": "off"}  # one decode restart from known-bad
    near_good = {**GOOD, "topk_v2": "on"}  # one from known-good
    assert place(c, ["p0", "p1"], [near_good, near_bad], running) == [
        ("p1", near_good), ("p0", near_bad)]


def test_the_strategys_first_proposals_are_the_ones_placed() -> None:
    # One free pool, two proposals: the first is run even if the second is cheaper there.
    c = campaign()
    assert place(c, ["p1"], [BAD, GOOD], {"p1": GOOD}) == [("p1", BAD)]
    assert place(c, ["p0", "p1"], [], {}) == []
    assert place(c, [], [BAD], {}) == []
