"""Streaming through the stress harness, over real HTTP against the test AgentServer.

Streams are read as they arrive and folded back into a chat.completion, so the same classifier
gives the same outcomes in both modes; broken streams are errors with evidence; TTFT and ITL are
measured on the chunks as they come.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from aiohttp import web

from experiments.markup import MarkupFamily, render
from experiments.outcomes import Outcome
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import SessionResult, StressResult, run_stress
from tests.support.agent_server import AgentServer, by_key, call, completion, serve, stress

pytestmark = pytest.mark.real

LEAK = render(MarkupFamily.DSML, "read_file", {"path": "a", "canary": "X"})


async def misbehave(key: str, turn: int, canary: str) -> dict[str, Any] | web.Response | None:
    """A mix of every way a session can end, fixed per (session, turn)."""
    script: dict[tuple[str, int], Any] = {
        ("s3-1", 2): completion("Let me read it. " + LEAK),
        ("s3-2", 1): completion("I will just answer in text."),
        ("s3-3", 3): completion(None, [call(arguments={"path": "a", "canary": "STALE00000"})]),
        ("s3-4", 2): completion(None, [call(arguments='{"path": "a", "canary": ')]),
        ("s3-5", 1): web.Response(status=500, text="KV pool exhausted"),
        ("s3-6", 2): completion(None, [call(arguments={"path": "a", "canary": canary})],
                                reasoning_content="plan </think> " + LEAK),
        ("s3-7", 1): completion(None, [
            call(arguments={"path": "a", "canary": canary}, call_id="c1"),
            call("search_code", {"query": "q", "canary": canary}, call_id="c2"),
        ]),
    }
    return script.get((key, turn))


def outcomes(result: StressResult) -> list[tuple[str, Outcome, int, int | None, str | None]]:
    return [(s.key, s.outcome, s.turns, s.first_bad_turn, s.evidence) for s in result.sessions]


def test_streaming_and_non_streaming_give_the_same_outcomes() -> None:
    plain_server, stream_server = AgentServer(misbehave), AgentServer(misbehave)
    plain = stress(plain_server, WorkloadSpec(sessions=10, rounds=3, seed=3, stream=False))
    streamed = stress(stream_server, WorkloadSpec(sessions=10, rounds=3, seed=3))
    assert outcomes(streamed) == outcomes(plain)
    assert {s.outcome for s in plain.sessions} == {
        Outcome.OK, Outcome.LEAK, Outcome.NO_TOOL, Outcome.LOST_PLOT, Outcome.BAD_ARGS,
        Outcome.ERROR}
    # the leak's triage line first (every detector asked), then the text as streamed
    assert by_key(streamed)["s3-1"].evidence == \
        "[parses as deepseekv32 or deepseekv4] Let me read it. " + LEAK
    # The conversation sent back is the same too: the folded stream equals the JSON reply.
    assert [r["body"]["messages"] for r in stream_server.requests] == [
        r["body"]["messages"] for r in plain_server.requests]
    body = stream_server.requests[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "stream_options" not in plain_server.requests[0]["body"]


def test_stream_tokens_ttft_and_itl_are_measured() -> None:
    server = AgentServer(chunk_delay=0.05)
    result = stress(server, WorkloadSpec(sessions=2, rounds=2, stream=True))
    requests = list(result.requests())
    assert len(requests) == 4 and all(r.completed and r.streamed for r in requests)
    for r in requests:
        assert r.ttft_s is not None and 0 < r.ttft_s <= r.e2e_s
        assert (r.prompt_tokens, r.completion_tokens) == (100, 12)  # from the usage chunk
        # head + 3 argument pieces carry output: 3 gaps, each after a 50 ms sleep
        assert len(r.itl_s) == 3
    summary = result.summary()
    assert summary["median_itl_ms"] >= 40
    assert summary["mean_ttft_ms"] <= summary["mean_e2e_latency_ms"]
    # ≥ 4 sleeps after TTFT
    assert summary["p99_e2e_latency_ms"] >= summary["median_e2e_latency_ms"] >= 150
    assert summary["mean_tpot_ms"] is not None
    assert summary["total_output_tokens"] == 48 and summary["total_input_tokens"] == 400


def test_non_streaming_ttft_is_e2e_and_has_no_itl() -> None:
    result = stress(AgentServer(), WorkloadSpec(sessions=2, rounds=2, stream=False))
    for r in result.requests():
        assert r.ttft_s == r.e2e_s and r.itl_s == () and not r.streamed
        assert r.completion_tokens == 12
    summary = result.summary()
    assert summary["mean_itl_ms"] is None and summary["mean_tpot_ms"] is None
    assert summary["mean_ttft_ms"] == pytest.approx(summary["mean_e2e_latency_ms"])


def raw_stream(*events: bytes, close: bool = False) -> AgentServer:
    """A server answering every request with these exact SSE bytes (then EOF, or a drop)."""

    class Raw(AgentServer):
        async def _chat(self, request: web.Request) -> web.StreamResponse:
            body = await request.json()
            self.requests.append({"body": body})
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for event in events:
                await response.write(event)
            if close:
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write_eof()
            return response

    return Raw()


CHUNK = json.dumps({"id": "c", "model": "m", "choices": [
    {"index": 0, "delta": {"content": "partial answer"}, "finish_reason": None}]})


@pytest.mark.parametrize(("events", "close", "evidence"), [
    ((f"data: {CHUNK}\n\n".encode(), b"data: {not json\n\n", b"data: [DONE]\n\n"), False,
     "SSE event 2: its data is not valid JSON (unexpected character, expected a string key at "
     "character 1: '{not json')"),
    ((f"data: {CHUNK}\n\n".encode(), b"data: [1, 2]\n\n"), False, "not an object"),
    ((f"data: {CHUNK}\n\n".encode(),), False, "before [DONE] after 1 events"),
    ((f"data: {CHUNK}\n\n".encode(),), True, "after 1 events; content so far: partial answer"),
    ((b'data: {"error": {"message": "aborted", "code": 503}}\n\n',), False, "error in stream"),
])
def test_broken_streams_are_errors_with_evidence(
    events: tuple[bytes, ...], close: bool, evidence: str
) -> None:
    server = raw_stream(*events, close=close)
    result = stress(server, WorkloadSpec(sessions=1, rounds=2, stream=True))
    session = result.sessions[0]
    assert (session.outcome, session.first_bad_turn) == (Outcome.ERROR, 1)
    assert session.evidence and evidence in session.evidence
    assert not session.requests[0].completed
    assert result.summary()["corrupted"] == 0 and result.summary()["infra"] == 1


def test_sse_split_across_writes_with_comments_and_crlf_is_read() -> None:
    whole = completion(None, [call(arguments={"path": "a", "canary": "C"})])
    payload = json.dumps({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {
        "tool_calls": [{"index": 0, **whole["choices"][0]["message"]["tool_calls"][0]}]},
        "finish_reason": "tool_calls"}]}).encode()
    half = len(payload) // 2
    server = raw_stream(b": keep-alive\r\n\r\n", b"event: chunk\r\ndata: " + payload[:half],
                        payload[half:] + b"\r\n\r\n", b"data: [DONE]")  # no final blank line
    result = stress(server, WorkloadSpec(sessions=1, rounds=1, stream=True, model="m"))
    # The canary is wrong ("C"), which proves the call was folded and judged, not errored.
    assert result.sessions[0].outcome is Outcome.LOST_PLOT


def test_early_stop_cancels_in_flight_streams() -> None:
    class Wedged(AgentServer):
        async def stream(self, request: web.Request, answer: dict[str, Any],
                         body: dict[str, Any]) -> web.StreamResponse:
            key = self.requests[-1]["key"]
            if int(key.split("-")[1]) < 6:
                return await super().stream(request, answer, body)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(f"data: {json.dumps({'choices': []})}\n\n".encode())
            await asyncio.sleep(30)  # wedged mid-stream: only the client's cancel ends it
            return response

    seen: list[SessionResult] = []

    def on_session(session: SessionResult) -> bool:
        seen.append(session)
        return len(seen) >= 4

    server = Wedged()

    async def go() -> StressResult:
        async with serve(server) as url:
            result = await run_stress(url, WorkloadSpec(sessions=16, rounds=2, stream=True),
                                      on_session=on_session)
            for _ in range(100):  # the server notices the dropped streams
                if server.cancelled >= 10:
                    break
                await asyncio.sleep(0.02)
            return result

    started = time.monotonic()
    result = asyncio.run(go())
    assert time.monotonic() - started < 5
    assert result.stopped_early and len(result.sessions) == 4
    assert all(s.outcome is Outcome.OK and s.index < 6 for s in result.sessions)
    assert server.cancelled >= 10  # every wedged stream; a finished session may add to it


def test_progress_reaches_every_turn() -> None:
    async def fail_first(key: str, turn: int, canary: str) -> dict[str, Any] | None:
        return completion("plain text") if key == "s0-0" else None

    seen: list[Any] = []
    result = stress(AgentServer(fail_first), WorkloadSpec(sessions=3, rounds=3, stream=True),
                    progress=seen.append)
    assert len(result.sessions) == 3
    last = seen[-1]
    assert (last.turns_done, last.turns_total, last.sessions_done, last.corrupted) == (9, 9, 3, 1)
    assert [p.turns_done for p in seen] == sorted(p.turns_done for p in seen)
    assert all(p.turns_total == 9 and p.sessions_total == 3 for p in seen)
