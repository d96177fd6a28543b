"""The twin's HTTP server: SGLang's endpoints over aiohttp, with real in-flight concurrency.

Each chat request holds a running slot for its service time (``asyncio.sleep``), so N concurrent
sessions really are N requests in flight: the fault model's ``min_inflight`` and the
``num_running_reqs`` gauge see the same load a real server would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from experiments.twin import logs
from experiments.twin.agent_script import build_reply, estimate_tokens, session_key
from experiments.twin.args import server_args
from experiments.twin.faults import Decision, Effect, FaultModel, decide
from experiments.twin.metrics import Metrics
from experiments.twin.protocol import (
    ChatRequest,
    completion_body,
    error_body,
    stream_chunks,
    usage,
)

VERSION = "0.5.23-twin"
WEDGE_LOG_EVERY_S = 30.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class TwinConfig:
    ns: argparse.Namespace
    flags: dict[str, Any]  # keyed by flag name without dashes, as fault conditions name them
    env: dict[str, str]  # the env vars the twin reads, as they were at start
    faults: FaultModel
    fault_model_path: str | None
    capacity: logs.Capacity

    @property
    def served_model_name(self) -> str:
        return str(self.ns.served_model_name or self.ns.model_path)


class Twin:
    def __init__(self, config: TwinConfig) -> None:
        self.config = config
        self.ns = config.ns
        self.metrics = Metrics(config.served_model_name, config.capacity.max_total_num_tokens)
        self.ready = False
        self.inflight = 0  # chat requests admitted and not answered: running + queued
        self._running = 0
        self._queued = 0
        self._rng = random.Random(self.ns.twin_seed)
        self._slots = asyncio.Semaphore(config.capacity.max_running_requests)

    def app(self) -> web.Application:
        @web.middleware
        async def access_log(request: web.Request, handler: Handler) -> web.StreamResponse:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            where = f"{peer[0]}:{peer[1]}" if peer else "-"
            try:
                response = await handler(request)
            except web.HTTPException as exc:  # the router's 404 and 405 arrive as exceptions
                logs.access(where, request.method, request.path_qs, exc.status, exc.reason)
                raise
            logs.access(where, request.method, request.path_qs, response.status, response.reason)
            return response

        app = web.Application(middlewares=[access_log], client_max_size=256 * 1024**2)
        app.add_routes([
            web.get("/health", self.health),
            web.get("/health_generate", self.health),
            web.get("/v1/models", self.models),
            web.get("/get_server_info", self.server_info),
            web.get("/metrics", self.metrics_text),
            web.post("/flush_cache", self.flush_cache),
            web.post("/v1/chat/completions", self.chat),
        ])
        return app

    async def warm_up(self) -> None:
        """Startup log lines spread over the startup delay; /health turns 200 at its end."""
        delay, cap = max(0.0, self.ns.twin_startup_delay), self.config.capacity
        started = time.monotonic()
        await asyncio.sleep(delay * 0.3)
        for line in logs.loading_lines(cap):
            logs.log(line, rank=0)
        if not self.ns.disable_cuda_graph:
            await asyncio.sleep(delay * 0.3)
            for line in logs.graph_lines(cap, elapsed_s=delay * 0.3):
                logs.log(line, rank=0)
        logs.log(logs.limits_line(cap), rank=0)
        await asyncio.sleep(max(0.0, delay - (time.monotonic() - started)))
        # Printed before /health turns 200, so a reader who saw 200 finds the line in the log.
        logs.log("The server is fired up and ready to roll!")
        self.ready = True

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    async def models(self, request: web.Request) -> web.Response:
        name = self.config.served_model_name
        model = {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                 "root": name, "max_model_len": self.config.capacity.context_len}
        return web.json_response({"object": "list", "data": [model]})

    async def server_info(self, request: web.Request) -> web.Response:
        cap, path = self.config.capacity, self.config.fault_model_path
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
        info = {
            **server_args(self.ns),
            "version": VERSION,
            "max_total_num_tokens": cap.max_total_num_tokens,
            "index_k_dtype": cap.index_k_dtype,
            "env": self.config.env,
            "twin": {"fault_model": path, "fault_model_sha256": digest,
                     "twin_seed": self.ns.twin_seed, "latency_ms": self.ns.twin_latency_ms,
                     "pid": os.getpid()},
        }
        return web.json_response(info)

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def flush_cache(self, request: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.\n")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        if not self.ready:
            return _error(503, "The server is not ready yet.", "ServiceUnavailableError")
        try:
            chat = ChatRequest.model_validate(await request.json())
        except ValueError as exc:  # invalid JSON, or pydantic's ValidationError
            return _error(400, _describe(exc), "BadRequestError")
        messages = [m.model_dump() for m in chat.messages]
        tools = [t.model_dump() for t in chat.tools or []]
        rid = uuid.uuid4().hex
        prompt_tokens = estimate_tokens(json.dumps(messages))
        started = time.monotonic()
        self.inflight += 1
        try:
            decision = decide(
                self.config.faults, twin_seed=self.ns.twin_seed, flags=self.config.flags,
                env=self.config.env, inflight=self.inflight, session_key=session_key(messages),
            )
            if decision and self.ns.log_level == "debug":
                logs.log(f"twin fault rid={rid} rule={decision.rule} effect={decision.effect}")
            async with self._slot(prompt_tokens):
                return await self._serve(request, chat, messages, tools, decision, rid,
                                         prompt_tokens)
        finally:
            self.inflight -= 1
            self.metrics.e2e_latency.observe(time.monotonic() - started)

    @contextlib.asynccontextmanager
    async def _slot(self, tokens: int) -> AsyncIterator[None]:
        """A running slot (at most --max-running-requests); the rest wait in the queue."""
        self._queued += 1
        self.metrics.queued.inc()
        try:
            await self._slots.acquire()
        finally:
            self._queued -= 1
            self.metrics.queued.dec()
        self._running += 1
        self.metrics.running.inc()
        self.metrics.hold_tokens(tokens)
        usage_now = min(1.0, tokens / max(1, self.config.capacity.max_total_num_tokens))
        logs.log(f"Prefill batch. #new-seq: 1, #new-token: {tokens}, #cached-token: 0, "
                 f"token usage: {usage_now:.2f}, #running-req: {self._running}, "
                 f"#queue-req: {self._queued}", rank=0)
        try:
            yield
        finally:
            self._slots.release()
            self._running -= 1
            self.metrics.running.dec()
            self.metrics.release_tokens(tokens)

    async def _serve(
        self, request: web.Request, chat: ChatRequest, messages: list[dict[str, Any]],
        tools: list[dict[str, Any]], decision: Decision | None, rid: str, prompt_tokens: int,
    ) -> web.StreamResponse:
        effect = decision.effect if decision else None
        if effect is Effect.WEDGE:
            await self._wedge(rid)
            return _error(503, "The request was aborted.", "ServiceUnavailableError")
        await asyncio.sleep(self._latency_s())
        if effect is Effect.ERROR:
            return _error(500, "Internal server error.", "InternalServerError")
        reply = build_reply(messages, tools, chat.tool_choice, decision, self.ns.tool_call_parser)
        completion = estimate_tokens((reply.content or "")
                                     + "".join(c.arguments for c in reply.tool_calls))
        self.metrics.prompt_tokens.inc(prompt_tokens)
        self.metrics.generation_tokens.inc(completion)
        use = usage(prompt_tokens, completion)
        model = chat.model or self.config.served_model_name
        if not chat.stream:
            return web.json_response(completion_body(rid, model, reply, use))
        include_usage = bool((chat.stream_options or {}).get("include_usage"))
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for chunk in stream_chunks(rid, model, reply, use if include_usage else None):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _wedge(self, rid: str) -> None:
        """Hang like a stuck transfer until the wedge timeout or the client's disconnect."""
        limit = self.ns.twin_wedge_s
        started = time.monotonic()
        logs.log(f"rid={rid} KVPoll status: WaitingForInput", rank=0)
        try:
            while (left := limit - (time.monotonic() - started)) > 0:
                await asyncio.sleep(min(left, WEDGE_LOG_EVERY_S))
                if limit - (time.monotonic() - started) > 0:
                    waited = time.monotonic() - started
                    logs.log(f"rid={rid} KVPoll status: WaitingForInput for {waited:.0f}s", rank=0)
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client goes away (handler_cancellation).
            logs.log(f"Aborted by AbortReq(rid='{rid}'): client disconnected", rank=0)
            raise
        logs.log(f"Aborted by AbortReq(rid='{rid}'): waiting timeout {limit:.0f}s", rank=0)

    def _latency_s(self) -> float:
        return max(0.0, self.ns.twin_latency_ms * (1 + self._rng.uniform(-0.1, 0.1)) / 1000)


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response(error_body(message, kind, status), status=status)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "body"
        return f"Invalid request: {where}: {error['msg']}"
    return f"Invalid request body: {exc}"


async def serve(config: TwinConfig) -> None:
    """Run until SIGTERM or SIGINT."""
    twin = Twin(config)
    runner = web.AppRunner(twin.app(), access_log=None, handler_cancellation=True,
                           shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, config.ns.host, config.ns.port)
    await site.start()
    print(f"INFO:     Started server process [{os.getpid()}]", flush=True)
    print(f"INFO:     Uvicorn running on http://{config.ns.host}:{config.ns.port} "
          "(Press CTRL+C to quit)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    warm = asyncio.create_task(twin.warm_up())
    await stop.wait()
    warm.cancel()
    await runner.cleanup()
