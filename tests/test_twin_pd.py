"""A disaggregated twin pool as three real processes: prefill + decode + router, over HTTP.

One pool serves the module (starting it costs ~1.5 s); its fault model is on the decode only,
so every decision below needs what the decode learnt of its prefill over the bootstrap port.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from experiments import agent
from experiments.outcomes import CORRUPTION, Outcome
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import run_stress
from tests.support.twins import (
    REPO,
    PDPool,
    Procs,
    body,
    builtin_triage,
    get,
    is_leak,
    metric,
    opening,
    post_chat,
    start_pd_pool,
)

pytestmark = pytest.mark.real

FAULTS = """
seed: 3
rules:
  - name: prefill-bf16-race          # the cause lives on the prefill, the symptom on the decode
    when: {prefill: {env: {BF16_INDEX_K: "1"}}}
    probability: 1.0
    effect: leak
    markup: dsml
  - name: long-context-wedge
    min_context_tokens: 3000
    probability: 1.0
    effect: wedge
"""


@pytest.fixture(autouse=True, scope="module")
def _triage() -> Iterator[None]:
    with builtin_triage():
        yield


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PDPool]:
    tmp = tmp_path_factory.mktemp("pd")
    (tmp / "faults.yaml").write_text(FAULTS)
    procs = Procs(tmp)
    try:
        yield start_pd_pool(
            procs, prefill_args=("--enable-metrics", "--enable-hierarchical-cache"),
            decode_args=("--enable-metrics", "--fault-model", str(tmp / "faults.yaml")))
    finally:
        procs.close()


def test_openai_client_through_the_router(pool: PDPool) -> None:
    from openai import OpenAI

    client: Any = OpenAI(base_url=f"{pool.router}/v1", api_key="none", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["deepseek-ai/DeepSeek-V4-twin"]
    messages: list[Any] = opening("pd-alpha", "FIRSTCANARY")
    first = client.chat.completions.create(model="m", messages=messages, tools=agent.TOOLS)
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "read_file"
    assert json.loads(call.function.arguments)["canary"] == "FIRSTCANARY"

    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id,
                  "content": agent.tool_result_message("read_file", "SECONDCANARY")}]
    stream = client.chat.completions.create(model="m", messages=messages, tools=agent.TOOLS,
                                            stream=True, stream_options={"include_usage": True})
    name, arguments, finish, chunks, used = "", "", None, 0, None
    for chunk in stream:
        chunks += 1
        used = chunk.usage or used
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                name += (delta.function and delta.function.name) or ""
                arguments += (delta.function and delta.function.arguments) or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and name == "search_code"
    assert json.loads(arguments)["canary"] == "SECONDCANARY"
    # role + token chunks + finish + usage; a chunk carries one or more tokens (stream pace)
    assert used is not None and used.completion_tokens >= chunks - 3 >= 2

    plain = client.chat.completions.create(model="m", messages=opening("pd-plain"))
    assert plain.choices[0].finish_reason == "stop" and plain.choices[0].message.content
    client.close()  # no kept-alive connection for the router to wait on at its shutdown
    # The second turn's prompt repeats the first: HiCache hits on the prefill.
    assert "#cached-token: 0" in pool.procs.log("prefill")
    assert metric(pool.prefill, "sglang:cached_tokens_total") > 0


def test_roles_log_and_report_what_they_are(pool: PDPool) -> None:
    prefill, decode = pool.procs.log("prefill"), pool.procs.log("decode")
    assert "Cuda graph is disabled for prefill server" in prefill
    assert f"CommonKVBootstrapServer started successfully on 127.0.0.1:{pool.ports.bootstrap}" \
        in prefill
    assert "Capture cuda graph" not in prefill
    assert "Allocating" in prefill and "host memory for hierarchical KV cache." in prefill
    assert "KV cache is forced as chunk cache for decode server" in decode
    assert "Capture cuda graph end" in decode and "max_total_num_tokens=" in decode
    info = json.loads(get(f"{pool.router}/get_server_info")[1])
    assert info["prefill"][0]["disaggregation_mode"] == "prefill"
    assert info["prefill"][0]["disable_cuda_graph"] is True
    assert info["decode"][0]["disaggregation_mode"] == "decode"
    assert info["decode"][0]["disable_radix_cache"] is True


def test_pd_metrics(pool: PDPool) -> None:
    for i in range(3):
        assert post_chat(pool.router, body(opening(f"pd-metrics-{i}")))[0] == 200
    for name in ("sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_decode_transfer_queue_reqs",
                 "sglang:num_transfer_failed_reqs_total", "sglang:gen_throughput"):
        for url in (pool.prefill, pool.decode):
            metric(url, name)  # every role exports every series
    assert metric(pool.prefill, "sglang:prompt_tokens_total") > 0
    assert metric(pool.decode, "sglang:gen_throughput") > 0
    for name in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                 "e2e_request_latency_seconds"):
        assert metric(pool.decode, f"sglang:{name}_count") >= 3, name
    assert metric(pool.prefill, "sglang:time_to_first_token_seconds_count") >= 3

    async def stuck(url: str, extra: dict[str, Any]) -> None:
        """A request whose other half never comes: it waits in its PD queue, then gives up."""
        async with aiohttp.ClientSession() as http:
            with pytest.raises(asyncio.TimeoutError):
                await http.post(f"{url}/v1/chat/completions",
                                json={**body(opening("pd-stuck")), **extra},
                                timeout=aiohttp.ClientTimeout(total=0.8))

    async def queues_while_stuck() -> tuple[float, float]:
        room = {"bootstrap_room": 2, "bootstrap_host": "127.0.0.1",
                "bootstrap_port": pool.ports.bootstrap}
        tasks = [asyncio.create_task(stuck(pool.prefill, {"bootstrap_room": 1})),
                 asyncio.create_task(stuck(pool.decode, room))]
        most = [0.0, 0.0]  # the gauges' highest while the stuck requests wait
        while not all(task.done() for task in tasks):
            seen = await asyncio.gather(
                asyncio.to_thread(metric, pool.prefill, "sglang:num_prefill_bootstrap_queue_reqs"),
                asyncio.to_thread(metric, pool.decode, "sglang:num_decode_transfer_queue_reqs"))
            most = [max(m, v) for m, v in zip(most, seen, strict=True)]
            await asyncio.sleep(0.05)
        await asyncio.gather(*tasks)
        return most[0], most[1]

    assert asyncio.run(queues_while_stuck()) == (1, 1)
    status, answer = post_chat(pool.decode, body(opening("pd-direct")))
    assert status == 400 and "router" in answer["message"]


def test_wedge_is_timeouts_and_waiting_for_input_not_corruption(pool: PDPool) -> None:
    # Tool results of ~1,500 filler words: the third turn passes min_context_tokens and wedges.
    spec = WorkloadSpec(sessions=6, rounds=3, timeout_s=1.0, filler_tokens=1500, seed=5)
    result = asyncio.run(run_stress(pool.router, spec))
    outcomes = [s.outcome for s in result.sessions]
    assert outcomes == [Outcome.TIMEOUT] * 6, [(s.outcome, s.evidence) for s in result.sessions]
    assert all(s.first_bad_turn == 3 for s in result.sessions)
    assert not any(o in CORRUPTION for o in outcomes)
    deadline = time.monotonic() + 5
    while pool.procs.log("decode").count("Aborted by AbortReq") < 6 \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    decode = pool.procs.log("decode")
    assert decode.count("KVPoll status: WaitingForInput") >= 6
    assert decode.count("Aborted by AbortReq") >= 6  # the router passed the disconnects on
    assert metric(pool.decode, "sglang:num_decode_transfer_queue_reqs") == 0


def test_prefill_env_rule_follows_the_prefill_across_restarts(pool: PDPool) -> None:
    """Runs last: it ends with the pool as it started (prefill without BF16_INDEX_K)."""
    def leaks(key: str) -> bool:
        status, answer = post_chat(pool.router, body(opening(key)))
        assert status == 200, answer
        return is_leak(answer)

    assert not leaks("pd-env-0")
    pool.restart_prefill({"BF16_INDEX_K": "1"})
    assert all(leaks(f"pd-env-1-{i}") for i in range(3))  # the decode itself has no such env
    assert "<｜DSML｜function_calls>" in post_chat(
        pool.router, body(opening("pd-env-dsml")))[1]["choices"][0]["message"]["content"]

    pool.procs.stop("prefill")
    assert get(f"{pool.router}/health")[0] == 503
    failed = metric(pool.decode, "sglang:num_transfer_failed_reqs_total")
    status, answer = post_chat(pool.router, body(opening("pd-env-down")))
    assert status >= 500 and "transfer" in answer["message"].lower()
    assert metric(pool.decode, "sglang:num_transfer_failed_reqs_total") == failed + 1

    pool.restart_prefill()
    assert not any(leaks(f"pd-env-2-{i}") for i in range(3))  # not stale
    assert pool.procs.log("decode").count("Bootstrap: prefill at") >= 3


# --- the router's command line --------------------------------------------------------------


def test_router_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.twin.router import main

    assert main(["--help"]) == 0
    help_text = capsys.readouterr().out
    for flag in ("--prefill", "--decode", "--pd-disaggregation", "--policy"):
        assert flag in help_text
    assert main(["--prefill", "http://h:1"]) == 2
    assert "--decode" in capsys.readouterr().err
    assert main(["--prefill", "http://h:1", "x", "--decode", "http://h:2"]) == 2
    assert "invalid bootstrap port" in capsys.readouterr().err
    # The real process, through the twin's own entry point: argparse's exit code and message.
    bad = subprocess.run([sys.executable, "-m", "experiments.twin", "--router", "--prefill",
                          "http://h:1", "--decode", "http://h:2", "--no-such-flag"], cwd=REPO,
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unrecognized arguments: --no-such-flag" in bad.stderr


def test_pool_builder_gives_campaign_data(tmp_path: Path) -> None:
    from experiments.campaign import Pool
    from experiments.twin.pool import pd_pool

    data = pd_pool("pd-1", "local", tmp_path / "faults.yaml")
    pool = Pool.model_validate(data)
    assert [s.name for s in pool.services] == ["pd-1-prefill", "pd-1-decode", "pd-1-router"]
    assert pool.endpoint.startswith("http://127.0.0.1:")
