"""The twin as real processes over HTTP: endpoints, scripted agent, fault model, start-up log
(its command line and start: test_twin_cli.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from experiments import agent
from experiments.markup import find_markup
from tests.support.twins import (
    FAST,
    Procs,
    body,
    get,
    is_leak,
    metric,
    opening,
    post_chat,
    start_twins,
)

LEAK_RULE = """
seed: 7
rules:
  - name: bf16-hicache-race
    when:
      env: {BF16_INDEX_K: "1"}
      flags: {enable-hierarchical-cache: true}
    min_inflight: %(min_inflight)d
    probability: %(probability)s
    effect: %(effect)s
    markup: dsml
"""


def fault_text(probability: float = 1.0, effect: str = "leak", min_inflight: int = 1) -> str:
    return LEAK_RULE % {"probability": probability, "effect": effect,
                        "min_inflight": min_inflight}


BAD = {"env": {"BF16_INDEX_K": "1"}}
BAD_FLAGS = ("--enable-hierarchical-cache",)


# One twin shows every effect: the first rule that applies wins, so a longer request reaches
# an effect further up (a request is ~290 tokens before filler; 4 characters a token).
EFFECTS = """
rules:
  - {name: fx-no-tool, min_context_tokens: 4000, probability: 1.0, effect: no_tool}
  - {name: fx-lost-plot, min_context_tokens: 3000, probability: 1.0, effect: lost_plot}
  - {name: fx-bad-args, min_context_tokens: 2000, probability: 1.0, effect: bad_args}
  - {name: fx-error, min_context_tokens: 1000, probability: 1.0, effect: error}
"""
EFFECT_CONTEXT = {"no_tool": 4500, "lost_plot": 3500, "bad_args": 2500, "error": 1500}


def message_of(response: dict[str, Any]) -> dict[str, Any]:
    return dict(response["choices"][0]["message"])


async def burst(url: str, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        async def one(payload: dict[str, Any]) -> dict[str, Any]:
            async with session.post(f"{url}/v1/chat/completions", json=payload) as response:
                return dict(await response.json())

        return list(await asyncio.gather(*(one(p) for p in payloads)))


# Every twin of this module, by name: (flags, env, fault model text or None). They start at once
# (a twin costs ~0.6 s of CPU to start); each test owns the twins it names.
FLEET: dict[str, tuple[tuple[str, ...], dict[str, str], str | None]] = {
    "fp8": (("--served-model-name", "twin-model", "--disable-cuda-graph", *FAST),
            {"BF16_INDEX_K": "0"}, None),
    "metrics": (("--enable-metrics", "--twin-latency-ms", "800"), {}, None),
    "queue": (("--max-running-requests", "5", "--twin-latency-ms", "1000"), {}, None),
    "leak": ((*BAD_FLAGS, "--tp-size", "8", "--hicache-size", "64"), BAD["env"], fault_text()),
    "env-fallback": ((), {**BAD["env"], "BISECT_TWIN_FAULT_MODEL": "@leak"}, None),
    "half-1": ((*BAD_FLAGS, *FAST), BAD["env"], fault_text(0.5)),
    "half-2": ((*BAD_FLAGS, *FAST), BAD["env"], fault_text(0.5)),
    "half-reseeded": ((*BAD_FLAGS, *FAST, "--twin-seed", "1"), BAD["env"], fault_text(0.5)),
    "inflight": ((*BAD_FLAGS, "--twin-latency-ms", "200"), BAD["env"],
                 fault_text(min_inflight=8)),
    "effects": (FAST, {}, EFFECTS),
    "wedge-60": ((*BAD_FLAGS, "--twin-wedge-s", "60"), BAD["env"], fault_text(effect="wedge")),
    "wedge-0.3": ((*BAD_FLAGS, "--twin-wedge-s", "0.3"), BAD["env"],
                  fault_text(effect="wedge")),
}


@dataclass
class Fleet:
    urls: dict[str, str]
    procs: Procs
    faults: dict[str, Path]

    def __getitem__(self, name: str) -> str:
        return self.urls[name]

    def log(self, name: str) -> str:
        return self.procs.log(name)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("twins")
    paths: dict[str, Path] = {}
    for name, (_, _, text) in FLEET.items():
        if text is not None:
            paths[name] = tmp / f"{name}.yaml"
            paths[name].write_text(text)
    specs = []
    for name, (args, env, text) in FLEET.items():
        env = {k: str(paths[v[1:]]) if v.startswith("@") else v for k, v in env.items()}
        model = ("--fault-model", str(paths[name])) if text is not None else ()
        specs.append((name, (*args, *model), env))
    procs = Procs(tmp)
    try:
        urls = start_twins(procs, *specs)
        yield Fleet(dict(zip(FLEET, urls, strict=True)), procs, paths)
    finally:
        procs.close()


# --- endpoints ---------------------------------------------------------------------------------


@pytest.mark.real
def test_openai_client_gets_the_scripted_tool_calls(fleet: Fleet) -> None:
    from openai import OpenAI

    url = fleet["fp8"]
    # Typed loosely: the test feeds plain dicts, as the workload does.
    client: Any = OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["twin-model"]

    messages: list[Any] = opening("alpha", "FIRSTCANARY")
    first = client.chat.completions.create(model="twin-model", messages=messages,
                                           tools=agent.TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id
    assert call.function.name == "read_file"
    arguments = json.loads(call.function.arguments)
    assert arguments["canary"] == "FIRSTCANARY" and arguments["path"]

    # Turn 1 answers the tool result: the next tool, the fresh canary.
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id,
                  "content": agent.tool_result_message("read_file", "SECONDCANARY")}]
    second = client.chat.completions.create(model="twin-model", messages=messages,
                                            tools=agent.TOOLS)
    call = second.choices[0].message.tool_calls[0]
    assert call.function.name == "search_code"
    assert json.loads(call.function.arguments)["canary"] == "SECONDCANARY"

    # Streaming: accumulate delta.tool_calls by index, parse at the end.
    pieces: dict[int, dict[str, str]] = {}
    finish = None
    stream = client.chat.completions.create(model="twin-model", messages=opening("beta", "S1"),
                                            tools=agent.TOOLS, stream=True)
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or []:
            slot = pieces.setdefault(delta.index, {"name": "", "arguments": ""})
            slot["name"] += (delta.function and delta.function.name) or ""
            slot["arguments"] += (delta.function and delta.function.arguments) or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert pieces[0]["name"] == "read_file"
    assert json.loads(pieces[0]["arguments"])["canary"] == "S1"

    # No tools: plain text.
    plain = client.chat.completions.create(model="twin-model", messages=opening("gamma"))
    assert plain.choices[0].finish_reason == "stop" and plain.choices[0].message.content
    client.close()  # no kept-alive connection for the twin to wait on at its shutdown


@pytest.mark.real
def test_bad_requests_get_400_with_an_error_body(fleet: Fleet) -> None:
    url = fleet["fp8"]
    payloads: list[Any] = [b"not json", {"messages": []}, {"messages": [{"role": "wizard"}]}, [1]]
    for payload in payloads:
        status, answer = post_chat(url, payload)
        assert status == 400, payload
        assert answer["error"]["message"] and answer["object"] == "error"


@pytest.mark.real
def test_server_info_and_models(fleet: Fleet) -> None:
    url = fleet["leak"]
    info = json.loads(get(f"{url}/get_server_info")[1])
    assert info["tp_size"] == 8 and info["enable_hierarchical_cache"] is True
    assert info["env"]["BF16_INDEX_K"] == "1"
    models = json.loads(get(f"{url}/v1/models")[1])
    assert models["data"][0]["id"] == "deepseek-ai/DeepSeek-V4-twin"


@pytest.mark.real
def test_metrics_parse_and_running_requests_rise_under_load(fleet: Fleet) -> None:
    url = fleet["metrics"]
    assert metric(url, "sglang:num_running_reqs") == 0

    async def load_and_watch() -> float:
        """The most requests the gauge showed running while 40 were in flight (each takes
        800 ms): sampled until the burst ends, not at a fixed moment, since a loaded machine
        can be slow to open the 40 connections."""
        task = asyncio.create_task(burst(url, [body(opening(f"m{i}")) for i in range(40)]))
        most = 0.0
        while not task.done():
            most = max(most, await asyncio.to_thread(metric, url, "sglang:num_running_reqs"))
            await asyncio.sleep(0.05)
        answers = await task
        assert all(a["choices"][0]["finish_reason"] == "tool_calls" for a in answers)
        return most

    assert asyncio.run(load_and_watch()) >= 30
    assert metric(url, "sglang:num_running_reqs") == 0
    assert metric(url, "sglang:prompt_tokens_total") > 0
    assert metric(url, "sglang:generation_tokens_total") > 0
    assert metric(url, "sglang:num_queue_reqs") == 0


@pytest.mark.real
def test_max_running_requests_queues_the_rest(fleet: Fleet) -> None:
    url = fleet["queue"]

    async def load_and_watch() -> tuple[float, float]:
        """The most running and the most queued the gauges showed while the burst lasted."""
        task = asyncio.create_task(burst(url, [body(opening(f"q{i}")) for i in range(12)]))
        running = queued = 0.0
        while not task.done():
            running = max(running, await asyncio.to_thread(metric, url, "sglang:num_running_reqs"))
            queued = max(queued, await asyncio.to_thread(metric, url, "sglang:num_queue_reqs"))
            await asyncio.sleep(0.05)
        await task
        return running, queued

    assert asyncio.run(load_and_watch()) == (5, 7)


# --- the fault model ----------------------------------------------------------------------------


@pytest.mark.real
def test_planted_leak_needs_bf16_and_hicache(fleet: Fleet) -> None:
    bad = fleet["leak"]
    status, answer = post_chat(bad, body(opening("leaky")))
    assert status == 200 and is_leak(answer)
    assert "<｜DSML｜function_calls>" in message_of(answer)["content"]
    assert answer["choices"][0]["finish_reason"] == "stop"

    # The env fallback names the same file; without the flag the condition does not hold.
    good = fleet["env-fallback"]
    status, answer = post_chat(good, body(opening("leaky")))
    assert status == 200 and not is_leak(answer)
    assert json.loads(message_of(answer)["tool_calls"][0]["function"]["arguments"])["canary"] \
        == "CANARY0001"


def hits(url: str, keys: list[str]) -> set[str]:
    return {key for key in keys if is_leak(post_chat(url, body(opening(key)))[1])}


@pytest.mark.real
def test_decisions_are_deterministic_per_session_and_seed(fleet: Fleet) -> None:
    keys = [f"det-{i}" for i in range(30)]
    first, second, reseeded = fleet["half-1"], fleet["half-2"], fleet["half-reseeded"]
    hit = hits(first, keys)
    assert 0 < len(hit) < len(keys)
    assert hits(second, keys) == hit
    assert hits(first, keys) == hit  # the same session stays hit on every turn
    assert hits(reseeded, keys) != hit


@pytest.mark.real
def test_probability_is_honoured_over_many_sessions(fleet: Fleet) -> None:
    url = fleet["half-1"]
    count = len(hits(url, [f"many-{i}" for i in range(200)]))
    assert 72 <= count <= 128  # 100 expected; +-4 standard deviations


@pytest.mark.real
def test_min_inflight_is_respected(fleet: Fleet) -> None:
    url = fleet["inflight"]
    sequential = [post_chat(url, body(opening(f"seq-{i}")))[1] for i in range(4)]
    assert not any(is_leak(a) for a in sequential)
    concurrent = asyncio.run(burst(url, [body(opening(f"conc-{i}")) for i in range(20)]))
    assert sum(is_leak(a) for a in concurrent) >= 10  # all but the first arrivals


@pytest.mark.real
@pytest.mark.parametrize("effect", ["no_tool", "lost_plot", "bad_args", "error"])
def test_each_effect_has_its_shape(fleet: Fleet, effect: str) -> None:
    filler = "x" * 4 * (EFFECT_CONTEXT[effect] - 290)
    status, answer = post_chat(fleet["effects"], body(opening("fx", "RIGHTCANARY", filler)))
    if effect == "error":
        assert status == 500 and answer["error"]["code"] == 500
        return
    assert status == 200
    message = message_of(answer)
    if effect == "no_tool":
        assert message["content"] and not message.get("tool_calls")
        assert find_markup(message["content"]) is None
        return
    arguments = message["tool_calls"][0]["function"]["arguments"]
    if effect == "lost_plot":
        assert json.loads(arguments)["canary"] not in ("RIGHTCANARY", None)
    else:
        with pytest.raises(json.JSONDecodeError):
            json.loads(arguments)


@pytest.mark.real
def test_wedge_hangs_until_the_client_leaves(fleet: Fleet) -> None:
    url = fleet["wedge-60"]

    async def wedge() -> float:
        async with aiohttp.ClientSession() as session:
            request = session.post(f"{url}/v1/chat/completions", json=body(opening("stuck")),
                                   timeout=aiohttp.ClientTimeout(total=1.0))
            task = asyncio.create_task(request.__aenter__())
            running = 0.0
            while not task.done():  # the wedged request shows as running until the client leaves
                running = max(running,
                              await asyncio.to_thread(metric, url, "sglang:num_running_reqs"))
                await asyncio.sleep(0.05)
            with pytest.raises(asyncio.TimeoutError):
                await task
            return running

    assert asyncio.run(wedge()) == 1
    deadline = time.monotonic() + 5
    while "Aborted by AbortReq" not in fleet.log("wedge-60") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "WaitingForInput" in fleet.log("wedge-60")
    assert "Aborted by AbortReq" in fleet.log("wedge-60")
    assert metric(url, "sglang:num_running_reqs") == 0


@pytest.mark.real
def test_wedge_times_out_with_an_error(fleet: Fleet) -> None:
    url = fleet["wedge-0.3"]
    status, answer = post_chat(url, body(opening("stuck")))
    assert status == 503 and answer["error"]["message"]
    assert "waiting timeout" in fleet.log("wedge-0.3")


# --- the start-up log -----------------------------------------------------------------------------


@pytest.mark.real
def test_startup_log_shows_what_was_loaded(fleet: Fleet) -> None:
    text = fleet.log("leak")
    for line in ("server_args=ServerArgs(", "enable_hierarchical_cache=True",
                 "Load weight end. type=DeepseekV4ForCausalLM", "KV Cache is allocated. #tokens:",
                 "index_k dtype=bf16 bytes_per_token_per_layer=256",
                 "Allocating 64.00 GB host memory for hierarchical KV cache.",
                 "Capture cuda graph end. Time elapsed:", "max_total_num_tokens=",
                 "The server is fired up and ready to roll!"):
        assert line in text, line

    text = fleet.log("fp8")
    assert "bytes_per_token_per_layer=132" in text
    assert "Capture cuda graph" not in text and "hierarchical KV cache" not in text
