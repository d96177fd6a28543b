"""The twin's PD router, like ``python -m sglang_router.launch_router --pd-disaggregation``.

    python -m experiments.twin.router --port 8000 --prefill http://H:30000 [8998] \\
        --decode http://H:30001
    (also: python -m experiments.twin --router ...)

For each chat request it picks a prefill and a decode, adds ``bootstrap_host`` (the prefill's
host), ``bootstrap_port`` (given after the prefill URL, else the prefill's
``disaggregation_bootstrap_port`` from its /get_server_info) and a random ``bootstrap_room``, and
sends the request to both at once, as sglang_router does; the decode's answer (streamed or not)
is the client's. The prefill's one-token answer is discarded. ``/health`` is 200 only when every
worker's is; ``/v1/models`` comes from a decode; ``/get_server_info`` lists every worker's.
Run-time errors of the workers pass through with their status; an unreachable worker is a 503.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from experiments.twin import logs
from experiments.twin.protocol import error_body

POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
HEALTH_TIMEOUT_S = 5.0
PREFILL_GRACE_S = 5.0  # after the decode answered, how long the prefill's answer may still take


@dataclass
class Prefill:
    url: str
    bootstrap_port: int | None  # None: ask the prefill's /get_server_info
    learnt_port: int | None = field(default=None)

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.twin.router",
        description="The twin's prefill-decode router (like sglang_router.launch_router "
        "--pd-disaggregation).")
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--pd-disaggregation", action="store_true",
        help="accepted as sglang_router takes it; this router is always prefill-decode")
    add("--prefill", nargs="+", action="append", required=True, metavar="URL [BOOTSTRAP_PORT]",
        help="a prefill server, optionally with its bootstrap port (repeatable)")
    add("--decode", action="append", required=True, metavar="URL",
        help="a decode server (repeatable)")
    add("--policy", choices=POLICIES, default="round_robin",
        help="worker choice: random, else round robin (cache_aware, power_of_two: round robin)")
    add("--prefill-policy", choices=POLICIES, default=None)
    add("--decode-policy", choices=POLICIES, default=None)
    add("--request-timeout-secs", type=float, default=1800.0)
    add("--worker-startup-timeout-secs", type=float, default=600.0, help="accepted, unused")
    add("--max-payload-size", type=int, default=256 * 1024**2)
    add("--log-level", default="info")
    return parser


def parse_prefills(parser: argparse.ArgumentParser, values: list[list[str]]) -> list[Prefill]:
    prefills = []
    for value in values:
        if len(value) > 2:
            parser.error(f"argument --prefill: expected URL [BOOTSTRAP_PORT], got {value}")
        port: int | None = None
        if len(value) == 2 and value[1].lower() != "none":
            try:
                port = int(value[1])
            except ValueError:
                parser.error(f"argument --prefill: invalid bootstrap port: {value[1]!r}")
        prefills.append(Prefill(value[0].rstrip("/"), port))
    return prefills


class Picker:
    def __init__(self, count: int, policy: str) -> None:
        self._count, self._random = count, policy == "random"
        self._cycle = itertools.cycle(range(count))

    def pick(self) -> int:
        return random.randrange(self._count) if self._random else next(self._cycle)


class Router:
    def __init__(self, ns: argparse.Namespace, prefills: list[Prefill]) -> None:
        self.ns = ns
        self.prefills = prefills
        self.decodes = [url.rstrip("/") for url in ns.decode]
        self._pick_prefill = Picker(len(prefills), ns.prefill_policy or ns.policy)
        self._pick_decode = Picker(len(self.decodes), ns.decode_policy or ns.policy)
        self._http: aiohttp.ClientSession | None = None

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self._http is not None, "the router's client session opens with the app"
        return self._http

    async def _session(self, app: web.Application) -> AsyncIterator[None]:
        """The client session lives as long as the app (aiohttp's cleanup context)."""
        self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        yield
        await self._http.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.ns.max_payload_size)
        app.cleanup_ctx.append(self._session)
        app.add_routes([
            web.get("/health", self.health),
            web.get("/health_generate", self.health),
            web.get("/v1/models", self.models),
            web.get("/get_server_info", self.server_info),
            web.get("/server_info", self.server_info),  # today's SGLang's name of it
            web.post("/flush_cache", self.flush_cache),
            web.post("/v1/chat/completions", self.chat),
        ])
        return app

    async def _status(self, url: str) -> int:
        try:
            timeout = aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)
            async with self.http.get(f"{url}/health", timeout=timeout) as answer:
                return answer.status
        except (aiohttp.ClientError, TimeoutError):
            return 0

    async def health(self, request: web.Request) -> web.Response:
        urls = [p.url for p in self.prefills] + self.decodes
        statuses = await asyncio.gather(*(self._status(url) for url in urls))
        return web.Response(status=200 if all(s == 200 for s in statuses) else 503)

    async def models(self, request: web.Request) -> web.Response:
        return await self._relay_get(f"{self.decodes[0]}/v1/models")

    async def server_info(self, request: web.Request) -> web.Response:
        async def info(url: str) -> Any:
            try:
                async with self.http.get(f"{url}/get_server_info") as answer:
                    return await answer.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                return {"url": url, "error": repr(exc)}

        prefill = await asyncio.gather(*(info(p.url) for p in self.prefills))
        decode = await asyncio.gather(*(info(url) for url in self.decodes))
        return web.json_response({"prefill": prefill, "decode": decode})

    async def flush_cache(self, request: web.Request) -> web.Response:
        for url in [p.url for p in self.prefills] + self.decodes:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self.http.post(f"{url}/flush_cache"):
                    pass
        return web.Response(text="Cache flushed.\n")

    async def _relay_get(self, url: str) -> web.Response:
        try:
            async with self.http.get(url) as answer:
                return web.Response(body=await answer.read(), status=answer.status,
                                    content_type=answer.content_type)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return _error(503, f"worker unreachable: {exc!r}")

    async def _bootstrap_port(self, prefill: Prefill) -> int:
        if prefill.bootstrap_port is not None:
            return prefill.bootstrap_port
        if prefill.learnt_port is None:
            async with self.http.get(f"{prefill.url}/get_server_info") as answer:
                info = await answer.json(content_type=None)
            prefill.learnt_port = int(info["disaggregation_bootstrap_port"])
        return prefill.learnt_port

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError as exc:
            return _error(400, f"Invalid request body: {exc}", 400)
        if not isinstance(body, dict):
            return _error(400, "Invalid request body: not a JSON object", 400)
        prefill = self.prefills[self._pick_prefill.pick()]
        decode = self.decodes[self._pick_decode.pick()]
        try:
            port = await self._bootstrap_port(prefill)
        except (aiohttp.ClientError, TimeoutError, ValueError, LookupError, TypeError) as exc:
            return _error(503, f"prefill {prefill.url} unreachable: {exc!r}")
        pd_body = {**body, "bootstrap_host": prefill.host, "bootstrap_port": port,
                   "bootstrap_room": random.getrandbits(63)}
        prefill_task = asyncio.create_task(self._prefill(prefill, {**pd_body, "stream": False}))
        ok = False
        try:
            response, ok = await self._decode(request, decode, pd_body)
            return response
        finally:
            await self._settle(prefill, prefill_task, ok)

    async def _prefill(self, prefill: Prefill, body: dict[str, Any]) -> None:
        timeout = aiohttp.ClientTimeout(total=self.ns.request_timeout_secs)
        async with self.http.post(f"{prefill.url}/v1/chat/completions", json=body,
                                  timeout=timeout) as answer:
            await answer.read()
            if answer.status != 200:
                logs.log(f"prefill {prefill.url} answered {answer.status}")

    async def _settle(self, prefill: Prefill, task: asyncio.Task[None], ok: bool) -> None:
        """Wait briefly for the prefill's own answer; cancel it when the decode failed."""
        if not ok:
            prefill.learnt_port = None  # a restarted prefill may have moved its bootstrap port
        if not task.done():
            await asyncio.wait({task}, timeout=PREFILL_GRACE_S if ok else 0)
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError, TimeoutError):
            await task

    async def _decode(self, request: web.Request, decode: str,
                      body: dict[str, Any]) -> tuple[web.StreamResponse, bool]:
        timeout = aiohttp.ClientTimeout(total=self.ns.request_timeout_secs)
        try:
            async with self.http.post(f"{decode}/v1/chat/completions", json=body,
                                      timeout=timeout) as answer:
                if answer.status != 200 or answer.content_type != "text/event-stream":
                    data = await answer.read()
                    return web.Response(body=data, status=answer.status,
                                        content_type=answer.content_type), answer.status == 200
                response = web.StreamResponse(
                    status=200, headers={"Content-Type": "text/event-stream",
                                         "Cache-Control": "no-cache"})
                await response.prepare(request)
                async for piece in answer.content.iter_any():
                    await response.write(piece)
                await response.write_eof()
                return response, True
        except (aiohttp.ClientError, TimeoutError) as exc:
            return _error(503, f"decode {decode} unreachable: {exc!r}"), False


def _error(status: int, message: str, code: int | None = None) -> web.Response:
    kind = "BadRequestError" if status == 400 else "ServiceUnavailableError"
    return web.json_response(error_body(message, kind, code or status), status=status)


async def serve(router: Router) -> None:
    runner = web.AppRunner(router.app(), access_log=None, handler_cancellation=True,
                           shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, router.ns.host, router.ns.port).start()
        prefills = [f"{p.url} (bootstrap {p.bootstrap_port or 'from server info'})"
                    for p in router.prefills]
        logs.log(f"Starting router on {router.ns.host}:{router.ns.port} | mode: PD | "
                 f"prefill: {json.dumps(prefills)} | decode: {json.dumps(router.decodes)} | "
                 f"policy: {router.ns.policy}")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
        prefills = parse_prefills(parser, ns.prefill)
    except SystemExit as exc:  # argparse: --help (0) or bad input (2, message already printed)
        return int(exc.code or 0)
    try:
        asyncio.run(serve(Router(ns, prefills)))
    except OSError as exc:
        print(f"error: cannot serve on {ns.host}:{ns.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
