"""Broken server replies are errors, never corruption; responses are bounded (issue 11, hole 6).

A real HTTP server on loopback (tests/support/scripted_http.py) sends what a broken server
sends: invalid UTF-8, NaN and other non-JSON numbers, the schema's types wrong, heads and bodies
without end. Each must end as ``error`` (or ``timeout``) with evidence saying what was wrong,
while what the model got wrong inside a well-formed reply stays corruption (experiments/
workload/reply.py draws the line). Memory is checked by counting the bytes Python keeps
(tracemalloc), never by the clock; how long a flood takes against its timeout is measured in
bench/flood.py. The parsers of server output are fuzzed with hypothesis (a few hundred inputs
each here; bench/fuzz_parsers.py runs 10,000 and counts).
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from experiments.agent import find_session_key
from experiments.collect import MAX_EVENT_TEXT, log_events, parse_metrics
from experiments.outcomes import CORRUPTION, Outcome
from experiments.workload.classify import TurnVerdict
from experiments.workload.client import post_turn
from experiments.workload.http_client import HttpClient
from experiments.workload.http_connection import HIGH_WATER, READ_MAX
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import run_stress
from tests.support.parser_fuzz import TARGETS, Target
from tests.support.scripted_http import (
    Script,
    ScriptedServer,
    chunk,
    flood,
    head,
    sse,
    whole,
)

TOOL = "read_file"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}


def reply(message: str) -> bytes:
    """A non-streamed completion around a raw ``message`` object (bytes spliced as written)."""
    return (b'{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,'
            b'"finish_reason":"tool_calls","message":' + message.encode("utf-8", "surrogatepass")
            + b'}],"usage":{"prompt_tokens":3,"completion_tokens":1}}')


def called(name: str = '"read_file"', arguments: str = '"{\\"path\\": \\"a\\"}"',
           extra: str = "") -> str:
    return ('{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function",'
            f'"function":{{"name":{name},"arguments":{arguments}}}}}]{extra}}}')


# (reply, outcome, evidence): what a server sent, what the session must say, and a piece of why.
PLAIN_CASES: list[tuple[bytes, Outcome, str]] = [
    # the server broke the protocol: error
    (reply('{"role":"assistant","content":"caf\xe9 au lait"}').replace(b"\xc3\xa9", b"\xe9"),
     Outcome.ERROR, "not valid UTF-8"),
    (reply(called(arguments="NaN")), Outcome.ERROR, "not valid JSON"),
    (reply('{"role":"assistant","content":"plain text"}').replace(b'"completion_tokens":1',
                                                                 b'"completion_tokens":1e400'),
     Outcome.ERROR, "not valid JSON"),
    (reply('{"role":"assistant","content":"\\ud800 lone"}'), Outcome.ERROR, "not valid JSON"),
    (reply(called(name="[]")), Outcome.ERROR, "function.name is list"),
    (reply(called(name="7")), Outcome.ERROR, "function.name is int"),
    (reply(called(arguments='{"path": "a"}')), Outcome.ERROR, "function.arguments is dict"),
    (reply('{"role":"assistant","content":null,"tool_calls":{}}'), Outcome.ERROR,
     "tool_calls is dict"),
    (reply('{"role":"assistant","content":["<tool_call>"]}'), Outcome.ERROR,
     "message.content is list"),
    (reply('{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":'
           '{"name":"read_file","arguments":"{}"}}]}'), Outcome.ERROR, "tool_calls[0].id is"),
    (reply('{"role":"assistant","content":null,"tool_calls":["read_file"]}'), Outcome.ERROR,
     "tool_calls[0] is str"),
    # the model got it wrong inside a well-formed reply: corruption, as before
    (reply(called(arguments='"{\\"path\\": \\"a\\", \\"canary\\": "')), Outcome.BAD_ARGS,
     "not valid JSON"),
    (reply(called(arguments='"{\\"path\\": NaN}"')), Outcome.BAD_ARGS, "not valid JSON"),
    (reply(called(arguments='""')), Outcome.BAD_ARGS, "not valid JSON"),
    (reply(called(name='"delete_repo"')), Outcome.BAD_ARGS, "unknown function 'delete_repo'"),
    (reply('{"role":"assistant","content":"<tool_call>{}</tool_call>"}'), Outcome.LEAK,
     "<tool_call>"),
    (reply('{"role":"assistant","content":"I will answer in prose.","tool_calls":[]}'),
     Outcome.NO_TOOL, "answer in prose"),
]


def _event(delta: str) -> bytes:
    return ('{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
            f'"delta":{delta},"finish_reason":null}}]}}').encode("utf-8", "surrogatepass")


HEAD_CALL = '{"tool_calls":[{"index":0,"id":"call_0","type":"function","function":{"name":"%s"}}]}'
ARGS = '{"tool_calls":[{"index":0,"function":{"arguments":%s}}]}'
STREAM_CASES: list[tuple[list[bytes], Outcome, str]] = [
    # broken
    ([_event('{"content":"caf\xe9"}').replace(b"\xc3\xa9", b"\xe9")], Outcome.ERROR,
     "SSE event 1: its data is not valid UTF-8"),
    ([_event('{"content":"hi"}'), _event('{"content":NaN}')], Outcome.ERROR,
     "SSE event 2: its data is not valid JSON"),
    ([_event('{"tool_calls":[{"index":0,"id":"call_0","function":{"name":[]}}]}')],
     Outcome.ERROR, "function.name is list"),
    ([_event(HEAD_CALL % TOOL), _event(ARGS % "5")], Outcome.ERROR, "function.arguments is int"),
    ([_event('{"tool_calls":{}}')], Outcome.ERROR, "delta.tool_calls is dict"),
    ([b'{"id":"c","choices":{}}'], Outcome.ERROR, "choices is dict"),
    ([_event('{"content":5}')], Outcome.ERROR, "delta.content is int"),
    ([_event('{"tool_calls":[{"index":0,"type":"function","function":{"name":"read_file"}}]}'),
      _event(ARGS % '"{}"')], Outcome.ERROR, "tool_calls[0].id is missing"),
    # the model's fault, streamed
    ([_event(HEAD_CALL % TOOL), _event(ARGS % '"{\\"path\\": "')], Outcome.BAD_ARGS,
     "not valid JSON"),
    ([_event('{"content":"<｜DSML｜invoke name=\\"read_file\\">"}')], Outcome.LEAK, "DSML"),
]


def scripted_by_session(replies: list[Script]) -> ScriptedServer:
    """Session ``s0-N`` (seed 0) gets ``replies[N]``."""

    def script(body: bytes) -> AsyncIterator[bytes]:
        messages = json.loads(body)["messages"]
        key = find_session_key(messages[1]["content"]) or "s0-0"
        return replies[int(key.rsplit("-", 1)[1])](body)

    return ScriptedServer(script)


def stress_against(server: ScriptedServer, spec: WorkloadSpec) -> list[tuple[Outcome, str]]:
    async def go() -> list[tuple[Outcome, str]]:
        async with server.serve() as url:
            result = await run_stress(url, spec)
        return [(s.outcome, s.evidence or "") for s in result.sessions]

    return asyncio.run(go())


def _judged(got: list[tuple[Outcome, str]], cases: list[Any]) -> None:
    for (outcome, evidence), (sent, expected, why) in zip(got, cases, strict=True):
        assert outcome is expected and why in evidence, (sent, outcome, evidence)
        if expected is Outcome.ERROR:
            assert outcome not in CORRUPTION


@pytest.mark.real
def test_broken_json_replies_are_errors_and_model_faults_stay_corruption(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECT_TRIAGE", "builtin")  # the leak's triage is not what is tested
    server = scripted_by_session([whole(body) for body, _, _ in PLAIN_CASES])
    spec = WorkloadSpec(sessions=len(PLAIN_CASES), rounds=1, model="m")
    _judged(stress_against(server, spec), PLAIN_CASES)


@pytest.mark.real
def test_broken_streams_are_errors_and_model_faults_stay_corruption(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECT_TRIAGE", "builtin")
    server = scripted_by_session([sse([*events, b"[DONE]"]) for events, _, _ in STREAM_CASES])
    spec = WorkloadSpec(sessions=len(STREAM_CASES), rounds=1, model="m", stream=True)
    _judged(stress_against(server, spec), STREAM_CASES)


CAP = 1 << 20
SSE_START = head(content_type="text/event-stream") + b"Transfer-Encoding: chunked\r\n\r\n"
BIG_EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 16000 + b'"}}]}\n\n'
# Floods of 8 caps, then the server closes: without a cap they all end some other way.
FLOODS: dict[str, tuple[Script, bool, str]] = {
    "announced": (flood(head() + b"Content-Length: 1000000000\r\n\r\n", b" " * 65536, 8 * CAP),
                  False, f"announces 1000000000 bytes, over the {CAP} of max_response_bytes"),
    "chunked": (flood(head() + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(b"{"),
                      b" " * 65536, 8 * CAP),
                False, f"over {CAP} bytes (max_response_bytes)"),
    "to-eof": (flood(head() + b"\r\n{", b" " * 65536, 8 * CAP), False, f"over {CAP} bytes"),
    "events": (flood(SSE_START, BIG_EVENT, 8 * CAP), True, f"over {CAP} bytes"),
    "one-line": (flood(SSE_START + chunk(b"data: "), b"a" * 65536, 8 * CAP), True,
                 f"over {CAP} bytes"),
    "head": (flood(b"HTTP/1.1 200 OK\r\nX-Endless: ", b"a" * 65536, 8 * CAP), False,
             "the response head is over 65536 bytes"),
}


@pytest.mark.real
@pytest.mark.parametrize("name", sorted(FLOODS))
def test_a_response_over_the_cap_is_an_error_and_memory_stays_bounded(name: str) -> None:
    script, stream, why = FLOODS[name]

    async def go() -> TurnVerdict:
        server = ScriptedServer(script)
        async with server.serve() as url, HttpClient(max_response_bytes=CAP) as http:
            answer, _ = await post_turn(http, f"{url}/v1/chat/completions",
                                        {**CHAT, "stream": stream}, turn=1, timeout_s=60)
        assert isinstance(answer, TurnVerdict)
        return answer

    tracemalloc.start()
    try:
        verdict = asyncio.run(go())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert verdict.outcome is Outcome.ERROR and why in (verdict.evidence or ""), verdict
    # The flood was 8 MiB; what Python held at any moment stayed near one cap.
    assert peak < 3 * CAP, f"peak {peak} bytes kept"


@pytest.mark.real
def test_a_reader_behind_pauses_the_socket_and_reads_in_slices() -> None:
    """Backpressure and fair reads: what keeps a flood from holding the loop (and with it every
    other request's timeout) and from filling memory faster than it is read."""
    size = 4 << 20

    async def go() -> None:
        server = ScriptedServer(flood(head() + b"Content-Length: %d\r\n\r\n" % size,
                                      b"b" * 65536, size))
        async with server.serve() as url, HttpClient() as http:
            response = await http.request("POST", f"{url}/v1/chat/completions", b"{}")
            while response.unread <= HIGH_WATER:  # the server fills the socket; nobody reads
                await asyncio.sleep(0.01)
            assert not response.reading  # paused at the high-water mark, in that same read
            assert response.unread <= HIGH_WATER + (256 << 10)  # plus one read of the socket
            other = asyncio.Event()

            async def ready() -> None:
                other.set()

            waiting = asyncio.create_task(ready())
            pieces = [await response.read_some()]
            assert other.is_set(), "read_some with more waiting lets the loop run first"
            while piece := await response.read_some():
                pieces.append(piece)
            await waiting
        assert sum(map(len, pieces)) == size and max(map(len, pieces)) <= READ_MAX

    asyncio.run(go())


@pytest.mark.real
def test_a_trickled_head_ends_at_the_deadline_with_evidence() -> None:
    """The timeout is one deadline on the whole request: a server that sends a byte of its head
    every 10 ms forever never lets a per-read timeout fire, and still ends as a timeout."""

    async def go() -> TurnVerdict:
        server = ScriptedServer(flood(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a", gap_s=0.01))
        async with server.serve() as url, HttpClient() as http:
            answer, metrics = await post_turn(http, f"{url}/v1/chat/completions", CHAT, turn=1,
                                              timeout_s=0.3)
        assert not metrics.completed and server.sent > 1
        assert isinstance(answer, TurnVerdict)
        return answer

    verdict = asyncio.run(go())
    assert verdict.outcome is Outcome.TIMEOUT
    assert verdict.evidence == "no complete response within 0.3 s"


@pytest.mark.pure
@pytest.mark.timeout(60)  # the regexes before were quadratic: these lines took ~40 minutes
def test_huge_log_lines_are_read_in_linear_time() -> None:
    # 2 MB lines of a runaway log that almost match: the old ``transfer.*time(d)?\s*out``
    # backtracked once per "transfer" over the rest of the line.
    text = "\n".join(["KV transfer " * 200_000, "Allocating " * 200_000,
                      "transfer " * 1000 + "timed out", "Allocating 9 GB host memory"])
    assert [(e.line_no, e.kind) for e in log_events(text)] == [
        (3, "transfer_timeout"), (4, "startup")]
    assert all(len(e.text) <= MAX_EVENT_TEXT for e in log_events(text))


@pytest.mark.pure
def test_metric_samples_that_are_not_finite_are_gaps_not_values() -> None:
    """Prometheus allows NaN and ±Inf; SQLite stores NaN as NULL, which the store refuses (a
    hit rate of 0/0 would fail the trial's write), and JSON has neither."""
    text = ("sglang:cache_hit_rate NaN\nsglang:token_usage +Inf\nsglang:num_queue_reqs -Inf\n"
            "sglang:num_running_reqs 3\n")
    assert [(s.name, s.value) for s in parse_metrics(text, "decode", 0.0)] == [
        ("sglang:num_running_reqs", 3.0)]


@pytest.mark.pure
@pytest.mark.parametrize("target", TARGETS, ids=lambda target: target.name)
def test_parsers_of_server_output_keep_their_promises_on_hostile_input(
        target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECT_TRIAGE", "builtin")

    # hypothesis's default count of inputs: the counted run, 10,000 a parser, is
    # bench/fuzz_parsers.py's (RELIABILITY.md "Fuzzing")
    @settings(max_examples=100, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(target.inputs)
    def holds(case: Any) -> None:
        target.check(case)

    holds()
