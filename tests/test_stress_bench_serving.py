"""``bisect stress`` against SGLang's own ``bench_serving``: the same figures on the same fake
server, its metric code run on bisect's measurements, and the stress JSON a superset of its
result file. bench_serving needs the ``bench`` extra (transformers, tokenizers) beside the
``sglang`` one; it runs in a subprocess through bench/bench_serving_client.py, as the stress
harness runs it (one import shim, nothing else changed)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from experiments.agent import TOOLS, find_canary
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import run_stress
from tests.support.agent_server import AgentServer, serve
from tests.support.cli import BISECT, CLEAN_ENV, served

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parent.parent
CLIENT = REPO / "bench" / "bench_serving_client.py"
ENV = {**CLEAN_ENV, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
# Long enough that either client's own overhead (a few ms on this loaded 2-core machine; more
# for bench_serving, which opens a connection per request) is a few percent of them.
TTFT_S, ITL_S = 0.200, 0.050
PIECES = ["Looking ", "at the ", "build ", "log ", "first."]  # one output token each


def require_bench_serving() -> None:
    """Skip on a developer machine without the extras; fail in CI, where they must be there."""
    missing = [name for name in ("sglang", "transformers", "tokenizers")
               if importlib.util.find_spec(name) is None]
    if not missing:
        return
    message = (f"bench_serving cannot run: {', '.join(missing)} not installed (the `sglang` and "
               "`bench` extras; `make test` installs them)")
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


class PacedServer(AgentServer):
    """Streams every answer at a fixed pace: the first content piece after ``TTFT_S``, the
    others ``ITL_S`` apart, the tool call (echoing the canary) with the last piece; usage with
    one completion token per piece. bench_serving times content pieces only: a tool call
    carried in a chunk of its own would be invisible to it, so none is."""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        last = next(m for m in reversed(body["messages"]) if m["role"] in ("user", "tool"))
        canary = find_canary(last["content"]) or ""
        self.requests.append({"body": body})
        head = {"id": "paced", "object": "chat.completion.chunk", "model": body["model"]}
        call = {"index": 0, "id": f"call_{len(self.requests)}", "type": "function",
                "function": {"name": "read_file",
                             "arguments": json.dumps({"path": "a.py", "canary": canary})}}
        prompt = len(json.dumps(body["messages"])) // 4
        usage = {"prompt_tokens": prompt, "completion_tokens": len(PIECES),
                 "total_tokens": prompt + len(PIECES)}
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(delta: dict[str, Any] | None, **extra: Any) -> None:
            choices = [] if delta is None else [{"index": 0, "delta": delta, **extra}]
            event = {**head, "choices": choices, **({"usage": usage} if delta is None else {})}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        await asyncio.sleep(TTFT_S)
        for number, piece in enumerate(PIECES):
            if number:
                await asyncio.sleep(ITL_S)
            last_piece = number == len(PIECES) - 1
            await send({"content": piece, **({"tool_calls": [call]} if last_piece else {})})
        await send({}, finish_reason="tool_calls")
        await send(None)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def bench_serving(url: str, tmp: Path, sessions: int, rounds: int,
                  concurrency: int) -> dict[str, Any]:
    """One bench_serving run against ``url``: its result file's object."""
    subprocess.run([sys.executable, str(CLIENT), "assets", str(tmp), "--sessions",
                    str(sessions), "--rounds", str(rounds)], check=True, env=ENV)
    out = tmp / "result.jsonl"
    tokenizer = str(tmp / "tokenizer")
    done = subprocess.run(
        [sys.executable, str(CLIENT), "once", "--backend", "sglang-oai-chat",
         "--base-url", url, "--model", tokenizer, "--served-model-name", "m",
         "--tokenizer", tokenizer, "--dataset-name", "agentic-trace",
         "--dataset-path", str(tmp / "trace.json"), "--num-prompts", str(sessions),
         "--max-concurrency", str(concurrency), "--request-rate", "inf", "--disable-tqdm",
         "--extra-request-body", json.dumps({"tools": TOOLS, "tool_choice": "auto"}),
         "--output-file", str(out)],
        capture_output=True, text=True, env=ENV, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text().splitlines()[-1])
    return result


def test_the_same_figures_as_bench_serving_on_the_same_server(tmp_path: Path) -> None:
    require_bench_serving()
    sessions, rounds, concurrency = 32, 2, 8
    server = PacedServer(models=["m"])
    with served(server) as url:
        theirs = bench_serving(url, tmp_path, sessions, rounds, concurrency)
        done = subprocess.run(
            [BISECT, "stress", f"{url}/v1", "--sessions", str(sessions), "--rounds",
             str(rounds), "--max-concurrency", str(concurrency), "--stream", "--warmup", "1",
             "--json"], capture_output=True, text=True, env=CLEAN_ENV, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    ours = json.loads(done.stdout)
    assert ours["counts"]["ok"] == sessions  # every call judged, and on the plot
    # a superset of its result file: every key, and the same meaning
    assert set(theirs) - set(ours) == set()
    assert ours["completed"] == theirs["completed"] == sessions * rounds
    assert ours["total_output_tokens"] == theirs["total_output_tokens"]
    assert ours["max_concurrency"] == theirs["max_concurrency"] == concurrency
    # The medians within 5%, the means within 10%: beyond the definitions, what differs is
    # each client's own delay, and bench_serving's (a connection per request, its CPU on a
    # loaded machine) lengthens its tail; its p90 came out 7% above bisect's once, p99 more.
    for stat, within in (("median", 0.05), ("mean", 0.10)):
        for name in ("ttft", "itl", "tpot", "e2e_latency"):
            key = f"{stat}_{name}_ms"
            assert ours[key] == pytest.approx(theirs[key], rel=within, abs=3.0), key
    # over each one's own duration: bench_serving's ends with its /server_info request
    for key in ("request_throughput", "output_throughput", "concurrency"):
        assert ours[key] == pytest.approx(theirs[key], rel=0.10), key
    # The server holds every first piece TTFT_S: no client can see it sooner (how much later
    # depends on the machine's load, which a test does not assert on)
    assert ours["median_ttft_ms"] >= TTFT_S * 1000
    assert ours["median_itl_ms"] == pytest.approx(ITL_S * 1000, rel=0.10)
    for key in theirs:  # side by side, for the record (pytest -s)
        if isinstance(theirs[key], float) and isinstance(ours[key], float):
            print(f"{key:<32}{ours[key]:>12.3f}{theirs[key]:>12.3f}")


def test_bench_servings_metric_code_on_bisects_measurements_agrees(tmp_path: Path) -> None:
    """The formulas: bisect's summary against bench_serving's ``calculate_metrics`` fed the
    very requests bisect measured (a stream of jittered pace, so every statistic differs)."""
    require_bench_serving()

    async def jitter(key: str, turn: int, canary: str) -> None:
        await asyncio.sleep(0.002 * ((sum(map(ord, key)) + turn) % 7))

    server = AgentServer(jitter, models=["m"], chunk_delay=0.003)

    async def go() -> Any:
        async with serve(server) as url:
            return await run_stress(url, WorkloadSpec(sessions=24, rounds=3, stream=True,
                                                      max_concurrency=6))

    result = asyncio.run(go())
    summary = result.summary()
    outputs = [{"success": r.completed, "latency": r.e2e_s, "ttft": r.ttft_s or 0.0,
                "itl": list(r.itl_s), "output_len": r.completion_tokens or 0,
                "prompt_len": r.prompt_tokens or 0, "start_time": r.sent_at}
               for r in result.requests()]
    done = subprocess.run([sys.executable, str(CLIENT), "metrics"], capture_output=True,
                          text=True, env=ENV, timeout=300, check=False,
                          input=json.dumps({"dur_s": result.duration, "outputs": outputs}))
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout)
    renamed = {"total_input": "total_input_tokens", "total_output": "total_output_tokens"}
    compared = 0
    for key, value in theirs.items():
        name = renamed.get(key, key)
        if name in summary and not key.startswith(("total_input_", "total_output_")):
            assert summary[name] == pytest.approx(value, rel=1e-9, abs=1e-9), key
            compared += 1
    assert compared >= 34  # counts, 5 throughputs, 25 latency figures, concurrency, peaks
