"""The twin's fault and time models on real combined twins: context and concurrency conditions,
a planted rate measured by the stress workload, streaming parity, CUDA graphs and HiCache.

Timed comparisons use medians of several requests and wide margins (the modelled effects are
1.6x and ~7x; the asserts ask for 1.25x and 2x).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from experiments import agent
from experiments.outcomes import Outcome
from experiments.twin import faults
from experiments.workload.classify import classify_turn
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import run_stress
from tests.support.twins import (
    FAST,
    Procs,
    body,
    builtin_triage,
    fold_stream,
    is_leak,
    opening,
    post_chat,
    start_twins,
)


@pytest.fixture(autouse=True, scope="module")
def _triage() -> Iterator[None]:
    with builtin_triage():
        yield


def rule_file(tmp: Path, name: str, text: str) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return str(path)


async def burst(url: str, keys: list[str]) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as http:
        async def one(key: str) -> dict[str, Any]:
            async with http.post(f"{url}/v1/chat/completions",
                                 json=body(opening(key))) as response:
                return dict(await response.json())

        return list(await asyncio.gather(*(one(key) for key in keys)))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Every combined twin of this module, started at once."""
    tmp = tmp_path_factory.mktemp("model")
    scaled = rule_file(tmp, "scaled", """
rules:
  - name: load-race
    probability: 1.0
    scale_with_inflight: {reference: 40}
    effect: leak
""")
    planted = rule_file(tmp, "planted", """
seed: 11
rules:
  - {name: planted, min_inflight: 32, probability: 0.1, effect: leak, markup: v4}
  - {name: long-context-race, min_context_tokens: 2000, probability: 1.0, effect: leak}
""")
    mixed = rule_file(tmp, "mixed", """
seed: 5
rules:
  - {name: a, probability: 0.15, effect: leak}
  - {name: b, probability: 0.15, effect: lost_plot}
  - {name: c, probability: 0.15, effect: bad_args}
  - {name: d, probability: 0.15, effect: no_tool}
""")
    timing = ("--twin-latency-ms", "0", "--twin-prefill-us-per-token", "100",
              "--twin-decode-ms-per-token", "8")
    procs = Procs(tmp)
    names = ["scaled", "planted", "mixed", "graphs", "eager", "hicache"]
    urls = start_twins(
        procs,
        ("scaled", ["--twin-latency-ms", "200", "--fault-model", scaled], None),
        ("planted", ["--twin-latency-ms", "60", "--twin-decode-ms-per-token", "0",
                     "--fault-model", planted], None),
        ("mixed", [*FAST, "--fault-model", mixed], None),
        ("graphs", timing, None),
        ("eager", [*timing, "--disable-cuda-graph"], None),
        ("hicache", [*timing, "--enable-hierarchical-cache"], None),
    )
    try:
        yield dict(zip(names, urls, strict=True))
    finally:
        procs.close()


@pytest.mark.real
def test_min_context_tokens(twins: dict[str, str]) -> None:
    url = twins["planted"]  # its long-context rule; the planted one needs 32 in flight
    assert not is_leak(post_chat(url, body(opening("ctx-short")))[1])
    long_log = "build log line with a stack frame and a retry\n" * 200  # ~9,000 characters
    assert is_leak(post_chat(url, body(opening("ctx-long", filler=long_log)))[1])


@pytest.mark.real
def test_scale_with_inflight_raises_the_hit_rate_with_concurrency(twins: dict[str, str]) -> None:
    url = twins["scaled"]

    async def low_then_high() -> tuple[int, int]:
        low = 0
        for wave in range(5):  # 20 sessions, at most 4 in flight: p_eff <= 4/40
            answers = await burst(url, [f"scale-low-{wave}-{i}" for i in range(4)])
            low += sum(is_leak(a) for a in answers)
        high = await burst(url, [f"scale-high-{i}" for i in range(40)])  # up to 40/40
        return low, sum(is_leak(a) for a in high)

    low, high = asyncio.run(low_then_high())
    # Expected ~1.25 of 20 and ~20 of 40; these bounds are many standard deviations wide.
    assert low <= 6 and high >= 10 and high / 40 > low / 20, (low, high)


@pytest.mark.real
def test_planted_rate_is_measured_under_load_and_absent_alone(twins: dict[str, str]) -> None:
    url = twins["planted"]
    result = asyncio.run(run_stress(url, WorkloadSpec(sessions=64, rounds=3, seed=11)))
    leaks = [s for s in result.sessions if s.outcome is Outcome.LEAK]
    others = {s.outcome for s in result.sessions} - {Outcome.LEAK}
    assert others == {Outcome.OK}, others
    low, high = wilson(len(leaks), 64)
    assert leaks and low <= 0.1 <= high, (len(leaks), low, high)

    # The very sessions that leaked under load are clean one at a time.
    for session in leaks:
        assert not is_leak(post_chat(url, body(opening(session.key)))[1]), session.key
    alone = [asyncio.run(run_stress(url, WorkloadSpec(sessions=1, rounds=2, seed=seed)))
             for seed in range(3)]
    assert all(s.outcome is Outcome.OK for run in alone for s in run.sessions)


@pytest.mark.real
def test_streaming_and_plain_answers_give_the_same_outcomes(twins: dict[str, str]) -> None:
    url = twins["mixed"]
    keys = [f"parity-{i}" for i in range(30)]

    async def both() -> tuple[list[Outcome], list[Outcome]]:
        async with aiohttp.ClientSession() as http:
            async def plain(key: str) -> dict[str, Any]:
                async with http.post(f"{url}/v1/chat/completions",
                                     json=body(opening(key))) as response:
                    return dict(await response.json())

            plains = await asyncio.gather(*(plain(k) for k in keys))
            streams = await asyncio.gather(*(fold_stream(http, url, body(opening(k)))
                                             for k in keys))
        judge = [classify_turn(a, "CANARY0001", agent.TOOLS).outcome for a in plains]
        return judge, [classify_turn(a, "CANARY0001", agent.TOOLS).outcome for a in streams]

    plain, streamed = asyncio.run(both())
    assert plain == streamed
    assert len(set(plain) - {Outcome.OK}) >= 3, plain  # a real mix, not all clean


async def timed_stream(http: aiohttp.ClientSession, url: str,
                       payload: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
    """(time to first byte of content, time from there to the end, the last message)."""
    started = time.monotonic()
    first = None
    async with http.post(f"{url}/v1/chat/completions",
                         json={**payload, "stream": True}) as response:
        async for _ in response.content.iter_any():
            first = first or time.monotonic()
    end = time.monotonic()
    assert first is not None
    return first - started, end - first, payload


@pytest.mark.real
def test_disable_cuda_graph_slows_decode(twins: dict[str, str]) -> None:
    async def decode_times(url: str) -> list[float]:
        async with aiohttp.ClientSession() as http:
            return [(await timed_stream(http, url, body(opening(f"graph-{i}"))))[1]
                    for i in range(7)]

    async def both() -> tuple[list[float], list[float]]:
        graphs, eager = await asyncio.gather(decode_times(twins["graphs"]),
                                             decode_times(twins["eager"]))
        return graphs, eager

    graphs, eager = asyncio.run(both())
    assert statistics.median(eager) > 1.25 * statistics.median(graphs), (graphs, eager)


@pytest.mark.real
def test_hicache_speeds_up_the_prefill_of_a_repeated_prefix(twins: dict[str, str]) -> None:
    pasted = "a long build log line that the agent pasted into its first prompt\n" * 120

    async def second_turn_ttft(url: str) -> list[float]:
        async with aiohttp.ClientSession() as http:
            async def session(i: int) -> float:
                messages = opening(f"prefix-{i}", "FIRST00001", filler=pasted)
                async with http.post(f"{url}/v1/chat/completions",
                                     json=body(messages)) as response:
                    first = (await response.json())["choices"][0]["message"]
                call = first["tool_calls"][0]
                messages += [first, {"role": "tool", "tool_call_id": call["id"],
                                     "content": agent.tool_result_message("read_file", "S2")}]
                return (await timed_stream(http, url, body(messages)))[0]

            return list(await asyncio.gather(*(session(i) for i in range(5))))

    async def both() -> tuple[list[float], list[float]]:
        cold, warm = await asyncio.gather(second_turn_ttft(twins["graphs"]),
                                          second_turn_ttft(twins["hicache"]))
        return cold, warm

    cold, warm = asyncio.run(both())
    assert statistics.median(warm) < 0.5 * statistics.median(cold), (cold, warm)


# --- pure parts ---------------------------------------------------------------------------------


@pytest.mark.pure
def test_role_conditions_scaling_and_context_in_decide() -> None:
    model = faults.FaultModel.model_validate({"rules": [{
        "name": "pd", "probability": 1.0, "effect": "leak", "min_context_tokens": 100,
        "when": {"flags": {"disaggregation-mode": "decode"},
                 "prefill": {"env": {"BF16_INDEX_K": "1"},
                             "flags": {"enable-hierarchical-cache": True}},
                 "decode": {"flags": {"disable-cuda-graph": False}}},
    }]})
    decode = faults.RoleView({"disaggregation-mode": "decode", "disable-cuda-graph": False}, {})
    bad = faults.RoleView({"enable-hierarchical-cache": True}, {"BF16_INDEX_K": "1"})
    good = faults.RoleView({"enable-hierarchical-cache": True}, {"BF16_INDEX_K": "0"})

    def hit(prefill: faults.RoleView | None, context: int = 500) -> bool:
        roles = {"decode": decode} if prefill is None else {"prefill": prefill, "decode": decode}
        return faults.decide(model, twin_seed=0, flags=decode.flags, env=decode.env,
                             inflight=1, session_key="k", roles=roles,
                             context_tokens=context) is not None

    assert hit(bad) and not hit(good) and not hit(None)  # an unknown prefill matches nothing
    assert not hit(bad, context=99)

    scale = faults.InflightScale(reference=64)
    assert [scale.factor(n) for n in (0, 16, 64, 200)] == [0.0, 0.25, 1.0, 1.0]
    assert faults.InflightScale(reference=10, power=2).factor(5) == 0.25


@pytest.mark.pure
def test_unknown_role_flags_are_named_and_schema_covers_the_new_fields() -> None:
    model = faults.FaultModel.model_validate({"rules": [{
        "name": "r", "probability": 0.1, "effect": "wedge",
        "when": {"prefill": {"flags": {"enable-hicache": True}}},
    }]})
    assert faults.unknown_flags(model, {"enable-hierarchical-cache"}) == \
        ["rules[0].when.prefill.flags.enable-hicache"]
    document = faults.schema()
    rule = document["$defs"]["Rule"]["properties"]
    assert {"min_context_tokens", "scale_with_inflight", "min_inflight"} <= set(rule)
    assert {"prefill", "decode", "env", "flags"} <= set(
        document["$defs"]["Condition"]["properties"])
    assert {"reference", "power"} <= set(document["$defs"]["InflightScale"]["properties"])
