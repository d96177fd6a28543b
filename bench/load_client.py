"""A pinned load-client process for bench/harness.py (job protocol: bench/worker.py).

Every client runs ``sessions`` multi-turn tool-calling conversations of ``rounds`` turns, at most
``concurrency`` in flight, following the agent contract (experiments/agent.py): each turn's tool
call must echo the canary of the latest tool result, which then carries a fresh canary.

- ``bisect``: the project's ``run_stress_sync`` as ``bisect stress --json`` runs it (its own HTTP
  client, every turn classified, metrics kept; uvloop's event loop), and the JSON document it
  prints (bench_serving's figures and bisect's; ``report.stress_json``), as bench_serving's
  measured phase ends with its own metrics;
- ``bisect_asyncio``: the same ``run_stress`` on asyncio's own loop (Ray's async actors use uvloop);
- ``aiohttp``: a bare floor, one shared aiohttp ``ClientSession``, SSE lines read and
  ``json.loads``-ed as bench_serving does, nothing else kept;
- ``openai``: the official ``AsyncOpenAI`` client (httpx), an ``asyncio.Semaphore``.

Each process serves one client and imports only what that client's own program would: the
bisect worker imports ``orchestrator.cli`` (the ``bisect stress`` command), the others only their
HTTP library. The cyclic GC's cost grows with every object a process holds, so this matters.

    python bench/load_client.py bisect|bisect_asyncio|aiohttp|openai   # then JSON jobs on stdin
"""

from __future__ import annotations

import asyncio
import importlib
import json
import random
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from worker import Job, measure, serve

from experiments.agent import (
    SYSTEM_PROMPT,
    TOOLS,
    first_user_message,
    new_canary,
    tool_result_message,
)

Call = tuple[str, str, str] | None  # the first tool call: (id, name, arguments)
Load = Callable[[Job], dict[str, Any]]


class Conversation:
    """One session of the agent contract, for the clients that are not bisect's."""

    def __init__(self, seed: int, index: int) -> None:
        self.rng = random.Random(f"{seed}:{index}")
        self.canary = new_canary(self.rng)
        opening = first_user_message(f"s{seed}-{index}", self.canary)
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                               {"role": "user", "content": opening}]

    def body(self, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "stub", "messages": self.messages, "tools": TOOLS,
                                "tool_choice": "auto", "max_tokens": 512, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def answer(self, call: Call) -> bool:
        """Send the tool result back; False when the call is missing or lost the canary."""
        if call is None or json.loads(call[2]).get("canary") != self.canary:
            return False
        call_id, name, arguments = call
        self.messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": arguments}}]})
        self.canary = new_canary(self.rng)
        self.messages.append({"role": "tool", "tool_call_id": call_id,
                              "content": tool_result_message(name, self.canary)})
        return True


async def _sessions(job: Job, turn: Callable[[Conversation], Awaitable[Call]]) -> dict[str, Any]:
    limiter = asyncio.Semaphore(job["concurrency"])
    counts = {"requests": 0, "ok_sessions": 0}

    async def session(index: int) -> None:
        conversation = Conversation(job["seed"], index)
        async with limiter:
            for _ in range(job["rounds"]):
                counts["requests"] += 1
                if not conversation.answer(await turn(conversation)):
                    return
        counts["ok_sessions"] += 1

    await asyncio.gather(*(session(index) for index in range(job["sessions"])))
    return counts


def bisect_load(job: Job, on_uvloop: bool = True) -> dict[str, Any]:
    from experiments.workload.report import Settings, stress_json
    from experiments.workload.spec import WorkloadSpec
    from experiments.workload.stress import StressResult, run_stress, run_stress_sync

    spec = WorkloadSpec(sessions=job["sessions"], rounds=job["rounds"], stream=job["stream"],
                        max_concurrency=job["concurrency"], model="stub", timeout_s=120)
    if on_uvloop:
        result = run_stress_sync(job["url"], spec, seed=job["seed"])
    else:
        box: list[StressResult] = []

        async def main() -> None:  # as run_stress_sync does, on asyncio's loop
            box.append(await run_stress(job["url"], spec, seed=job["seed"]))

        asyncio.run(main())
        result = box[0]
    document = json.dumps(stress_json(result, Settings(job["url"], spec)), allow_nan=False)
    return {"requests": sum(len(s.requests) for s in result.sessions),
            "ok_sessions": sum(s.outcome.value == "ok" for s in result.sessions),
            "json_bytes": len(document)}


async def aiohttp_load(job: Job) -> dict[str, Any]:
    import aiohttp

    endpoint = f"{job['url']}/v1/chat/completions"

    async def turn(conversation: Conversation) -> Call:
        async with http.post(endpoint, json=conversation.body(job["stream"])) as response:
            if not job["stream"]:
                message = json.loads(await response.read())["choices"][0]["message"]
                call = (message.get("tool_calls") or [None])[0]
                return None if call is None else (
                    call["id"], call["function"]["name"], call["function"]["arguments"])
            call_id, name, pieces = "", "", []
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                choices = json.loads(line[6:])["choices"]
                for delta in (choices[0]["delta"].get("tool_calls") or []) if choices else []:
                    call_id = call_id or delta.get("id") or ""
                    name = name or delta["function"].get("name") or ""
                    pieces.append(delta["function"].get("arguments") or "")
            return (call_id, name, "".join(pieces)) if call_id else None

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as http:
        return await _sessions(job, turn)


async def openai_load(job: Job) -> dict[str, Any]:
    from openai import AsyncOpenAI

    async def turn(conversation: Conversation) -> Call:
        body = conversation.body(job["stream"])
        if not job["stream"]:
            calls = (await client.chat.completions.create(**body)).choices[0].message.tool_calls
            return (calls[0].id, calls[0].function.name, calls[0].function.arguments) \
                if calls else None
        call_id, name, pieces = "", "", []
        async for chunk in await client.chat.completions.create(**body):
            for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                call_id = call_id or delta.id or ""
                if delta.function is not None:
                    name = name or delta.function.name or ""
                    pieces.append(delta.function.arguments or "")
        return (call_id, name, "".join(pieces)) if call_id else None

    client = AsyncOpenAI(base_url=f"{job['url']}/v1", api_key="none", max_retries=0,
                         timeout=120)
    async with client:
        return await _sessions(job, turn)


def on_asyncio(load: Callable[[Job], Coroutine[Any, Any, dict[str, Any]]]) -> Load:
    return lambda job: asyncio.run(load(job))


LOADS: dict[str, Load] = {"bisect": bisect_load,
                          "bisect_asyncio": lambda job: bisect_load(job, on_uvloop=False),
                          "aiohttp": on_asyncio(aiohttp_load), "openai": on_asyncio(openai_load)}
# Imported once at start (never inside a measurement); the local imports above then cost nothing.
BISECT = ["orchestrator.cli", "experiments.workload.stress"]
IMPORTS = {"bisect": BISECT, "bisect_asyncio": BISECT, "aiohttp": ["aiohttp"],
           "openai": ["openai"]}


def main() -> None:
    client = sys.argv[1]
    for module in IMPORTS[client]:
        importlib.import_module(module)
    load = LOADS[client]
    serve(lambda job: measure(lambda: load(job)))


if __name__ == "__main__":
    main()
