"""The stress workload: the pure turn classifier, and the harness over real HTTP.

The HTTP tests run a small aiohttp.web server (``AgentServer``) in the test's own event loop. It
follows the agent contract and misbehaves on demand, so the harness's classification, accounting
and early stop are checked against real sockets. Tests against the real twin come separately.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from aiohttp import web
from rich.console import Console
from scipy.stats import binomtest

from experiments.agent import TOOLS
from experiments.markup import MarkupFamily, find_markup, render
from experiments.outcomes import STRESS_OUTCOMES, Outcome
from experiments.workload.classify import EVIDENCE_LIMIT, classify_turn
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import (
    SessionResult,
    StressResult,
    run_stress,
    summary_table,
)
from tests.support.agent_server import (
    CANARY,
    AgentServer,
    by_key,
    call,
    completion,
    serve,
    stress,
)

# ---------------------------------------------------------------- (a) the pure classifier


@pytest.mark.pure
def test_ok_turn_returns_the_parsed_call() -> None:
    verdict = classify_turn(completion(None, [call()]), CANARY, TOOLS)
    assert verdict.outcome is Outcome.OK and verdict.evidence is None
    assert verdict.tool_call == {"id": "call_0", "name": "read_file",
                                 "arguments": {"path": "setup.py", "canary": CANARY}}


@pytest.mark.pure
@pytest.mark.parametrize("family", list(MarkupFamily))
def test_every_markup_family_in_content_is_a_leak(family: MarkupFamily) -> None:
    text = "Let me look. " + render(family, "read_file", {"path": "a.py", "canary": CANARY})
    verdict = classify_turn(completion(text), CANARY, TOOLS)
    assert verdict.outcome is Outcome.LEAK and verdict.evidence == text
    # leaked markup wins even when structured calls came too
    assert classify_turn(completion(text, [call()]), CANARY, TOOLS).outcome is Outcome.LEAK


@pytest.mark.pure
@pytest.mark.parametrize("family", list(MarkupFamily))
@pytest.mark.parametrize("cut", [0.3, 0.5, 0.9])
def test_truncated_markup_is_a_leak(family: MarkupFamily, cut: float) -> None:
    full = render(family, "search_code", {"query": "x", "canary": CANARY})
    fragment = full[: int(len(full) * cut)]
    assert classify_turn(completion(fragment), CANARY, TOOLS).outcome is Outcome.LEAK


@pytest.mark.pure
@pytest.mark.parametrize("fragment", [
    '<｜DSML｜tool_calls><｜DSML｜invoke name="read_file">',
    '<｜DSML｜function_calls>\n<｜DSML｜invoke name="run_tests"><｜DSML｜parameter name="tar',
    "</｜DSML｜parameter>",
    "<｜tool▁call▁begin｜>read_file<｜tool▁sep｜>{\"path\": ",
    "done<｜tool▁calls▁end｜>",
    '<tool_call>{"name": "read_file", "arguments": {',
    "thinking about it</think> now the answer",
])
def test_unterminated_fragments_are_a_leak(fragment: str) -> None:
    verdict = classify_turn(completion(fragment), CANARY, TOOLS)
    assert verdict.outcome is Outcome.LEAK and verdict.evidence == fragment


@pytest.mark.pure
def test_markup_in_reasoning_content_is_a_leak() -> None:
    leaked = render(MarkupFamily.V4, "read_file", {"path": "a", "canary": CANARY})
    response = completion(None, [call()], reasoning_content="plan: " + leaked)
    verdict = classify_turn(response, CANARY, TOOLS)
    assert verdict.outcome is Outcome.LEAK and leaked in (verdict.evidence or "")


@pytest.mark.pure
def test_leak_evidence_is_bounded_and_shows_the_markup() -> None:
    text = "x" * 5000 + "<｜DSML｜tool_calls>" + "y" * 5000
    verdict = classify_turn(completion(text), CANARY, TOOLS)
    assert verdict.outcome is Outcome.LEAK
    assert verdict.evidence is not None and len(verdict.evidence) <= EVIDENCE_LIMIT
    assert "<｜DSML｜tool_calls>" in verdict.evidence


@pytest.mark.pure
@pytest.mark.parametrize("calls", [None, []])
def test_plain_text_is_no_tool(calls: list[dict[str, Any]] | None) -> None:
    verdict = classify_turn(completion("I will read the file now.", calls), CANARY, TOOLS)
    assert verdict.outcome is Outcome.NO_TOOL and "read the file" in (verdict.evidence or "")


@pytest.mark.pure
@pytest.mark.parametrize("bad_call", [
    call(name="delete_repo"),
    call(arguments='{"path": "a", "canary": '),  # invalid JSON
    call(arguments='["a", "ABCDEFGH12"]'),  # a JSON list
    call(arguments='"just a string"'),
    call(arguments={"path": "a"}),  # canary missing
    call(arguments={"canary": CANARY}),  # path missing
    call(arguments={"path": 7, "canary": CANARY}),  # not a string
    call(arguments={"path": "a", "canary": 12345}),
    call(arguments=""),  # a string, but empty: the model wrote no arguments
])
def test_malformed_calls_are_bad_args(bad_call: Any) -> None:
    verdict = classify_turn(completion(None, [bad_call]), CANARY, TOOLS)
    assert verdict.outcome is Outcome.BAD_ARGS and verdict.evidence


@pytest.mark.pure
def test_one_bad_call_among_good_ones_is_bad_args() -> None:
    calls = [call(), call(arguments="{oops", call_id="call_1")]
    assert classify_turn(completion(None, calls), CANARY, TOOLS).outcome is Outcome.BAD_ARGS


@pytest.mark.pure
def test_wrong_canary_is_lost_plot() -> None:
    response = completion(None, [call(arguments={"path": "a", "canary": "ZZZZZZZZZZ"})])
    verdict = classify_turn(response, CANARY, TOOLS)
    assert verdict.outcome is Outcome.LOST_PLOT
    assert "ZZZZZZZZZZ" in (verdict.evidence or "") and CANARY in (verdict.evidence or "")
    assert verdict.tool_call is not None and verdict.tool_call["name"] == "read_file"


@pytest.mark.pure
@pytest.mark.parametrize("response", [
    {}, {"choices": []}, {"choices": [{}]}, {"choices": [{"message": "hi"}]},
    {"error": {"message": "overloaded"}}, [], "text",
    {"choices": [{"message": {"role": "assistant", "tool_calls": {"id": "x"}}}]},
    # calls the server's code built wrong (reply.py: the schema's types are the server's job)
    completion(None, [{"id": "call_0", "type": "function",  # arguments an object, not a string
                       "function": {"name": "read_file", "arguments": {"canary": CANARY}}}]),
    completion(None, [{"type": "function", "function": {"name": "read_file",
                                                        "arguments": "{}"}}]),  # no id
    completion(None, [{"id": "call_0", "type": "function"}]),  # no function
    {"choices": [{"message": {"role": "assistant", "content": None,  # a call that is no object
                              "tool_calls": ["read_file"]}}]},
])
def test_malformed_response_is_error(response: Any) -> None:
    verdict = classify_turn(response, CANARY, TOOLS)
    assert verdict.outcome is Outcome.ERROR and verdict.evidence


@pytest.mark.pure
def test_find_markup_agrees_with_the_classifier_on_clean_text() -> None:
    clean = "Calling read_file with canary=ABC; <b>bold</b> and think about </thinking"
    assert find_markup(clean) is None
    assert classify_turn(completion(clean), CANARY, TOOLS).outcome is Outcome.NO_TOOL


# ---------------------------------------------------------------- spec and accounting


@pytest.mark.pure
def test_spec_defaults_and_validation() -> None:
    spec = WorkloadSpec()
    assert (spec.sessions, spec.rounds, spec.timeout_s, spec.model) == (80, 4, 60, None)
    for bad in ({"sessions": 0}, {"rounds": 0}, {"timeout_s": 0}, {"filler_tokens": -1},
                {"concurrency": 8}):
        with pytest.raises(ValueError):
            WorkloadSpec.model_validate(bad)


def _session(index: int, outcome: Outcome) -> SessionResult:
    return SessionResult(index, f"s0-{index}", outcome, 1, None, None, 0.1)


@pytest.mark.pure
def test_summary_counts_corruption_and_infra_separately() -> None:
    outcomes = ([Outcome.OK] * 69 + [Outcome.LEAK] * 3 + [Outcome.LOST_PLOT, Outcome.BAD_ARGS,
                Outcome.NO_TOOL] + [Outcome.ERROR] * 3 + [Outcome.TIMEOUT] * 2)
    result = StressResult(tuple(_session(i, o) for i, o in enumerate(outcomes)), 12.5, False)
    summary = result.summary()
    assert summary["counts"] == {"ok": 69, "leak": 3, "no_tool": 1, "lost_plot": 1,
                                 "bad_args": 1, "error": 3, "timeout": 2}
    assert (summary["sessions"], summary["corrupted"], summary["infra"], summary["judged"]) == (
        80, 6, 5, 75)
    assert summary["rate"] == pytest.approx(6 / 75)
    ci = binomtest(6, 75).proportion_ci(method="wilson")
    assert summary["ci95"] == pytest.approx([ci.low, ci.high])
    assert summary["wall_s"] == 12.5
    json.dumps(summary)  # plain values only


@pytest.mark.pure
def test_summary_with_nothing_judged() -> None:
    empty = StressResult((), 0.0, True).summary()
    assert empty["rate"] == 0.0 and empty["ci95"] == [0.0, 1.0]
    assert set(empty["counts"]) == {o.value for o in STRESS_OUTCOMES}
    infra_only = StressResult((_session(0, Outcome.ERROR), _session(1, Outcome.TIMEOUT)), 1, False)
    assert infra_only.summary()["judged"] == 0 and infra_only.summary()["ci95"] == [0.0, 1.0]


@pytest.mark.pure
def test_summary_table_renders_every_outcome() -> None:
    result = StressResult((_session(0, Outcome.OK), _session(1, Outcome.LEAK)), 3.0, False)
    console = Console(record=True, width=120)
    console.print(summary_table(result))
    text = console.export_text()
    for outcome in STRESS_OUTCOMES:
        assert outcome.value in text
    assert "50.0%" in text and "corrupted 1/2" in text


# ---------------------------------------------------------------- (b) the harness over real HTTP


@pytest.mark.real
def test_clean_server_all_ok_and_the_contract_is_followed() -> None:
    server = AgentServer(models=["served-model"])
    result = stress(server, WorkloadSpec(sessions=12, rounds=3, filler_tokens=40, seed=7))
    assert result.counts()["ok"] == 12 and not result.stopped_early
    assert [s.index for s in result.sessions] == list(range(12))
    assert all(s.turns == 3 and s.first_bad_turn is None and len(s.request_s) == 3
               for s in result.sessions)
    assert server.keys_by_turn(1) == {f"s7-{i}" for i in range(12)}
    assert server.model_queries == 1
    last = next(r["body"] for r in server.requests if r["key"] == "s7-0" and r["turn"] == 3)
    assert last["model"] == "served-model" and last["tools"] == TOOLS
    # streamed by default, as bench_serving, with the usage chunk its token counts need
    assert last["tool_choice"] == "auto" and last["stream"] is True
    assert last["stream_options"] == {"include_usage": True}
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert last["messages"][2]["tool_calls"][0]["id"] == last["messages"][3]["tool_call_id"]
    tool_text = last["messages"][3]["content"]
    assert tool_text.startswith("read_file finished. ") and "canary=" in tool_text
    assert 40 <= len(tool_text.split()) <= 45
    assert result.summary()["rate"] == 0.0


@pytest.mark.real
def test_same_seed_same_canaries_other_seed_differs() -> None:
    def canaries(seed: int) -> list[tuple[str, int, str]]:
        server = AgentServer()
        stress(server, WorkloadSpec(sessions=4, rounds=2, filler_tokens=5), seed=seed)
        return sorted((r["key"], r["turn"], r["canary"]) for r in server.requests)

    first, again, other = canaries(1), canaries(1), canaries(2)
    assert first == again and len(first) == 8
    assert {c for _, _, c in first}.isdisjoint({c for _, _, c in other})


@pytest.mark.real
def test_model_from_spec_and_fallback_to_default() -> None:
    server = AgentServer(models=["served"])
    stress(server, WorkloadSpec(sessions=1, rounds=1, model="explicit"))
    assert server.model_queries == 0 and server.requests[0]["body"]["model"] == "explicit"
    server = AgentServer(models=None)
    stress(server, WorkloadSpec(sessions=1, rounds=1))
    assert server.model_queries == 1 and server.requests[0]["body"]["model"] == "default"


@pytest.mark.real
def test_leak_on_third_turn_of_one_session() -> None:
    leaked = render(MarkupFamily.V4, "read_file", {"path": "a", "canary": "X"})

    async def misbehave(key: str, turn: int, canary: str) -> dict[str, Any] | None:
        return completion(leaked) if (key, turn) == ("s0-5", 3) else None

    server = AgentServer(misbehave)
    result = stress(server, WorkloadSpec(sessions=10, rounds=4))
    bad = by_key(result)["s0-5"]
    # the evidence a campaign stores: the leak's triage line (every detector asked, the
    # server's parser unknown), then the markup
    assert (bad.outcome, bad.turns, bad.first_bad_turn, bad.evidence) == (
        Outcome.LEAK, 3, 3, f"[parses as deepseekv4 or deepseekv32] {leaked}")
    assert len(bad.request_s) == 3
    assert "s0-5" not in server.keys_by_turn(4)  # the session stopped at its bad turn
    summary = result.summary()
    assert (summary["counts"]["ok"], summary["corrupted"], summary["judged"]) == (9, 1, 10)
    assert summary["rate"] == pytest.approx(0.1)


@pytest.mark.real
def test_wrong_canary_is_lost_plot_over_http() -> None:
    async def misbehave(key: str, turn: int, canary: str) -> dict[str, Any] | None:
        if key == "s0-2" and turn == 2:
            return completion(None, [call(arguments={"path": "a", "canary": "STALE00000"})])
        return None

    result = stress(AgentServer(misbehave), WorkloadSpec(sessions=4, rounds=3))
    bad = by_key(result)["s0-2"]
    assert (bad.outcome, bad.first_bad_turn) == (Outcome.LOST_PLOT, 2)
    assert "STALE00000" in (bad.evidence or "")
    assert result.counts()["ok"] == 3


@pytest.mark.real
def test_http_500_invalid_json_and_disconnect_are_errors_not_corruption() -> None:
    async def misbehave(key: str, turn: int, canary: str) -> web.StreamResponse | None:
        if key == "s0-1":
            return web.Response(status=500, text="Internal Server Error: KV pool exhausted")
        if key == "s0-2" and turn == 2:
            return web.Response(text="{not json", content_type="application/json")
        return None

    result = stress(AgentServer(misbehave), WorkloadSpec(sessions=5, rounds=2))
    sessions = by_key(result)
    assert sessions["s0-1"].outcome is Outcome.ERROR
    assert (sessions["s0-1"].evidence or "").startswith("HTTP 500: Internal Server Error")
    assert sessions["s0-2"].outcome is Outcome.ERROR and sessions["s0-2"].first_bad_turn == 2
    assert "{not json" in (sessions["s0-2"].evidence or "")
    summary = result.summary()
    assert (summary["infra"], summary["corrupted"], summary["judged"], summary["rate"]) == (
        2, 0, 3, 0.0)


@pytest.mark.real
def test_dropped_connection_is_error() -> None:
    class Dropper(AgentServer):
        async def chat(self, request: web.Request) -> web.StreamResponse:
            await request.read()
            assert request.transport is not None
            request.transport.close()
            return web.Response()

    async def go() -> StressResult:
        async with serve(Dropper()) as url:
            return await run_stress(url, WorkloadSpec(sessions=2, rounds=1))

    result = asyncio.run(go())
    assert [s.outcome for s in result.sessions] == [Outcome.ERROR, Outcome.ERROR]
    assert all(s.evidence for s in result.sessions)


@pytest.mark.real
def test_connection_refused_is_error() -> None:
    async def go() -> StressResult:
        async with serve(AgentServer()) as url:
            pass  # the server is gone again: nothing listens on the port
        return await run_stress(url, WorkloadSpec(sessions=3, rounds=2, model="m"))

    result = asyncio.run(go())
    assert result.counts()["error"] == 3


@pytest.mark.real
def test_slow_turn_is_timeout() -> None:
    async def misbehave(key: str, turn: int, canary: str) -> None:
        if key == "s0-0" and turn == 2:
            await asyncio.sleep(5)

    started = time.monotonic()
    result = stress(AgentServer(misbehave), WorkloadSpec(sessions=3, rounds=2, timeout_s=0.3))
    assert time.monotonic() - started < 3
    slow = by_key(result)["s0-0"]
    assert (slow.outcome, slow.first_bad_turn) == (Outcome.TIMEOUT, 2)
    assert result.counts()["ok"] == 2 and result.summary()["infra"] == 1


@pytest.mark.real
def test_early_stop_cancels_in_flight_sessions() -> None:
    async def misbehave(key: str, turn: int, canary: str) -> None:
        if int(key.split("-")[1]) >= 8:
            await asyncio.sleep(30)  # wedged: only cancellation ends these

    seen: list[SessionResult] = []

    def on_session(session: SessionResult) -> bool:
        seen.append(session)
        return len(seen) >= 5

    server = AgentServer(misbehave)

    async def go() -> StressResult:
        async with serve(server) as url:
            result = await run_stress(url, WorkloadSpec(sessions=20, rounds=2),
                                      on_session=on_session)
            for _ in range(100):  # the server notices the dropped connections
                if server.cancelled == 12:
                    break
                await asyncio.sleep(0.02)
            return result

    started = time.monotonic()
    result = asyncio.run(go())
    assert time.monotonic() - started < 5
    assert result.stopped_early and len(result.sessions) == 5
    assert sorted(s.key for s in seen) == sorted(s.key for s in result.sessions)
    assert all(s.outcome is Outcome.OK and s.index < 8 for s in result.sessions)
    assert server.cancelled == 12


@pytest.mark.real
def test_on_session_sees_every_session_when_it_never_stops() -> None:
    seen: list[str] = []

    def on_session(session: SessionResult) -> None:
        seen.append(session.key)

    result = stress(AgentServer(), WorkloadSpec(sessions=6, rounds=1), on_session=on_session)
    assert sorted(seen) == sorted(s.key for s in result.sessions) and len(seen) == 6
    assert not result.stopped_early


@pytest.mark.real
def test_two_calls_in_one_turn_get_two_tool_results() -> None:
    async def misbehave(key: str, turn: int, canary: str) -> dict[str, Any] | None:
        if turn == 1:
            return completion(None, [
                call(arguments={"path": "a", "canary": canary}, call_id="c1"),
                call("search_code", {"query": "b", "canary": canary}, call_id="c2"),
            ])
        return None

    server = AgentServer(misbehave)
    result = stress(server, WorkloadSpec(sessions=1, rounds=2))
    assert result.sessions[0].outcome is Outcome.OK
    messages = server.requests[1]["body"]["messages"]
    assert [m.get("tool_call_id") for m in messages[3:]] == ["c1", "c2"]
    assert messages[4]["content"].startswith("search_code finished.")
