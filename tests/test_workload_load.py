"""Load shape and measurement: arrivals, the concurrency bound, context growth, goodput, JSONL.

Counted on the server side (AgentServer over real HTTP); timing checks are one-sided bounds or
orders of magnitude, never exact times.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from experiments.agent import find_canary, find_session_key
from experiments.outcomes import Outcome
from experiments.workload.arrival import Arrival
from experiments.workload.context import CHARS_PER_TOKEN
from experiments.workload.metrics import RequestMetrics, aggregate
from experiments.workload.results import SessionResult, StressResult
from experiments.workload.spec import SLO, WorkloadSpec, parse_slo
from experiments.workload.stress import arrival_offsets, summary_table, write_jsonl
from tests.support.agent_server import AgentServer, completion, stress

# ---------------------------------------------------------------- the spec


@pytest.mark.pure
def test_new_spec_fields_validate() -> None:
    spec = WorkloadSpec()
    # streamed, all at once: bench_serving's defaults, in a campaign file as on the command line
    assert (spec.stream, spec.arrival, spec.max_concurrency, spec.context, spec.slo) == (
        True, Arrival.BURST, None, None, None)
    heavy = WorkloadSpec.model_validate({"context": {"start_tokens": 2000, "end_tokens": 80000},
                                         "arrival": "poisson", "request_rate": 2.5,
                                         "slo": {"ttft_ms": 500}})
    assert heavy.context is not None and heavy.context.end_tokens == 80000
    bad: dict[str, Any]  # what a campaign file may hold
    for bad in ({"arrival": "poisson"}, {"request_rate": 3}, {"arrival": "ramp"},
                {"max_concurrency": 0}, {"context": {"start_tokens": 9, "end_tokens": 1}},
                {"context": {"end_tokens": 10}, "filler_tokens": 5}, {"slo": {}},
                {"slo": {"ttft_ms": 0}}, {"slo": {"tpot": 3}}):
        with pytest.raises(ValueError):
            WorkloadSpec.model_validate(bad)


@pytest.mark.pure
def test_parse_slo() -> None:
    assert parse_slo("ttft_ms=500, itl_ms=50,e2e_ms=8000") == SLO(ttft_ms=500, itl_ms=50,
                                                                   e2e_ms=8000)
    assert parse_slo("e2e_ms=1.5") == SLO(e2e_ms=1.5)
    assert parse_slo("tpot_ms = 40") == SLO(tpot_ms=40)
    # bench_serving's --goodput form and names: KEY:MS, space-separated, e2el for E2E
    assert parse_slo("ttft:500 tpot:40 e2el:8000") == SLO(ttft_ms=500, tpot_ms=40, e2e_ms=8000)
    assert parse_slo("itl=50,e2e=9") == SLO(itl_ms=50, e2e_ms=9)
    assert SLO(tpot_ms=40, e2e_ms=9).limits() == {"ttft": None, "tpot": 40, "itl": None,
                                                  "e2el": 9}
    for bad, said in (("garbage", "'garbage' is not KEY=MS"), ("ttft_ms=", "'' is not a number"),
                      ("tpot_ms=abc", "tpot_ms: 'abc' is not a number of milliseconds"),
                      ("ttft_ms=-1", "must be a positive number"), ("ttft_ms=nan", "positive"),
                      ("ttft_ms=1,ttft:2", "ttft_ms is given twice"), ("", "'' is not KEY"),
                      ("p99_ttft_ms=5", "with KEY one of ttft_ms, tpot_ms, itl_ms, e2e_ms"),
                      ("ttft_ms=inf", "positive")):
        with pytest.raises(ValueError, match=re.escape(said)):
            parse_slo(bad)


# ---------------------------------------------------------------- arrivals and concurrency


@pytest.mark.pure
def test_poisson_offsets_are_seeded_with_the_asked_request_rate() -> None:
    # request_rate counts requests, as bench_serving's: sessions of 4 rounds start at a quarter
    # of it, so that the requests of the schedule come at 20 per second
    spec = WorkloadSpec(sessions=4000, rounds=4, arrival=Arrival.POISSON, request_rate=20)
    offsets = arrival_offsets(spec, seed=5)
    assert offsets == arrival_offsets(spec, seed=5) != arrival_offsets(spec, seed=6)
    assert offsets[0] == 0 and offsets == sorted(offsets)
    gaps = np.diff(offsets)
    assert statistics.mean(gaps) == pytest.approx(4 / 20, rel=0.1)
    assert statistics.stdev(gaps) == pytest.approx(4 / 20, rel=0.1)  # exponential: sd = mean
    assert 4000 * 4 / offsets[-1] == pytest.approx(20, rel=0.1)  # requests per second
    # one round: a session is a request, and the schedule is the one sessions always had
    single = arrival_offsets(spec.model_copy(update={"rounds": 1}), seed=5)
    assert single == pytest.approx([offset / 4 for offset in offsets])
    assert arrival_offsets(WorkloadSpec(sessions=3), seed=5) == [0.0, 0.0, 0.0]


async def slow(key: str, turn: int, canary: str) -> None:
    await asyncio.sleep(0.02)


@pytest.mark.real
def test_poisson_with_max_concurrency_never_exceeds_the_bound() -> None:
    server = AgentServer(slow)
    spec = WorkloadSpec(sessions=14, rounds=2, arrival=Arrival.POISSON, request_rate=200,
                        max_concurrency=3, seed=2)
    result = stress(server, spec)
    assert result.counts()["ok"] == 14
    assert server.max_inflight <= 3
    assert len(server.requests) == 28


@pytest.mark.real
def test_poisson_arrivals_are_spread_over_time_at_the_request_rate() -> None:
    server = AgentServer()
    spec = WorkloadSpec(sessions=8, rounds=3, arrival=Arrival.POISSON, request_rate=75, seed=4)
    stress(server, spec)
    offsets = arrival_offsets(spec, seed=4)  # sessions at 75 / 3 = 25 per second
    assert offsets[-1] > 0.1
    # The run's clock starts after the model query; no session comes before its offset.
    for index, offset in enumerate(offsets):
        at = next(r["at"] for r in server.requests if r["key"] == f"s4-{index}")
        assert at - server.model_queried_at >= offset
    # So the server saw at most the requests the schedule allows: 24 over its span, about
    # 75 a second (a loaded machine only spreads them further); sessions per second would
    # have sent them three times as fast.
    last = max(r["at"] for r in server.requests) - server.model_queried_at
    assert len(server.requests) == 24 and 24 / last <= 24 / offsets[-1] < 2 * 75


@pytest.mark.real
def test_burst_without_a_bound_has_every_session_in_flight() -> None:
    arrived = asyncio.Event()
    server: AgentServer

    async def hold(key: str, turn: int, canary: str) -> None:
        if turn == 1:
            if server.inflight >= 10:
                arrived.set()
            await asyncio.wait_for(arrived.wait(), timeout=5)

    server = AgentServer(hold)
    result = stress(server, WorkloadSpec(sessions=10, rounds=2))
    assert result.counts()["ok"] == 10 and server.max_inflight == 10


# ---------------------------------------------------------------- context growth


def context_chars(body: dict[str, Any]) -> int:
    """Counted on the server: message texts plus tool-call names and arguments."""
    total = 0
    for message in body["messages"]:
        total += len(message.get("content") or "")
        for tool_call in message.get("tool_calls") or []:
            total += len(tool_call["function"]["name"]) + len(tool_call["function"]["arguments"])
    return total


@pytest.mark.real
@pytest.mark.parametrize(("start", "end", "rounds"), [(500, 5000, 4), (2000, 80000, 3)])
def test_context_grows_from_start_to_end(start: int, end: int, rounds: int) -> None:
    server = AgentServer()
    spec = WorkloadSpec.model_validate({"sessions": 2, "rounds": rounds, "seed": 9,
                                        "context": {"start_tokens": start, "end_tokens": end}})
    result = stress(server, spec)
    assert result.counts()["ok"] == 2
    for key in ("s9-0", "s9-1"):
        sizes = [context_chars(r["body"]) for r in server.requests if r["key"] == key]
        assert len(sizes) == rounds and sizes == sorted(sizes)
        assert sizes[0] == pytest.approx(start * CHARS_PER_TOKEN, rel=0.2)
        assert sizes[-1] == pytest.approx(end * CHARS_PER_TOKEN, rel=0.2)
    # The filler never hides the contract: the session key and each canary are still found.
    last = next(r for r in reversed(server.requests) if r["key"] == "s9-0")
    assert find_session_key(last["body"]["messages"][1]["content"]) == "s9-0"
    assert find_canary(last["body"]["messages"][-1]["content"]) == last["canary"] != ""


@pytest.mark.real
def test_context_filler_is_deterministic_by_seed() -> None:
    def texts(seed: int) -> list[str]:
        server = AgentServer()
        spec = WorkloadSpec.model_validate({"sessions": 1, "rounds": 2, "seed": seed,
                                            "context": {"start_tokens": 300, "end_tokens": 900}})
        stress(server, spec)
        return [m["content"] for m in server.requests[-1]["body"]["messages"]]

    assert texts(1) == texts(1)
    assert texts(1)[1] != texts(2)[1]


# ---------------------------------------------------------------- metrics and goodput


@pytest.mark.pure
def test_aggregate_matches_numpy_and_counts_only_completed() -> None:
    e2e = [0.1, 0.2, 0.3, 0.4, 1.0]
    requests = [RequestMetrics(1, True, e, ttft_s=e / 2, itl_s=(0.01, 0.03),
                               prompt_tokens=10, completion_tokens=5, streamed=True) for e in e2e]
    requests.append(RequestMetrics(2, False, 9.0))  # an error: out of every latency statistic
    summary = aggregate(requests, duration_s=2.0)
    assert (summary["requests"], summary["completed"]) == (6, 5)
    assert summary["request_throughput"] == pytest.approx(2.5)
    assert summary["output_throughput"] == pytest.approx(12.5)
    assert summary["total_input_tokens"] == 50
    assert summary["mean_e2e_latency_ms"] == pytest.approx(400)
    assert summary["median_e2e_latency_ms"] == pytest.approx(300)
    assert summary["p99_e2e_latency_ms"] == pytest.approx(np.percentile(e2e, 99) * 1000)
    assert summary["p90_ttft_ms"] == pytest.approx(np.percentile(e2e, 90) * 500)
    assert summary["median_itl_ms"] == pytest.approx(20)
    assert summary["mean_tpot_ms"] == pytest.approx(statistics.mean(e / 2 / 4 for e in e2e) * 1e3)
    assert summary["goodput"] is None and summary["good_requests"] is None
    # bench_serving's other figures: std (population), p95, max, input and total throughput,
    # concurrency = the sum of E2E over the duration
    assert summary["std_e2e_latency_ms"] == pytest.approx(np.std(e2e) * 1000)
    assert summary["p95_ttft_ms"] == pytest.approx(np.percentile(e2e, 95) * 500)
    assert summary["max_e2e_latency_ms"] == pytest.approx(1000)
    assert summary["max_itl_ms"] == pytest.approx(30)
    assert summary["input_throughput"] == pytest.approx(25.0)
    assert summary["total_throughput"] == pytest.approx(37.5)
    assert summary["concurrency"] == pytest.approx(sum(e2e) / 2.0)
    good = aggregate(requests, 2.0, SLO(e2e_ms=350, itl_ms=40))
    assert good["good_requests"] == 3 and good["goodput"] == pytest.approx(1.5)
    assert aggregate(requests, 2.0, SLO(itl_ms=20))["good_requests"] == 0  # the 30 ms gap
    # bench_serving's goodput keys: the SLOs under its names, shares of the 6 requests sent
    assert (good["goodput_slos_ms"], good["request_goodput"]) == ({"itl": 40, "e2el": 350}, 1.5)
    assert good["slo_attainment"] == pytest.approx(3 / 6)
    assert good["slo_attainment_by_metric"] == pytest.approx({"itl": 5 / 6, "e2el": 3 / 6})
    # TTFT = E2E / 2: 50 to 500 ms; TPOT = (E2E - TTFT) / 4 = E2E / 8: 12.5 to 125 ms
    both = aggregate(requests, 2.0, SLO(tpot_ms=40, ttft_ms=110))
    assert both["slo_attainment_by_metric"] == pytest.approx({"ttft": 2 / 6, "tpot": 3 / 6})
    assert both["good_requests"] == 2


@pytest.mark.pure
def test_the_peaks_count_output_chunks_and_requests_in_one_second_buckets() -> None:
    # bench_serving's max_output_tokens_per_s and max_concurrent_requests: buckets of one
    # second from the first request sent; a chunk at TTFT and one after each ITL gap
    requests = [RequestMetrics(1, True, 0.5, ttft_s=0.1, itl_s=(0.1, 0.1), completion_tokens=3,
                               streamed=True, sent_at=100.0),
                RequestMetrics(1, True, 1.2, ttft_s=0.2, itl_s=(0.9,), completion_tokens=2,
                               streamed=True, sent_at=100.3),
                RequestMetrics(1, True, 0.1, ttft_s=0.1, sent_at=101.5),  # not streamed
                RequestMetrics(1, False, 3.0, sent_at=100.0)]  # failed: not counted
    summary = aggregate(requests, 2.0)
    # second 0: 3 chunks of the first, 1 of the second; second 1: 1 of the second, 1 of the third
    assert summary["max_output_tokens_per_s"] == 4.0
    assert summary["max_concurrent_requests"] == 2
    assert aggregate([], 1.0)["max_concurrent_requests"] == 0


@pytest.mark.pure
def test_a_trial_stores_throughput_goodput_and_latency_percentiles() -> None:
    e2e = [0.1, 0.2, 0.3, 0.4, 1.0]

    def session(index: int, seconds: float) -> SessionResult:
        request = RequestMetrics(1, True, seconds, ttft_s=seconds / 2, itl_s=(0.01, 0.03),
                                 completion_tokens=5, streamed=True)
        outcome = Outcome.LEAK if index == 1 else Outcome.OK
        return SessionResult(index, f"s0-{index}", outcome, 1, None, None, seconds, (seconds,),
                             (request,))

    sessions = tuple(session(i, seconds) for i, seconds in enumerate(e2e))
    figures = StressResult(sessions, 2.0, False).performance()
    assert (figures["requests"], figures["completed"], figures["output_tokens"]) == (5, 5, 25)
    assert figures["request_throughput"] == pytest.approx(2.5)
    assert figures["output_throughput"] == pytest.approx(12.5)
    assert figures["good_sessions"] == 4 and figures["goodput"] == pytest.approx(2.0)  # a leak
    assert figures["e2e"] == pytest.approx(
        {f"p{p}_ms": np.percentile(e2e, p) * 1000 for p in (50, 90, 99)})
    assert figures["ttft"]["p50_ms"] == pytest.approx(150) and figures["itl"]["p50_ms"] == \
        pytest.approx(20)
    json.dumps(figures, allow_nan=False)  # plain values only
    # with an SLO a good session is also on time: 0.1 s and 0.3 s (0.2 s leaked)
    on_time = StressResult(sessions, 2.0, False, SLO(e2e_ms=350)).performance()
    assert on_time["good_sessions"] == 2 and on_time["goodput"] == pytest.approx(1.0)
    nothing = StressResult((), 0.0, True).performance()
    assert nothing["goodput"] == nothing["request_throughput"] == 0.0
    assert all(nothing[name] is None for name in ("ttft", "tpot", "itl", "e2e"))


@pytest.mark.real
def test_goodput_counts_only_requests_within_the_slo() -> None:
    async def late(key: str, turn: int, canary: str) -> None:
        if key in ("s0-1", "s0-3") and turn == 2:
            await asyncio.sleep(0.6)

    spec = WorkloadSpec.model_validate({"sessions": 5, "rounds": 2, "slo": {"e2e_ms": 400}})
    result = stress(AgentServer(late), spec)
    summary = result.summary()
    assert summary["completed"] == 10 and summary["good_requests"] == 8
    # over the sessions' own time, as bench_serving's duration (the model lookup is not in it)
    assert 0 < result.duration < result.wall_s and summary["duration"] == result.duration
    assert summary["goodput"] == pytest.approx(8 / result.duration)
    assert summary["request_throughput"] == pytest.approx(10 / result.duration)
    assert summary["slo"] == {"e2e_ms": 400}
    assert summary["p99_e2e_latency_ms"] >= 600 > summary["median_e2e_latency_ms"]


# ---------------------------------------------------------------- outputs


@pytest.mark.real
def test_jsonl_has_one_record_per_session(tmp_path: Path) -> None:
    async def leak_one(key: str, turn: int, canary: str) -> dict[str, Any] | None:
        return completion("<｜DSML｜tool_calls>") if (key, turn) == ("s0-2", 2) else None

    result = stress(AgentServer(leak_one), WorkloadSpec(sessions=4, rounds=3, stream=True))
    path = write_jsonl(result, tmp_path / "sessions.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["key"] for r in records] == ["s0-0", "s0-1", "s0-2", "s0-3"]
    leak = records[2]
    assert (leak["outcome"], leak["turns"], leak["first_bad_turn"]) == ("leak", 2, 2)
    assert "DSML" in leak["evidence"] and len(leak["requests"]) == 2
    request = records[0]["requests"][0]
    assert {"turn", "ttft_ms", "e2e_ms", "itl_ms", "prompt_tokens", "completion_tokens"} <= set(
        request)
    assert 0 <= request["ttft_ms"] <= request["e2e_ms"] and request["completion_tokens"] == 12


@pytest.mark.real
def test_summary_keeps_its_keys_and_the_table_shows_latencies() -> None:
    result = stress(AgentServer(), WorkloadSpec(sessions=3, rounds=1, slo=SLO(e2e_ms=5000)))
    summary = result.summary()
    for key in ("sessions", "counts", "corrupted", "infra", "judged", "rate", "ci95", "wall_s",
                "request_throughput", "output_throughput", "goodput", "mean_ttft_ms",
                "median_itl_ms", "p90_e2e_latency_ms", "p99_ttft_ms"):
        assert key in summary
    json.dumps(summary)
    assert result.sessions[0].outcome is Outcome.OK
    console = Console(record=True, width=140)
    console.print(summary_table(result))
    text = console.export_text()
    assert "TTFT" in text and "E2E" in text and "goodput" in text and "ok" in text
