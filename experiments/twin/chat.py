"""``/v1/chat/completions`` in each role: combined, prefill, decode (see bootstrap.py for PD).

- combined: decide (fault model) -> running slot -> prefill -> first token -> decode steps.
- prefill: bootstrap queue until the decode connects for the room -> running slot -> prefill
  -> complete the room (the KV "transfer") -> a one-token answer the router discards.
- decode: transfer queue until the prefill completed the room -> decide, knowing the prefill's
  flags and env -> running slot -> the first token came with the KV -> decode steps.

The server that writes the reply decides, once per request. Streaming writes tokens at the
decode pace (TTFT and ITL mean something); a plain answer waits the same time, so one seed gives
the same outcomes either way.

The engine (engine.py, ``--engine``) reads the session's index keys at the decode turn, in the
running slot, after the prefill (combined) or the KV transfer (decode): with the planted engine
the read is always clean; a stale read of the GPU engine is a ``leak`` (``STALE_READ``) unless the
fault model already decided the request.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import ValidationError

from experiments.twin import engine, logs, tree
from experiments.twin.agent_script import Reply, build_reply, estimate_tokens, session_key
from experiments.twin.bootstrap import TransferFailed, env_seconds
from experiments.twin.faults import Decision, Effect, FaultModel, FileFacts, RoleView, decide
from experiments.twin.protocol import (
    SSE_DONE,
    ChatRequest,
    ChunkMaker,
    completion_body,
    error_body,
    merge_deltas,
    sse,
    token_deltas,
    usage,
)
from experiments.twin.variation import Variation

if TYPE_CHECKING:
    from experiments.twin.server import Twin

# The engine of each twin, made at its first chat request (a twin reads its settings at start).
_ENGINES: weakref.WeakKeyDictionary[Any, engine.Engine] = weakref.WeakKeyDictionary()
MIN_TICK_S = 0.002  # below this per token, write several tokens per wake-up (spares the CPU)
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


@dataclass(frozen=True)
class Turn:
    """One chat request being served."""

    rid: str
    chat: ChatRequest
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    prompt_tokens: int  # messages and tools as JSON, 4 characters a token
    session: str
    jitter: float
    started: float

    @property
    def round(self) -> int:
        """The session's round this request is (1 for the first): per-request draws key on it."""
        return 1 + sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def model(self) -> str | None:
        return self.chat.model


async def chat(twin: Twin, request: web.Request) -> web.StreamResponse:
    if not twin.ready:
        return _error(503, "The server is not ready yet.", "ServiceUnavailableError")
    try:
        parsed = ChatRequest.model_validate(await request.json())
    except ValueError as exc:  # invalid JSON, or pydantic's ValidationError
        return _error(400, _describe(exc), "BadRequestError")
    messages = [m.model_dump() for m in parsed.messages]
    tools = [t.model_dump() for t in parsed.tools or []]
    turn = Turn(
        rid=uuid.uuid4().hex, chat=parsed, messages=messages, tools=tools,
        prompt_tokens=estimate_tokens(json.dumps(messages) + json.dumps(tools)),
        session=session_key(messages), jitter=twin.jitter.draw(), started=time.monotonic(),
    )
    twin.inflight += 1
    try:
        if twin.config.mode == "prefill":
            return await _prefill_role(twin, request, turn)
        if twin.config.mode == "decode":
            return await _decode_role(twin, request, turn)
        return await _combined(twin, request, turn)
    finally:
        twin.inflight -= 1
        twin.metrics.e2e_latency.observe(time.monotonic() - turn.started)


def _decide(twin: Twin, turn: Turn, model: FaultModel, roles: dict[str, RoleView],
            files: Mapping[str, FileFacts], variation: Variation | None) -> Decision | None:
    """``variation``: the start whose draw of the model's noise scales its rates (this
    server's, or the prefill's whose model a decode uses)."""
    decision = decide(
        model, twin_seed=twin.ns.twin_seed, flags=twin.config.flags, env=twin.config.env,
        inflight=twin.inflight, session_key=turn.session, roles=roles,
        context_tokens=turn.prompt_tokens, request=turn.round, files=files,
        rate_scale=twin.rate_scale(variation),
    )
    if decision and twin.ns.log_level == "debug":
        logs.log(f"twin fault rid={turn.rid} rule={decision.rule} effect={decision.effect} "
                 f"round={turn.round}")
    return decision


async def _combined(twin: Twin, request: web.Request, turn: Turn) -> web.StreamResponse:
    # One process plays both roles: prefill and decode conditions read this server.
    decision = _decide(twin, turn, twin.config.faults,
                       {"prefill": twin.view, "decode": twin.view}, twin.config.files,
                       twin.config.variation)
    effect = decision.effect if decision else None
    async with twin.slot(turn.prompt_tokens):
        if effect is Effect.WEDGE:  # holds its running slot, as a stuck request does
            await twin.wedge(turn.rid)
            return _error(503, "The request was aborted.", "ServiceUnavailableError")
        await _run_prefill(twin, turn)
        if effect is Effect.ERROR:
            return _error(500, "Internal server error.", "InternalServerError")
        try:
            decision = await _read_index_k(twin, turn, decision, _hicache(twin.view))
        except engine.EngineError as exc:
            return _engine_failed(turn, exc)
        return await _emit(twin, request, turn, _reply(twin, turn, decision))


async def _run_prefill(twin: Twin, turn: Turn) -> int:
    """Compute the prompt (HiCache hits cost less); returns the cached tokens."""
    cached = twin.prefix_cache.lookup(turn.session, turn.prompt_tokens)
    pd = twin.config.mode == "prefill"
    logs.log(logs.prefill_batch_line(
        new_tokens=turn.prompt_tokens - cached, cached=cached, usage=twin.metrics.usage,
        running=twin.running, queued=twin.queued,
        bootstrap=twin.bootstrap_queue if pd else None), rank=0)
    await asyncio.sleep(twin.latency.prefill_s(turn.prompt_tokens, cached, turn.jitter))
    twin.prefix_cache.store(turn.session, turn.prompt_tokens)
    twin.metrics.prompt_tokens.inc(turn.prompt_tokens)
    twin.metrics.cached_tokens.inc(cached)
    return cached


async def _prefill_role(twin: Twin, request: web.Request, turn: Turn) -> web.StreamResponse:
    room_id = turn.chat.bootstrap_room
    if room_id is None:
        return _error(400, "This is a prefill server (--disaggregation-mode prefill): send "
                      "requests through the PD router, which adds bootstrap_room.",
                      "BadRequestError")
    room = twin.rooms.get(room_id)
    result: dict[str, Any] = {"status": "failed", "reason": "prefill aborted"}
    try:
        twin.bootstrap_queue += 1
        twin.metrics.bootstrap_queue.inc()
        timeout = env_seconds(twin.config.env, "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300.0)
        try:
            await asyncio.wait_for(room.handshake.wait(), timeout=timeout)
        except TimeoutError:
            result = {"status": "failed", "reason": "bootstrap timeout"}
            twin.metrics.transfer_failed.inc()
            logs.log(f"Prefill bootstrap failed for request rid={turn.rid} "
                     f"room={room_id}: bootstrap timeout after {timeout:g}s", rank=0)
            return _error(500, "KV transfer failed: bootstrap timeout", "InternalServerError")
        finally:
            twin.bootstrap_queue -= 1
            twin.metrics.bootstrap_queue.dec()
        async with twin.slot(turn.prompt_tokens):
            cached = await _run_prefill(twin, turn)
        twin.metrics.ttft.observe(time.monotonic() - turn.started)
        twin.metrics.generated(1)  # a prefill server makes exactly the first token
        result = {"status": "done", "start_id": twin.start_id,
                  "prompt_tokens": turn.prompt_tokens, "cached_tokens": cached}
    finally:
        twin.rooms.finish(room_id, result)
    return await _prefill_answer(twin, request, turn)


async def _decode_role(twin: Twin, request: web.Request, turn: Turn) -> web.StreamResponse:
    host, port, room = turn.chat.bootstrap_host, turn.chat.bootstrap_port, turn.chat.bootstrap_room
    if host is None or port is None or room is None:
        return _error(400, "This is a decode server (--disaggregation-mode decode): send "
                      "requests through the PD router, which adds bootstrap_host, "
                      "bootstrap_port and bootstrap_room.", "BadRequestError")
    twin.transfer_queue += 1
    twin.metrics.transfer_queue.inc()
    try:
        result = await twin.link.transfer(host, port, room)
        prefill = await twin.link.view(host, port, str(result.get("start_id")))
    except TransferFailed as exc:
        return _transfer_failed(twin, turn, str(exc))
    finally:
        twin.transfer_queue -= 1
        twin.metrics.transfer_queue.dec()
    # The decode's own fault model, or its prefill's when it was started without one (with
    # the files of the prefill's tree that model names, as the prefill read them).
    # Its rates scale with the draw of the start whose model it is.
    model, files, variation = twin.config.faults, twin.config.files, twin.config.variation
    if twin.config.fault_model_path is None and prefill.fault_model is not None:
        model, files, variation = prefill.fault_model, prefill.files, prefill.variation
    decision = _decide(twin, turn, model, {"prefill": prefill.role, "decode": twin.view}, files,
                       variation)
    effect = decision.effect if decision else None
    if effect is Effect.WEDGE:  # as if the KV never arrived: stuck in the transfer queue
        twin.transfer_queue += 1
        twin.metrics.transfer_queue.inc()
        try:
            await twin.wedge(turn.rid)
        finally:
            twin.transfer_queue -= 1
            twin.metrics.transfer_queue.dec()
        return _error(503, "The request was aborted.", "ServiceUnavailableError")
    if effect is Effect.ERROR:
        return _transfer_failed(twin, turn, "KVTransferError: the KV arrived incomplete")
    async with twin.slot(turn.prompt_tokens):
        await asyncio.sleep(twin.latency.base_s * turn.jitter)  # the decode's own scheduling
        try:
            decision = await _read_index_k(twin, turn, decision,
                                           _hicache(twin.view) or _hicache(prefill.role))
        except engine.EngineError as exc:
            return _engine_failed(turn, exc)
        return await _emit(twin, request, turn, _reply(twin, turn, decision))


def engine_of(twin: Twin) -> engine.Engine:
    """The twin's engine, made (its settings read, its device started) at the first call."""
    made = _ENGINES.get(twin)
    if made is None:
        root = tree.tree_root(twin.ns.twin_tree, twin.config.fault_model_path)
        made = engine.make(twin.ns.engine, twin.config.env, root)
        _ENGINES[twin] = made
    return made


def _hicache(role: RoleView) -> bool:
    return bool(role.flags.get("enable-hierarchical-cache"))


async def _read_index_k(twin: Twin, turn: Turn, decision: Decision | None,
                        hicache: bool) -> Decision | None:
    """The decode turn's index-K read; a stale one leaks unless the request was decided."""
    read = engine.IndexKRead(rid=turn.rid, session=turn.session, round=turn.round,
                             hicache=hicache)
    result = await engine_of(twin).read(read)
    return decision or (engine.STALE_READ if result.stale else None)


def _engine_failed(turn: Turn, exc: engine.EngineError) -> web.Response:
    logs.log(f"Engine failed for request rid={turn.rid}: {exc}", rank=0)
    return _error(500, f"Internal server error: {exc}", "InternalServerError")


def _transfer_failed(twin: Twin, turn: Turn, reason: str) -> web.Response:
    twin.metrics.transfer_failed.inc()
    logs.log(f"Decode transfer failed for request rid={turn.rid}: {reason}", rank=0)
    return _error(500, f"KV transfer failed: {reason}", "InternalServerError")


def _reply(twin: Twin, turn: Turn, decision: Decision | None) -> Reply:
    return build_reply(turn.messages, turn.tools, turn.chat.tool_choice, decision,
                       twin.ns.tool_call_parser)


async def _emit(twin: Twin, request: web.Request, turn: Turn, reply: Reply) -> web.StreamResponse:
    """Answer from the first token on (it exists now); later tokens at the decode pace."""
    deltas = token_deltas(reply)
    use = usage(turn.prompt_tokens, len(deltas))
    model = turn.model or twin.config.served_model_name
    metrics = twin.metrics
    metrics.ttft.observe(time.monotonic() - turn.started)
    metrics.generated(1)
    if not turn.chat.stream:
        step = twin.latency.decode_step_s(twin.running, turn.jitter)
        await asyncio.sleep(step * (len(deltas) - 1))
        for _ in deltas[1:]:
            metrics.itl.observe(step)
        metrics.generated(len(deltas) - 1)
        return web.json_response(completion_body(turn.rid, model, reply, use))
    maker = ChunkMaker(turn.rid, model)
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    await response.write(sse(maker.chunk({"role": "assistant", "content": ""}))
                         + sse(maker.chunk(deltas[0])))
    last, sent = time.monotonic(), 1
    due = last  # the model's clock: a late wake-up (a loaded host) is not added to the next step
    while sent < len(deltas):
        step = twin.latency.decode_step_s(twin.running, turn.jitter)
        batch = max(twin.ns.stream_interval, math.ceil(MIN_TICK_S / step) if step > 0 else 1)
        batch = min(batch, len(deltas) - sent)
        due += step * batch
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        pieces = merge_deltas(deltas[sent:sent + batch])
        await response.write(b"".join(sse(maker.chunk(d)) for d in pieces))
        now = time.monotonic()
        for _ in range(batch):
            metrics.itl.observe((now - last) / batch)
        metrics.generated(batch)
        last, sent = now, sent + batch
    tail = sse(maker.chunk({}, reply.finish_reason))
    if (turn.chat.stream_options or {}).get("include_usage"):
        tail += sse(maker.usage(use))
    await response.write(tail + SSE_DONE)
    await response.write_eof()
    return response


async def _prefill_answer(twin: Twin, request: web.Request, turn: Turn) -> web.StreamResponse:
    """A prefill's own answer: one token (the router returns the decode's answer instead)."""
    model = turn.model or twin.config.served_model_name
    use = usage(turn.prompt_tokens, 1)
    if not turn.chat.stream:
        body = completion_body(turn.rid, model, Reply(content=""), use)
        body["choices"][0]["finish_reason"] = "length"
        return web.json_response(body)
    maker = ChunkMaker(turn.rid, model)
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    await response.write(sse(maker.chunk({"role": "assistant", "content": ""}))
                         + sse(maker.chunk({}, "length")) + SSE_DONE)
    await response.write_eof()
    return response


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response(error_body(message, kind, status), status=status)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "body"
        return f"Invalid request: {where}: {error['msg']}"
    return f"Invalid request body: {exc}"
