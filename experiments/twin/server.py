"""The twin's HTTP server: SGLang's endpoints over aiohttp, with real in-flight concurrency.

Each chat request holds a running slot for its service time (``asyncio.sleep``), so N concurrent
sessions really are N requests in flight: the fault model's ``min_inflight`` and the
``num_running_reqs`` gauge see the same load a real server would. The chat flows of the three
roles (combined, prefill, decode) are in ``chat.py``; the PD rendezvous in ``bootstrap.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import os
import re
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from experiments.twin import logs
from experiments.twin.args import server_args
from experiments.twin.bootstrap import (
    PrefillLink,
    Rooms,
    bootstrap_app,
    env_seconds,
    serve_bootstrap,
)
from experiments.twin.chat import chat, engine_of
from experiments.twin.faults import FaultModel, FileFacts, RoleView, env_names
from experiments.twin.latency import Jitter, LatencyModel, PrefixCache, ServerLatency
from experiments.twin.metrics import Metrics
from experiments.twin.tree import facts_json
from experiments.twin.variation import Variation, rate_now, speed_now

VERSION = "0.5.23-twin"
WEDGE_LOG_EVERY_S = 30.0
BATCH_LOG_EVERY_S = 1.0
# Env vars a decode may ask its prefill for: names only, and nothing that looks like a secret.
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET = re.compile(r"KEY$|TOKEN|SECRET|PASS|CREDENTIAL|AUTH", re.IGNORECASE)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class TwinConfig:
    ns: argparse.Namespace
    flags: dict[str, Any]  # keyed by flag name without dashes, as fault conditions name them
    env: dict[str, str]  # the env vars the twin reads, as they were at start
    faults: FaultModel
    fault_model_path: str | None
    capacity: logs.Capacity
    # The files of the tree the fault rules name, as read at start (tree.py), and the tree.
    files: Mapping[str, FileFacts] = field(default_factory=dict)
    tree: str | None = None
    # What this start drew of the fault model's noise between trials (None: i.i.d.).
    variation: Variation | None = None

    @property
    def served_model_name(self) -> str:
        return str(self.ns.served_model_name or self.ns.model_path)

    @property
    def mode(self) -> str:
        return str(self.ns.disaggregation_mode)


class Twin:
    def __init__(self, config: TwinConfig) -> None:
        self.config = config
        self.ns = config.ns
        self.start_id = uuid.uuid4().hex  # changes at every start: decodes re-read their prefill
        self.metrics = Metrics(config.served_model_name, config.capacity.max_total_num_tokens)
        cap = config.capacity
        # The time model reads the live load: KV tokens held by the running requests, and the
        # speed this start drew (its node's, the drift at the hour).
        self.latency = ServerLatency(LatencyModel.from_args(self.ns, cap.max_total_num_tokens),
                                     lambda: self.metrics.used,
                                     speed=lambda: speed_now(config.variation, time.time()))
        self.jitter = Jitter(self.ns.twin_seed)
        # A decode server keeps no prefix cache (SGLang forces a chunk cache there); HiCache's
        # host pool bounds the tokens it keeps.
        self.prefix_cache = PrefixCache(
            bool(self.ns.enable_hierarchical_cache) and config.mode != "decode",
            max_tokens=cap.hicache_tokens)
        self.view = RoleView(flags=config.flags, env=config.env)
        self.ready = False
        self.inflight = 0  # chat requests admitted and not answered: running + queued + PD queues
        self.running = 0
        self.queued = 0
        self.bootstrap_queue = 0
        self.transfer_queue = 0
        self._slots = asyncio.Semaphore(config.capacity.max_running_requests)
        self.rooms = Rooms()
        self.link = PrefillLink(
            env_names(config.faults),
            env_seconds(config.env, "SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300.0))

    def rate_scale(self, variation: Variation | None) -> float:
        """The multiplier of the fault model's rates now, of this start's draw or (a decode
        deciding with its prefill's model) of the prefill's."""
        return rate_now(variation, time.time())

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

        async def handle_chat(request: web.Request) -> web.StreamResponse:
            return await chat(self, request)

        app = web.Application(middlewares=[access_log, self.api_key_check],
                              client_max_size=256 * 1024**2)
        app.add_routes([
            web.get("/health", self.health),
            web.get("/health_generate", self.health),
            web.get("/v1/models", self.models),
            web.get("/get_server_info", self.server_info),
            web.get("/server_info", self.server_info),  # today's SGLang's name of it
            web.get("/metrics", self.metrics_text),
            web.post("/flush_cache", self.flush_cache),
            web.post("/v1/chat/completions", handle_chat),
        ])
        return app

    async def warm_up(self) -> None:
        """Startup log lines spread over the startup delay; /health turns 200 at its end. The
        engine starts first: a GPU engine's torch import and CUDA set-up are startup, not the
        first request's latency."""
        engine_of(self)
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

    async def batch_log(self) -> None:
        """SGLang's periodic ``Decode batch.`` line while requests run (shows ``cuda graph``:
        False without graphs or above the graph batch bound, and the retracted requests)."""
        while True:
            await asyncio.sleep(BATCH_LOG_EVERY_S)
            if self.running == 0 or self.config.mode == "prefill":
                continue
            model = self.latency.model
            logs.log(logs.decode_batch_line(
                running=self.running, tokens=self.metrics.used, usage=self.metrics.usage,
                transfer=self.transfer_queue, queued=self.queued,
                cuda_graph=self.running <= model.graph_max_bs_decode,
                throughput=self.metrics.throughput(), pd=self.config.mode == "decode",
                retracted=model.retracted(self.running, self.metrics.used)), rank=0)

    @contextlib.asynccontextmanager
    async def slot(self, tokens: int) -> AsyncIterator[None]:
        """A running slot (at most --max-running-requests); the rest wait in the queue."""
        self.queued += 1
        self.metrics.queued.inc()
        try:
            await self._slots.acquire()
        finally:
            self.queued -= 1
            self.metrics.queued.dec()
        self.running += 1
        self.metrics.running.inc()
        self.metrics.hold_tokens(tokens)
        try:
            yield
        finally:
            self._slots.release()
            self.running -= 1
            self.metrics.running.dec()
            self.metrics.release_tokens(tokens)

    async def wedge(self, rid: str) -> None:
        """Hang like a stuck KV transfer until the wedge timeout or the client's disconnect."""
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

    @web.middleware
    async def api_key_check(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """With ``--api-key``, every endpoint but the probes wants the key (SGLang's rule:
        /health*, /ready*, /metrics* stay open for probes and scrapers)."""
        key = self.ns.api_key
        if key and not request.path.startswith(("/health", "/ready", "/metrics")):
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), key.encode()):
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    async def models(self, request: web.Request) -> web.Response:
        name = self.config.served_model_name
        model = {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                 "root": name, "max_model_len": self.config.capacity.context_len}
        return web.json_response({"object": "list", "data": [model]})

    def info(self, extra_env: Sequence[str] = ()) -> dict[str, Any]:
        """``/get_server_info``: ServerArgs, limits, the env read, and the twin's own facts."""
        cap, path = self.config.capacity, self.config.fault_model_path
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
        env = dict(self.config.env)
        for name in extra_env:
            if _ENV_NAME.match(name) and not _SECRET.search(name) and name in os.environ:
                env[name] = os.environ[name]
        return {
            **server_args(self.ns),
            "version": VERSION,
            "max_total_num_tokens": cap.max_total_num_tokens,
            "index_k_dtype": cap.index_k_dtype,
            "env": env,
            "twin": {"fault_model": path, "fault_model_sha256": digest,
                     "fault_model_doc": None if self.config.faults.empty
                     else self.config.faults.model_dump(mode="json"),
                     "twin_seed": self.ns.twin_seed, "latency_ms": self.ns.twin_latency_ms,
                     "flags": self.config.flags, "start_id": self.start_id,
                     "tree": self.config.tree, "files": facts_json(self.config.files),
                     "noise": None if self.config.variation is None
                     else self.config.variation.as_json(time.time()),
                     "pid": os.getpid()},
        }

    async def server_info(self, request: web.Request) -> web.Response:
        names = [n for n in request.query.get("env", "").split(",") if n]
        return web.json_response(self.info(names))

    async def metrics_text(self, request: web.Request) -> web.Response:
        self.metrics.cache_hit_rate.set(self.prefix_cache.hit_rate)
        return web.Response(body=self.metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def flush_cache(self, request: web.Request) -> web.Response:
        self.prefix_cache.flush()
        return web.Response(text="Cache flushed.\n")


async def serve(config: TwinConfig) -> None:
    """Run until SIGTERM or SIGINT."""
    twin = Twin(config)
    runners: list[web.AppRunner] = []
    try:
        if config.mode == "prefill":
            route = {"rank_ip": config.ns.host, "rank_port": config.ns.port,
                     "tp_size": config.ns.tp_size, "dp_size": config.ns.dp_size,
                     "start_id": twin.start_id}
            runners.append(await serve_bootstrap(bootstrap_app(twin.rooms, twin.info, route),
                                                 config.ns.host,
                                                 config.ns.disaggregation_bootstrap_port))
        runner = web.AppRunner(twin.app(), access_log=None, handler_cancellation=True,
                               shutdown_timeout=1.0)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, config.ns.host, config.ns.port).start()
        await twin.link.open()
        print(f"INFO:     Started server process [{os.getpid()}]", flush=True)
        print(f"INFO:     Uvicorn running on http://{config.ns.host}:{config.ns.port} "
              "(Press CTRL+C to quit)", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        tasks = [asyncio.create_task(twin.warm_up()), asyncio.create_task(twin.batch_log())]
        await stop.wait()
        for task in tasks:
            task.cancel()
    finally:
        await twin.link.close()
        for each in reversed(runners):
            await each.cleanup()
