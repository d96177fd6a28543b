"""An instant OpenAI chat-completions stub for the stress-harness benchmark (bench/harness.py).

Every POST to /v1/chat/completions is answered at once with one ``read_file`` tool call whose
``canary`` argument echoes the last ``canary=XYZ`` of the request body (the latest user or tool
message), so the agent contract (experiments/agent.py) is met and bisect's classifier says ``ok``.
Streaming follows SGLang's shape as the twin renders it: a role chunk, the call's name, its
arguments in 4-character pieces (one event per token), a finish chunk, a usage chunk, ``[DONE]``,
each event its own HTTP chunk (chunked transfer encoding, as uvicorn sends them).

A raw ``asyncio.Protocol`` HTTP/1.1 server with keep-alive: no framework, no JSON parsing of the
request, so one core serves far more requests than any Python client can send. ``GET /stats`` counts
the chat requests and the connections accepted so far.

    python bench/stub_server.py --port 18000   # prints "ready PORT" once listening
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import time

PIECE_CHARS = [4]  # argument characters per streamed event: the twin's 4 characters a token
_STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
_CANARY_RE = re.compile(rb"canary=([A-Za-z0-9]+)")
_MODELS = b'{"object":"list","data":[{"id":"stub","object":"model","owned_by":"bench"}]}'


def _response(status: str, body: bytes, kind: bytes = b"application/json") -> bytes:
    return (b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: " + kind
            + b"\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\nConnection: keep-alive\r\n\r\n" + body)


_NOT_FOUND = _response("404 Not Found", b'{"error":"not found"}')
_OK_MODELS = _response("200 OK", _MODELS)
_OK_HEALTH = _response("200 OK", b"{}")
_SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
             b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")


def _arguments(canary: str) -> str:
    return json.dumps({"path": "src/main.py", "canary": canary})


def completion(rid: int, canary: str, prompt_tokens: int) -> bytes:
    arguments = _arguments(canary)
    tokens = 1 + -(-len(arguments) // PIECE_CHARS[0])
    call = {"id": f"call_{rid}", "type": "function",
            "function": {"name": "read_file", "arguments": arguments}}
    body = {
        "id": f"stub-{rid}", "object": "chat.completion", "created": int(time.time()),
        "model": "stub",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None,
                     "message": {"role": "assistant", "content": None,
                                 "reasoning_content": None, "tool_calls": [call]}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens,
                  "total_tokens": prompt_tokens + tokens},
    }
    return _response("200 OK", json.dumps(body).encode())


def _event(head: str, delta: str, finish: str = "null") -> bytes:
    data = (f'data: {head}"choices":[{{"index":0,"delta":{delta},"logprobs":null,'
            f'"finish_reason":{finish}}}]}}\n\n').encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


def stream(rid: int, canary: str, prompt_tokens: int) -> bytes:
    arguments = _arguments(canary)
    head = (f'{{"id":"stub-{rid}","object":"chat.completion.chunk","created":{int(time.time())},'
            f'"model":"stub",')
    size = PIECE_CHARS[0]
    pieces = [arguments[i:i + size] for i in range(0, len(arguments), size)]
    call = ('{"tool_calls":[{"index":0,"id":"call_' + str(rid) + '","type":"function",'
            '"function":{"name":"read_file","arguments":""}}]}')
    events = [_event(head, '{"role":"assistant","content":""}'), _event(head, call)]
    events += [_event(head, '{"tool_calls":[{"index":0,"function":{"arguments":'
                      + json.dumps(piece) + "}}]}") for piece in pieces]
    events.append(_event(head, "{}", '"tool_calls"'))
    tokens = 1 + len(pieces)
    usage = (f'data: {head}"choices":[],"usage":{{"prompt_tokens":{prompt_tokens},'
             f'"completion_tokens":{tokens},"total_tokens":{prompt_tokens + tokens}}}}}\n\n'
             ).encode()
    done = b"data: [DONE]\n\n"
    return b"".join([_SSE_HEAD, *events, b"%x\r\n%s\r\n" % (len(usage), usage),
                     b"%x\r\n%s\r\n" % (len(done), done), b"0\r\n\r\n"])


class Stats:
    requests = 0
    connections = 0


class _Http(asyncio.Protocol):
    """HTTP/1.1 requests with Content-Length bodies, any number per connection."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        Stats.connections += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            start = end + 4
            if len(self.buffer) < start + length:
                return
            body = self.buffer[start:start + length]
            self.buffer = self.buffer[start + length:]
            assert self.transport is not None
            self.transport.write(self._answer(head.split(b" ", 2), body))

    def _answer(self, request_line: list[bytes], body: bytes) -> bytes:
        method, path = request_line[0], request_line[1] if len(request_line) > 1 else b""
        if method == b"GET" and path == b"/v1/models":
            return _OK_MODELS
        if method == b"GET" and path == b"/health":
            return _OK_HEALTH
        if method == b"GET" and path == b"/stats":
            return _response("200 OK", json.dumps(
                {"requests": Stats.requests, "connections": Stats.connections}).encode())
        if method != b"POST" or path != b"/v1/chat/completions":
            return _NOT_FOUND
        Stats.requests += 1
        found = _CANARY_RE.findall(body)
        canary = found[-1].decode() if found else "NONE"
        prompt_tokens = len(body) // 4
        if _STREAM_RE.search(body):
            return stream(Stats.requests, canary, prompt_tokens)
        return completion(Stats.requests, canary, prompt_tokens)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Http, host, port, backlog=4096, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"ready {port}", flush=True)
    async with server:
        await stop.wait()
    print(f"served {Stats.requests} requests on {Stats.connections} connections", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18000)
    parser.add_argument("--piece-chars", type=int, default=PIECE_CHARS[0],
                        help="argument characters per streamed event (4: one event per token)")
    args = parser.parse_args()
    PIECE_CHARS[0] = args.piece_chars
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
