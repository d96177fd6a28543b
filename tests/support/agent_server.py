"""A chat-completions server that follows the agent contract and misbehaves on demand
(``AgentServer``), served by aiohttp.web on a free 127.0.0.1 port in the test's own event loop;
the responses it answers with (``completion``, ``call``, ``sse_chunks``); and ``stress``, the
harness run against it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from experiments.agent import find_canary, find_session_key
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import SessionResult, StressResult, run_stress

CANARY = "ABCDEFGH12"


def call(name: str = "read_file", arguments: Any = None, call_id: str = "call_0") -> dict[str, Any]:
    """One OpenAI tool call; dict arguments are JSON-encoded, strings are sent as they are."""
    if arguments is None:
        arguments = {"path": "setup.py", "canary": CANARY}
    encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": encoded}}


def completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning_content: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    finish = "tool_calls" if tool_calls else "stop"
    return {
        "id": "cmpl-1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112},
    }


def _pieces(text: str, count: int = 3) -> list[str]:
    step = max(1, -(-len(text) // count))
    return [text[i : i + step] for i in range(0, len(text), step)]


def sse_chunks(answer: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The chat.completion.chunk events a server streams for ``answer`` (as SGLang splits it)."""
    choice = answer["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": answer["id"], "object": "chat.completion.chunk", "model": answer["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    for field in ("reasoning_content", "content"):
        chunks += [chunk({field: piece}) for piece in _pieces(message.get(field) or "")]
    for index, tool_call in enumerate(message.get("tool_calls") or []):
        head = {"index": index, "id": tool_call.get("id"), "type": "function",
                "function": {"name": tool_call.get("function", {}).get("name"), "arguments": ""}}
        chunks.append(chunk({"tool_calls": [head]}))
        arguments = tool_call.get("function", {}).get("arguments", "")
        chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                   for piece in _pieces(arguments if isinstance(arguments, str) else "")]
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({"id": answer["id"], "object": "chat.completion.chunk",
                       "model": answer["model"], "choices": [], "usage": answer["usage"]})
    return chunks


# misbehave(key, turn, canary) -> None to follow the contract, or a JSON dict / a web response.
Misbehave = Callable[[str, int, str], Awaitable[dict[str, Any] | web.StreamResponse | None]]


class AgentServer:
    """A chat-completions server that follows the agent contract unless ``misbehave`` says not."""

    def __init__(self, misbehave: Misbehave | None = None, models: list[str] | None = None,
                 chunk_delay: float = 0.0, info: dict[str, Any] | None = None,
                 info_path: str = "/server_info"):
        self.misbehave = misbehave
        self.models = models  # None: /v1/models answers 404
        self.info = info  # what info_path answers; None: 404, as a server without it
        self.info_path = info_path  # /server_info, or older SGLang's /get_server_info
        self.chunk_delay = chunk_delay  # seconds between streamed chunks
        self.requests: list[dict[str, Any]] = []  # key, turn, canary, at, body of every request
        self.model_queries = 0
        self.model_queried_at = 0.0
        self.cancelled = 0
        self.inflight = 0
        self.max_inflight = 0
        self.started = time.monotonic()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            return await self._chat(request)
        finally:
            self.inflight -= 1

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body["messages"]
        key = find_session_key(messages[1]["content"]) or "?"
        turn = 1 + sum(1 for m in messages if m["role"] == "assistant")
        last = next(m for m in reversed(messages) if m["role"] in ("user", "tool"))
        canary = find_canary(last["content"]) or ""
        self.requests.append({"key": key, "turn": turn, "canary": canary, "body": body,
                              "at": time.monotonic() - self.started})
        try:
            answer = await self.misbehave(key, turn, canary) if self.misbehave else None
            if isinstance(answer, web.StreamResponse):
                return answer
            if answer is None:
                answer = completion(None, [call(arguments={"path": "a.py", "canary": canary},
                                                call_id=f"call_{key}_{turn}")])
            if body.get("stream"):
                return await self.stream(request, answer, body)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return web.json_response(answer)

    async def stream(self, request: web.Request, answer: dict[str, Any],
                     body: dict[str, Any]) -> web.StreamResponse:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for number, chunk in enumerate(sse_chunks(answer, include_usage)):
            if number and self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def list_models(self, request: web.Request) -> web.StreamResponse:
        self.model_queries += 1
        self.model_queried_at = time.monotonic() - self.started
        if self.models is None:
            raise web.HTTPNotFound()
        return web.json_response({"object": "list",
                                  "data": [{"id": m, "object": "model"} for m in self.models]})

    async def server_info(self, request: web.Request) -> web.StreamResponse:
        if self.info is None or request.path != self.info_path:
            raise web.HTTPNotFound()
        return web.json_response(self.info)

    def keys_by_turn(self, turn: int) -> set[str]:
        return {r["key"] for r in self.requests if r["turn"] == turn}


@asynccontextmanager
async def serve(server: AgentServer) -> AsyncIterator[str]:
    """Serve ``server`` on a free 127.0.0.1 port in the running loop; yields its base URL."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_get("/v1/models", server.list_models)
    app.router.add_get("/server_info", server.server_info)
    app.router.add_get("/get_server_info", server.server_info)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def stress(server: AgentServer, spec: WorkloadSpec, **kwargs: Any) -> StressResult:
    async def go() -> StressResult:
        async with serve(server) as url:
            return await run_stress(url, spec, **kwargs)

    return asyncio.run(go())


def by_key(result: StressResult) -> dict[str, SessionResult]:
    return {s.key: s for s in result.sessions}
