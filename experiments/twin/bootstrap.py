"""Prefill-decode disaggregation: the bootstrap rendezvous between the two roles of a pool.

As with SGLang (mooncake backend), the router adds ``bootstrap_host``, ``bootstrap_port`` and
``bootstrap_room`` to a request and sends it to the prefill and to the decode at once. The
prefill serves a bootstrap server on ``--disaggregation-bootstrap-port``; its request waits in
the bootstrap queue until the decode has connected for that room, then runs its prefill and
"transfers" the KV cache: it completes the room. The decode's request waits in the transfer queue
on a long poll of the prefill's bootstrap server until the room completes (``WaitingForInput``).

The twin's wire protocol on the bootstrap port (a twin extension; real SGLang moves KV by RDMA):

- ``POST /twin/transfer/{room}`` body ``{"wait_s": S}``: the decode's handshake for ``room``;
  answers when the prefill has completed it: ``{"status": "done", "start_id", "prompt_tokens",
  "cached_tokens"}`` or ``{"status": "failed", "reason"}``; 504 ``{"status": "pending"}`` after S.
- ``GET /get_server_info?env=A,B``: the prefill's server info (flags, env, fault model,
  ``start_id``); ``env`` asks for env vars the decode's fault rules read on the prefill.
- ``GET /health``, ``GET /route``.

Each transfer answer names the prefill's ``start_id`` (new at every start). The decode re-reads
the prefill's server info whenever it changes, so a prefill restarted with other flags or env
changes the decode's fault decisions from its first request on: never a stale view.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from experiments.twin import logs
from experiments.twin.faults import FaultModel, FileFacts, RoleView
from experiments.twin.variation import Variation

ROOM_GRACE_S = 60.0  # a completed room the decode never collects is forgotten after this


@dataclass
class Room:
    handshake: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    result: dict[str, Any] | None = None


class Rooms:
    """The prefill's open transfers, created by whichever side touches a room first."""

    def __init__(self) -> None:
        self._rooms: dict[int, Room] = {}

    def get(self, room_id: int) -> Room:
        return self._rooms.setdefault(room_id, Room())

    def finish(self, room_id: int, result: dict[str, Any]) -> None:
        room = self.get(room_id)
        if room.done.is_set():
            return
        room.result = result
        room.done.set()
        asyncio.get_running_loop().call_later(ROOM_GRACE_S, self.drop, room_id, room)

    def drop(self, room_id: int, room: Room | None = None) -> None:
        if room is None or self._rooms.get(room_id) is room:
            self._rooms.pop(room_id, None)

    def __len__(self) -> int:
        return len(self._rooms)


def bootstrap_app(rooms: Rooms, info: Callable[[list[str]], dict[str, Any]],
                  route: dict[str, Any]) -> web.Application:
    """The prefill's bootstrap server: the rendezvous and its server info for decodes."""

    async def transfer(request: web.Request) -> web.Response:
        try:
            room_id = int(request.match_info["room"])
            wait_s = float((await request.json()).get("wait_s", 300.0))
        except (ValueError, TypeError, AttributeError):
            return web.json_response({"status": "failed", "reason": "bad transfer request"},
                                     status=400)
        room = rooms.get(room_id)
        room.handshake.set()
        try:
            await asyncio.wait_for(room.done.wait(), timeout=wait_s)
        except TimeoutError:
            rooms.drop(room_id, room)
            return web.json_response({"status": "pending"}, status=504)
        except asyncio.CancelledError:  # the decode gave up: forget a room nobody completes
            if not room.done.is_set():
                rooms.drop(room_id, room)
            raise
        rooms.drop(room_id, room)  # collected: the decode has the KV
        return web.json_response(room.result)

    async def server_info(request: web.Request) -> web.Response:
        names = [n for n in request.query.get("env", "").split(",") if n]
        return web.json_response(info(names))

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def get_route(request: web.Request) -> web.Response:
        return web.json_response(route)

    app = web.Application()
    app.add_routes([
        web.post("/twin/transfer/{room}", transfer),
        web.get("/get_server_info", server_info),
        web.get("/health", health),
        web.get("/route", get_route),
    ])
    return app


def env_seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A timeout from the env the server read (SGLANG_DISAGGREGATION_*_TIMEOUT)."""
    try:
        return float(env.get(name, default))
    except ValueError:
        return default


class TransferFailed(Exception):
    """The KV never came: prefill unreachable, failed, or the waiting timeout passed."""


@dataclass(frozen=True)
class PrefillView:
    start_id: str
    role: RoleView
    fault_model: FaultModel | None
    files: Mapping[str, FileFacts] = field(default_factory=dict)  # its tree, as it read it
    variation: Variation | None = None  # what its start drew of its model's noise


class PrefillLink:
    """The decode's side: KV transfers and what it knows of each prefill (by start id)."""

    def __init__(self, env_names: set[str], waiting_timeout_s: float) -> None:
        self._env_names = sorted(env_names)
        self._waiting_timeout_s = waiting_timeout_s
        self._views: dict[str, PrefillView] = {}
        self._http: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        # No pool limit: every request in the transfer queue holds one long poll.
        self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def transfer(self, host: str, port: int, room: int) -> dict[str, Any]:
        assert self._http is not None
        url = f"http://{host}:{port}/twin/transfer/{room}"
        wait_s = self._waiting_timeout_s
        timeout = aiohttp.ClientTimeout(total=wait_s + 10)
        try:
            async with self._http.post(url, json={"wait_s": wait_s}, timeout=timeout) as answer:
                result = await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise TransferFailed(f"bootstrap {host}:{port} unreachable: {exc!r}") from exc
        status = result.get("status") if isinstance(result, dict) else None
        if status == "pending":
            raise TransferFailed(f"KV transfer timed out after {wait_s:g}s (waiting timeout)")
        if status != "done":
            reason = result.get("reason") if isinstance(result, dict) else result
            raise TransferFailed(f"prefill reported failure: {reason}")
        return dict(result)

    async def view(self, host: str, port: int, start_id: str) -> PrefillView:
        """The prefill's flags, env and fault model as of its current start."""
        key = f"{host}:{port}"
        known = self._views.get(key)
        if known is not None and known.start_id == start_id:
            return known
        assert self._http is not None
        url = f"http://{key}/get_server_info"
        try:
            async with self._http.get(url, params={"env": ",".join(self._env_names)},
                                      timeout=aiohttp.ClientTimeout(total=10)) as answer:
                info = await answer.json(content_type=None)
            twin = info["twin"]
            doc = twin.get("fault_model_doc")
            view = PrefillView(
                start_id=str(twin["start_id"]),
                role=RoleView(flags=dict(twin["flags"]), env=dict(info["env"])),
                fault_model=FaultModel.model_validate(doc) if doc else None,
                files={str(path): FileFacts.from_json(each)
                       for path, each in (twin.get("files") or {}).items()},
                variation=Variation.from_json(twin["noise"]) if twin.get("noise") else None,
            )
        except (aiohttp.ClientError, TimeoutError, ValueError, LookupError, TypeError) as exc:
            raise TransferFailed(f"cannot read the prefill's server info at {key}: {exc!r}") \
                from exc
        self._views[key] = view
        logs.log(f"Bootstrap: prefill at {key} start_id={view.start_id} "
                 f"env={dict(view.role.env)}")
        return view


async def serve_bootstrap(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError:
        with contextlib.suppress(Exception):
            await runner.cleanup()
        raise
    logs.log(logs.bootstrap_line(host, port))
    return runner
