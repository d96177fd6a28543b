"""The load path's HTTP client (experiments/workload/http_client.py, http_connection.py) over
real sockets.

Small scripted HTTP/1.1 servers (asyncio streams, in the test's own loop) count the connections
and requests they see and misbehave on purpose: keep-alive reuse, stale pooled connections,
``Connection: close``, HTTP/1.0 read-to-EOF bodies, Content-Length and chunked bodies, hangs,
refusals, cancellation, non-200 answers, https with a self-signed certificate. ``post_turn`` is
checked end to end on top of it, and against the real twin process.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from experiments.agent import TOOLS
from experiments.outcomes import Outcome
from experiments.workload.classify import TurnVerdict
from experiments.workload.client import post_turn
from experiments.workload.http_client import HttpClient
from experiments.workload.http_connection import HttpError
from experiments.workload.spec import WorkloadSpec
from experiments.workload.sse import parse_sse_text
from experiments.workload.stress import run_stress_sync
from tests.conftest import TwinFactory, free_port

pytestmark = pytest.mark.real

COMPLETION = {"id": "c", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
BODY = json.dumps(COMPLETION).encode()
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "stream": False}


def reply(body: bytes = BODY, status: str = "200 OK", *extra: str) -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(*pieces: bytes, kind: str = "application/json", end: bool = True) -> bytes:
    """A chunked response of these pieces; ``end=False``: its last chunk is still to come."""
    head = (f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nTransfer-Encoding: chunked\r\n\r\n"
            ).encode()
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return head + body + (b"0\r\n\r\n" if end else b"")


def sse(*chunks: dict[str, Any]) -> list[bytes]:
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


def delta(content: str) -> dict[str, Any]:
    return {"id": "c", "model": "m", "choices": [
        {"index": 0, "delta": {"content": content}, "finish_reason": None}]}


@dataclass
class Exchange:
    """One request as the scripted server saw it."""

    connection: int  # 1 for the first connection the server accepted
    number: int  # 1 for the first request on that connection
    head: bytes
    body: bytes
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


Script = Callable[[Exchange], Awaitable[bool]]  # True: keep the connection for the next request


class Scripted:
    """An HTTP/1.1 server whose answers come from ``script``; counts what it sees."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.exchanges: list[Exchange] = []
        self.client_closed = 0  # connections the client closed (EOF or reset seen)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection, number = self.connections, 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.client_closed += 1
                    return
                found = re.search(rb"(?i)content-length:\s*(\d+)", head)
                body = await reader.readexactly(int(found.group(1)) if found else 0)
                number += 1
                exchange = Exchange(connection, number, head, body, reader, writer)
                self.exchanges.append(exchange)
                if not await self.script(exchange):
                    return
                await writer.drain()
        finally:
            writer.close()


async def eof(exchange: Exchange, server: Scripted) -> None:
    """Wait until the client closes the connection; count it."""
    if await exchange.reader.read() == b"":
        server.client_closed += 1


@asynccontextmanager
async def scripted(script: Script, tls: ssl.SSLContext | None = None
                   ) -> AsyncIterator[tuple[Scripted, str]]:
    server = Scripted(script)
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
    port = listening.sockets[0].getsockname()[1]
    try:
        yield server, f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        listening.close()


async def answer(writer: asyncio.StreamWriter, data: bytes) -> bool:
    writer.write(data)
    return True


async def get(http: HttpClient, url: str) -> tuple[int, bytes]:
    response = await http.request("POST", url, json.dumps(CHAT).encode())
    try:
        return response.status, await response.read()
    finally:
        response.close()


# ------------------------------------------------------------------------ connections and pooling


def test_keep_alive_reuses_one_connection_per_concurrent_request() -> None:
    async def go() -> tuple[Scripted, int]:
        async with scripted(lambda ex: answer(ex.writer, reply())) as (server, url), \
                HttpClient() as http:
            for _ in range(5):
                assert await get(http, f"{url}/v1/chat/completions") == (200, BODY)
            sequential = server.connections
            got = await asyncio.gather(*(get(http, url) for _ in range(4)))
            assert all(g == (200, BODY) for g in got)
            return server, sequential

    server, sequential = asyncio.run(go())
    assert sequential == 1
    assert server.connections == 4  # one pooled + three more for the four at once
    assert len(server.exchanges) == 9
    head = server.exchanges[0].head
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert re.search(rb"Host: 127\.0\.0\.1:\d+\r\n", head)


def test_a_pooled_connection_the_server_dropped_is_retried_once_on_a_fresh_one() -> None:
    async def script(ex: Exchange) -> bool:
        if ex.connection == 1 and ex.number == 2:
            return False  # keep-alive timeout raced the request: EOF before any response byte
        return await answer(ex.writer, reply())

    async def go() -> Scripted:
        async with scripted(script) as (server, url), HttpClient() as http:
            assert await get(http, url) == (200, BODY)
            assert await get(http, url) == (200, BODY)
            return server

    server = asyncio.run(go())
    assert server.connections == 2
    assert [(e.connection, e.number) for e in server.exchanges] == [(1, 1), (1, 2), (2, 1)]


def test_a_fresh_connection_closed_before_answering_is_an_error_not_retried() -> None:
    async def go() -> tuple[Scripted, str]:
        async with scripted(lambda ex: asyncio.sleep(0, False)) as (server, url), \
                HttpClient() as http:
            with pytest.raises(HttpError) as caught:
                await get(http, url)
            return server, str(caught.value)

    server, message = asyncio.run(go())
    assert server.connections == 1 and len(server.exchanges) == 1
    assert "closed the connection before responding" in message


def test_idle_connections_closed_by_the_server_or_too_old_are_not_used() -> None:
    async def script(ex: Exchange) -> bool:
        ex.writer.write(reply())
        return ex.connection != 1  # the first connection closes after answering (idle timeout)

    async def go() -> Scripted:
        async with scripted(script) as (server, url), HttpClient(idle_s=0.2) as http:
            assert await get(http, url) == (200, BODY)
            await asyncio.sleep(0.1)  # the close arrives: that connection is not pooled
            assert await get(http, url) == (200, BODY)  # connection 2, kept
            await asyncio.sleep(0.4)  # older than idle_s: dropped before the server would
            assert await get(http, url) == (200, BODY)  # connection 3
            return server

    server = asyncio.run(go())
    assert server.connections == 3
    assert [e.number for e in server.exchanges] == [1, 1, 1]


def test_connection_close_and_http_1_0_bodies_read_to_eof() -> None:
    async def script(ex: Exchange) -> bool:
        if ex.connection == 1:
            ex.writer.write(reply(BODY, "200 OK", "Connection: close"))
        else:  # HTTP/1.0, no length: the body is everything up to the close
            ex.writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n"
                            + BODY[:10])
            await ex.writer.drain()
            await asyncio.sleep(0.05)
            ex.writer.write(BODY[10:])
        return False

    async def go() -> Scripted:
        async with scripted(script) as (server, url), HttpClient() as http:
            assert await get(http, url) == (200, BODY)
            assert await get(http, url) == (200, BODY)
            assert await get(http, url) == (200, BODY)
            return server

    server = asyncio.run(go())
    assert server.connections == 3  # neither kind of connection is reused


def test_content_length_and_chunked_bodies_give_the_same_answer() -> None:
    async def script(ex: Exchange) -> bool:
        if ex.number % 2:
            return await answer(ex.writer, reply())
        return await answer(ex.writer, chunked(BODY[:7], BODY[7:30], BODY[30:]))

    async def go() -> list[Any]:
        async with scripted(script) as (server, url), HttpClient() as http:
            got = [await post_turn(http, url, CHAT, turn=1, timeout_s=5) for _ in range(2)]
            assert server.connections == 1
            return got

    (plain, plain_metrics), (pieces, pieces_metrics) = asyncio.run(go())
    assert plain == pieces == COMPLETION
    assert plain_metrics.completed and pieces_metrics.completed
    assert (pieces_metrics.prompt_tokens, pieces_metrics.completion_tokens) == (3, 1)


def test_an_interim_1xx_response_is_skipped() -> None:
    hints = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"

    async def go() -> tuple[Any, Any, int]:
        async with scripted(lambda ex: answer(ex.writer, hints + reply())) as (server, url), \
                HttpClient() as http:
            got = [await post_turn(http, url, CHAT, turn=t, timeout_s=5) for t in (1, 2)]
            return got[0][0], got[1][0], server.connections

    first, second, connections = asyncio.run(go())
    assert first == second == COMPLETION and connections == 1


# ------------------------------------------------------------------- failures as verdicts


def test_non_200_is_an_error_with_a_preview_of_the_body() -> None:
    async def go() -> Any:
        text = b"KV cache pool exhausted " + b"x" * 2000
        async with scripted(lambda ex: answer(ex.writer, reply(text, "503 Unavailable"))) as (
                _, url), HttpClient() as http:
            return await post_turn(http, url, CHAT, turn=1, timeout_s=5)

    verdict, metrics = asyncio.run(go())
    assert isinstance(verdict, TurnVerdict) and verdict.outcome is Outcome.ERROR
    assert verdict.evidence is not None
    assert verdict.evidence.startswith("HTTP 503: KV cache pool exhausted xxx")
    assert len(verdict.evidence) == len("HTTP 503: ") + 500
    assert not metrics.completed


def test_a_hanging_server_is_a_timeout_and_its_connection_is_closed() -> None:
    server: Scripted  # go() starts it

    async def script(ex: Exchange) -> bool:
        if ex.connection == 1:
            ex.writer.write(chunked(sse(delta("partial"))[0], kind="text/event-stream",
                                    end=False))
            await eof(ex, server)  # hangs mid-stream until the client gives up
            return False
        await eof(ex, server)  # says nothing at all
        return False

    async def go() -> list[Any]:
        async with scripted(script) as (found, url), HttpClient() as http:
            nonlocal server
            server = found
            got = [await post_turn(http, url, {**CHAT, "stream": True}, turn=1, timeout_s=0.3),
                   await post_turn(http, url, CHAT, turn=2, timeout_s=0.3)]
            for _ in range(100):
                if server.client_closed == 2:
                    break
                await asyncio.sleep(0.01)
            return got

    (streamed, streamed_metrics), (plain, _) = asyncio.run(go())
    assert isinstance(streamed, TurnVerdict) and streamed.outcome is Outcome.TIMEOUT
    assert streamed.evidence == ("no complete response within 0.3 s after 1 events; content so "
                                 "far: partial")
    assert streamed_metrics.ttft_s is not None and not streamed_metrics.completed
    assert isinstance(plain, TurnVerdict) and plain.outcome is Outcome.TIMEOUT
    assert plain.evidence == "no complete response within 0.3 s"
    assert server.connections == 2 and server.client_closed == 2


def test_connection_refused_is_an_error_that_says_so() -> None:
    port = free_port()

    async def go() -> Any:
        async with HttpClient() as http:
            return await post_turn(http, f"http://127.0.0.1:{port}/v1/chat/completions", CHAT,
                                   turn=1, timeout_s=5)

    verdict, metrics = asyncio.run(go())
    assert isinstance(verdict, TurnVerdict) and verdict.outcome is Outcome.ERROR
    assert verdict.evidence is not None
    assert verdict.evidence == f"cannot connect to 127.0.0.1:{port}: connection refused"
    assert not metrics.completed


def test_a_reset_mid_stream_is_an_error_with_what_came() -> None:
    async def script(ex: Exchange) -> bool:
        ex.writer.write(chunked(sse(delta("so far"))[0], kind="text/event-stream", end=False))
        await ex.writer.drain()
        ex.writer.transport.abort()
        return False

    async def go() -> Any:
        async with scripted(script) as (_, url), HttpClient() as http:
            return await post_turn(http, url, {**CHAT, "stream": True}, turn=1, timeout_s=5)

    verdict, _ = asyncio.run(go())
    assert isinstance(verdict, TurnVerdict) and verdict.outcome is Outcome.ERROR
    assert verdict.evidence is not None
    assert verdict.evidence.startswith("the server closed the connection mid-response")
    assert verdict.evidence.endswith("after 1 events; content so far: so far")


def test_cancelling_a_stream_closes_its_connection_and_pools_nothing() -> None:
    first_event = asyncio.Event()
    server: Scripted  # go() starts it

    async def script(ex: Exchange) -> bool:
        ex.writer.write(chunked(sse(delta("a"))[0], kind="text/event-stream", end=False))
        await ex.writer.drain()
        first_event.set()
        await eof(ex, server)
        return False

    async def go() -> HttpClient:
        nonlocal server
        async with scripted(script) as (found, url):
            server = found
            http = HttpClient()
            task = asyncio.create_task(
                post_turn(http, url, {**CHAT, "stream": True}, turn=1, timeout_s=30))
            await first_event.wait()
            await asyncio.sleep(0.05)  # the client has read the first event and waits for more
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(100):
                if server.client_closed:
                    break
                await asyncio.sleep(0.01)
            return http

    http = asyncio.run(go())
    assert server.client_closed == 1
    assert not any(http._idle.values()) and not http._open


# ----------------------------------------------------------------------- streams and https


def test_a_stream_is_folded_and_its_connection_pooled_even_when_the_end_lags() -> None:
    events = sse(delta("Hel"), delta("lo"), {"id": "c", "model": "m", "choices": [],
                                              "usage": {"prompt_tokens": 5,
                                                        "completion_tokens": 2}})

    async def script(ex: Exchange) -> bool:
        whole = chunked(*events, kind="text/event-stream")
        ex.writer.write(whole[:-5])  # everything up to [DONE], not the terminating chunk
        await ex.writer.drain()
        await asyncio.sleep(0.05)
        ex.writer.write(whole[-5:])
        return True

    async def go() -> list[Any]:
        async with scripted(script) as (server, url), HttpClient() as http:
            got = [await post_turn(http, url, {**CHAT, "stream": True}, turn=t, timeout_s=5)
                   for t in (1, 2)]
            assert server.connections == 1
            return got

    for answer_, metrics in asyncio.run(go()):
        assert isinstance(answer_, dict)
        assert answer_["choices"][0]["message"]["content"] == "Hello"
        assert (metrics.prompt_tokens, metrics.completion_tokens) == (5, 2)
        assert metrics.streamed and metrics.completed and len(metrics.itl_s) == 1


def call_delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"id": "c", "model": "m", "choices": [{"index": 0, "finish_reason": None, "delta": {
        "tool_calls": [{"index": index, **fields}]}}]}


PLAIN = b"".join(sse(delta("Let me "), call_delta(0, id="k", function={"name": "read_file"}),
                     call_delta(0, function={"arguments": '{"path": '}),
                     call_delta(0, function={"arguments": '"a"}'}), delta("look.")))
MULTI_LINE = json.dumps(delta("two lines")).replace(", ", ",\ndata: ", 2).encode()
STREAMS = {
    "lf": PLAIN,
    "crlf": PLAIN.replace(b"\n", b"\r\n"),
    "fields": (b": keep-alive\n\nevent: chunk\nid: 1\ndata:" + json.dumps(delta("x")).encode()
               + b"\n\n\n\ndata: " + MULTI_LINE + b"\n\n" + PLAIN.replace(b"\n\n", b"\r\n\n", 1)),
}


@pytest.mark.parametrize("size", [1, 7, 100_000])
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_sse_is_read_the_same_however_its_bytes_arrive(name: str, size: int) -> None:
    text = STREAMS[name]

    async def script(ex: Exchange) -> bool:
        ex.writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n")
        for at in range(0, len(text), size):
            piece = text[at:at + size]
            ex.writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await ex.writer.drain()
            await asyncio.sleep(0)
        ex.writer.write(b"0\r\n\r\n")
        return True

    async def go() -> Any:
        async with scripted(script) as (_, url), HttpClient() as http:
            return await post_turn(http, url, {**CHAT, "stream": True}, turn=1, timeout_s=10)

    got, metrics = asyncio.run(go())
    assert got == parse_sse_text(text.decode())
    assert metrics.completed and metrics.ttft_s is not None


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_https_with_a_trusted_certificate_and_refused_with_the_default_context(
    certificate: tuple[Path, Path],
) -> None:
    cert, key = certificate
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)

    async def go() -> tuple[Any, Any, int]:
        async with scripted(lambda ex: answer(ex.writer, reply()), server_side) as (server,
                                                                                     url):
            async with HttpClient(ssl_context=ssl.create_default_context(cafile=cert)) as http:
                trusted = [await post_turn(http, url, CHAT, turn=t, timeout_s=5) for t in (1, 2)]
            async with HttpClient() as http:
                default = await post_turn(http, url, CHAT, turn=1, timeout_s=5)
            return trusted, default, server.connections

    trusted, (default, _), connections = asyncio.run(go())
    assert [a for a, _ in trusted] == [COMPLETION, COMPLETION]
    assert connections == 1  # the two trusted requests shared it (a failed handshake is not
    # counted: the server's handler only sees connections whose handshake succeeded)
    assert isinstance(default, TurnVerdict) and default.outcome is Outcome.ERROR
    assert "CERTIFICATE_VERIFY_FAILED" in (default.evidence or "")


# ----------------------------------------------------------------------------------- the twin


def test_post_turn_against_the_twin_streamed_and_not(twin: TwinFactory) -> None:
    url = twin("--twin-latency-ms", "1")
    body = {"model": "default", "messages": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Read src/main.py. canary=ABCDEFGH12"}],
        "tools": TOOLS, "tool_choice": "auto", "max_tokens": 256}

    async def go() -> tuple[list[Any], int]:
        async with HttpClient() as http:
            got = [await post_turn(http, f"{url}/v1/chat/completions",
                                   {**body, "stream": stream, "stream_options":
                                    {"include_usage": True}} if stream else body,
                                   turn=1, timeout_s=30)
                   for stream in (False, True, True)]
            return got, http.connections

    got, connections = asyncio.run(go())
    assert connections == 1  # the twin (aiohttp.web) keeps it alive across both kinds
    plain, streamed = got[0][0], got[1][0]
    assert isinstance(plain, dict) and isinstance(streamed, dict)
    calls = plain["choices"][0]["message"]["tool_calls"]
    assert calls and calls[0]["function"]["name"]
    assert [c["function"]["name"] for c in streamed["choices"][0]["message"]["tool_calls"]] == [
        c["function"]["name"] for c in calls]
    metrics = got[1][1]
    assert metrics.streamed and metrics.ttft_s is not None and metrics.completion_tokens


def test_run_stress_sync_runs_on_uvloop_against_the_twin(twin: TwinFactory) -> None:
    url = twin("--twin-latency-ms", "1")
    loops: list[str] = []

    def progress(_: Any) -> None:
        loops.append(type(asyncio.get_running_loop()).__module__)

    result = run_stress_sync(url, WorkloadSpec(sessions=6, rounds=3, stream=True,
                                               max_concurrency=3), progress=progress)
    assert result.counts()["ok"] == 6 and len(result.sessions) == 6
    assert set(loops) == {"uvloop"}
