"""``bisect stress`` as a drop-in for bench_serving, through the real console script: the base
URL as the OpenAI SDK takes it, an API key and a model, the first failure said at once and the
failures by reason, ``--fail-on``, warm-up, the user's tools and prompt, Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from experiments.workload.agent_tools import CANARY_RULE
from tests.conftest import TwinFactory, free_port
from tests.support.agent_server import AgentServer, Misbehave, call, completion
from tests.support.cli import BISECT, CLEAN_ENV, bisect, served

pytestmark = pytest.mark.real


def test_an_sdk_base_url_a_key_and_the_servers_model(twin: TwinFactory) -> None:
    key = "sk-test-" + os.urandom(6).hex()
    url = twin("--api-key", key, "--twin-latency-ms", "1", "--served-model-name", "dsv4")
    # as the OpenAI SDK is given it: .../v1, the key in OPENAI_API_KEY
    done = bisect("stress", f"{url}/v1", "--sessions", "3", "--rounds", "2", "--json",
                  env={"OPENAI_API_KEY": key})
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["judged"] == 3 and summary["counts"]["ok"] == 3
    assert summary["model"] == "dsv4" and summary["url"] == f"{url}/v1"  # /v1/models' first
    assert key not in done.stdout + done.stderr
    # --api-key and --model, the bare root URL
    done = bisect("stress", url, "--sessions", "2", "--rounds", "1", "--json",
                  "--api-key", key, "--model", "dsv4")
    assert done.returncode == 0 and json.loads(done.stdout)["model"] == "dsv4"
    assert key not in done.stdout + done.stderr
    # no key: the first failure says 401 at once, with what to do; the summary counts it
    done = bisect("stress", url, "--sessions", "2", "--rounds", "1", "--json")
    assert done.returncode == 1
    assert f"first failed request: POST {url}/v1/chat/completions: HTTP 401" in done.stderr
    assert "--api-key or $OPENAI_API_KEY" in done.stderr
    summary = json.loads(done.stdout)
    assert [(e["reason"], e["outcome"], e["sessions"]) for e in summary["error_summary"]] == [
        ("HTTP 401", "error", 2)]
    done = bisect("stress", url, "--api-key", "bad\nkey", "--sessions", "1")
    assert done.returncode == 2 and "bad\nkey" not in done.stderr


def test_the_first_failure_is_said_while_the_run_goes_on() -> None:
    async def one_fails_fast(key: str, turn: int, canary: str) -> web.Response | None:
        if key == "s0-0":
            return web.Response(status=404, text="no route")
        await asyncio.sleep(4)  # the others are still running when it is said
        return None

    with served(AgentServer(one_fails_fast, models=["m"])) as url:
        proc = subprocess.Popen(
            [BISECT, "stress", f"{url}/v1", "--sessions", "3", "--rounds", "1", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=CLEAN_ENV)
        assert proc.stderr is not None
        line = proc.stderr.readline()
        still_running = proc.poll() is None
        stdout, _ = proc.communicate(timeout=60)
    assert still_running, "the reason came only at the end"
    assert line.startswith(f"error: first failed request: POST {url}/v1/chat/completions: "
                           "HTTP 404: no route")
    assert "no such endpoint" in line
    summary = json.loads(stdout)
    assert summary["counts"] == {**summary["counts"], "ok": 2, "error": 1}
    assert summary["error_summary"][0]["example"] == "HTTP 404: no route"


def test_connection_refused_is_said_and_summed_by_reason() -> None:
    port = free_port()
    done = bisect("stress", f"http://127.0.0.1:{port}/v1", "--sessions", "3", "--rounds", "1",
                  "--json")
    assert done.returncode == 1
    reason = f"cannot connect to 127.0.0.1:{port}: connection refused"
    assert f"first failed request: POST http://127.0.0.1:{port}/v1/chat/completions: {reason}" \
        in done.stderr and "is the server up" in done.stderr
    assert done.stderr.count("first failed request") == 1
    summary = json.loads(done.stdout)
    assert summary["error_summary"] == [{"reason": reason, "outcome": "error", "sessions": 3,
                                         "example": reason}]
    human = bisect("stress", f"http://127.0.0.1:{port}", "--sessions", "2", "--rounds", "1")
    assert "failures by reason" in human.stdout and "connection refused" in human.stdout


def leaky(share: int) -> Misbehave:
    """Every ``share``-th session answers with plain text (no tool call: corrupt)."""
    async def misbehave(key: str, turn: int, canary: str) -> dict[str, Any] | None:
        return completion("I would rather chat.") if int(key.split("-")[1]) % share == 0 \
            else None
    return misbehave


def test_fail_on_limits_exit_1_and_a_bad_limit_is_named() -> None:
    with served(AgentServer(leaky(5), models=["m"])) as url:
        args = ["stress", url, "--sessions", "20", "--rounds", "2", "--json"]
        done = bisect(*args, "--fail-on", "corruption>0.01")
        assert done.returncode == 1
        assert "--fail-on corruption>0.01: corruption is 0.2" in done.stderr
        assert json.loads(done.stdout)["rate"] == 0.2  # the results are printed all the same
        assert bisect(*args, "--fail-on", "corruption>0.25,error>5%").returncode == 0
        # repeated, and any number of the JSON summary: the run's p99 TTFT is above 0 ms, and
        # bench_serving's goodput keys: every request met an SLO of a minute
        done = bisect(*args, "--fail-on", "no_tool>=0.5", "--fail-on", "p99_ttft_ms>0",
                      "--slo", "e2e_ms=60000", "--fail-on", "slo_attainment>=1")
        assert done.returncode == 1 and "p99_ttft_ms>0: p99_ttft_ms is" in done.stderr
        assert "--fail-on slo_attainment>=1: slo_attainment is 1" in done.stderr
        assert "no_tool>=0.5" not in done.stderr
    for bad, named in (("corruption>>1", "'corruption>>1' is not NAME>NUMBER"),
                       ("corrupt>0.1", "unknown name 'corrupt'"),
                       ("error>lots", "'error>lots' is not NAME>NUMBER")):
        done = bisect("stress", "http://127.0.0.1:9", "--fail-on", bad)
        assert done.returncode == 2 and named in done.stderr, done.stderr


def test_warm_up_requests_go_first_and_are_not_counted() -> None:
    server = AgentServer(models=["m"])
    with served(server) as url:
        done = bisect("stress", url, "--sessions", "4", "--rounds", "2", "--warmup", "3",
                      "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["requests"] == 8 and summary["sessions"] == 4 and summary["warmup"] == 3
    keys = [r["key"] for r in server.requests]
    assert sorted(keys[:3]) == ["w0-0", "w0-1", "w0-2"] and len(keys) == 11
    assert all(key.startswith("s0-") for key in keys[3:])

    async def down(key: str, turn: int, canary: str) -> web.Response:
        return web.Response(status=503, text="loading")

    server = AgentServer(down, models=["m"])
    with served(server) as url:
        done = bisect("stress", url, "--sessions", "50", "--warmup", "2", "--json")
    assert done.returncode == 1 and done.stdout == ""
    assert "HTTP 503: loading" in done.stderr and "warm-up failed" in done.stderr
    assert len(server.requests) == 2  # the run itself never started


def test_the_users_tools_and_prompt_reach_the_server_and_are_judged(tmp_path: Path,
                                                                    twin: TwinFactory) -> None:
    tools = [{"type": "function", "function": {
        "name": "lookup_order", "parameters": {
            "type": "object", "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"]}}}]
    tools_file, prompt_file = tmp_path / "tools.json", tmp_path / "prompt.txt"
    tools_file.write_text(json.dumps({"tools": tools}))
    prompt_file.write_text("You are the order desk.\n")

    async def stale_on_one(key: str, turn: int, canary: str) -> dict[str, Any]:
        echoed = "OLD0000000" if key == "s0-1" else canary
        return completion(None, [call("lookup_order", {"order_id": f"A-1 {echoed}"})])

    server = AgentServer(stale_on_one, models=["m"])
    with served(server) as url:
        done = bisect("stress", url, "--sessions", "3", "--rounds", "2", "--json",
                      "--tools", str(tools_file), "--system-prompt", str(prompt_file))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["counts"]["ok"] == 2 and summary["counts"]["lost_plot"] == 1
    assert (summary["tools"], summary["system_prompt"]) == (str(tools_file), str(prompt_file))
    body = server.requests[0]["body"]
    assert body["tools"] == tools
    assert body["messages"][0]["content"] == f"You are the order desk.\n\n{CANARY_RULE}"
    # the twin follows the contract on any tool: its calls carry the canary
    done = bisect("stress", twin("--twin-latency-ms", "1"), "--sessions", "4", "--rounds", "3",
                  "--stream", "--json", "--tools", str(tools_file))
    assert done.returncode == 0 and json.loads(done.stdout)["counts"]["ok"] == 4, done.stderr
    tools_file.write_text("[]")
    done = bisect("stress", "http://127.0.0.1:9", "--tools", str(tools_file))
    assert done.returncode == 2 and str(tools_file) in done.stderr and "--tools" in done.stderr
    assert bisect("stress", "http://127.0.0.1:9", "--system-prompt",
                  str(tmp_path / "none.txt")).returncode == 2


def test_ctrl_c_prints_the_sessions_finished_so_far_and_exits_130() -> None:
    async def slower_each(key: str, turn: int, canary: str) -> None:
        await asyncio.sleep(0.05 * int(key.split("-")[1]))  # session i ends after ~i/20 s

    server = AgentServer(slower_each, models=["m"])
    with served(server) as url:
        proc = subprocess.Popen(
            [BISECT, "stress", url, "--sessions", "400", "--rounds", "1", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=CLEAN_ENV)
        deadline = time.monotonic() + 60
        while len(server.requests) < 400 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # about 20 sessions have finished
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    summary = json.loads(stdout)
    assert summary["interrupted"] is True and summary["stopped_early"] is True
    assert 0 < summary["sessions"] < 400 and summary["counts"]["ok"] == summary["sessions"]
    assert summary["completed"] == summary["sessions"] and summary["mean_e2e_latency_ms"] > 0
    assert f"{summary['sessions']} of 400 sessions had finished" in stderr
    assert "Traceback" not in stderr


def not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def test_the_stress_json_is_strict_and_records_the_runs_settings() -> None:
    server = AgentServer(models=["m"])
    with served(server) as url:
        done = bisect("stress", url, "--sessions", "4", "--rounds", "2", "--seed", "9",
                      "--request-rate", "100", "--max-concurrency", "2", "--json")
    assert done.returncode == 0, done.stderr
    assert server.model_queries == 1  # the model named is /v1/models' first
    summary = json.loads(done.stdout, parse_constant=not_json)
    assert (summary["url"], summary["model"], summary["seed"]) == (url, "m", 9)
    assert (summary["request_rate"], summary["max_concurrency"]) == (100, 2)
    assert summary["date"].endswith("+00:00") and summary["version"]
    assert summary["stream"] is True and summary["rounds"] == 2
    for stat in ("mean", "median", "std", "p90", "p95", "p99", "max"):
        for name in ("ttft", "tpot", "itl", "e2e_latency"):
            assert isinstance(summary[f"{stat}_{name}_ms"], float)
    assert summary["total_throughput"] == pytest.approx(
        summary["input_throughput"] + summary["output_throughput"])
    assert summary["concurrency"] > 0 and summary["duration"] <= summary["wall_s"]
    assert summary["tools"] is None and summary["system_prompt"] is None


def test_bench_servings_habits_all_at_once_streamed_and_its_server_info() -> None:
    info = {"tp_size": 1, "version": "0.4.6"}  # an SGLang of /get_server_info only
    server = AgentServer(models=["m"], info=info, info_path="/get_server_info")
    with served(server) as url:
        streamed = bisect("stress", url, "--sessions", "3", "--rounds", "2", "--request-rate",
                          "inf", "--json")
        plain = bisect("stress", url, "--sessions", "3", "--rounds", "2", "--disable-stream",
                       "--json")
        older = bisect("stress", url, "--sessions", "1", "--rounds", "1", "--no-stream",
                       "--json")
    summaries = [json.loads(done.stdout) for done in (streamed, plain, older)]
    assert all(done.returncode == 0 for done in (streamed, plain, older)), plain.stderr
    # inf: all at once, bench_serving's default (null in strict JSON, where it writes inf)
    assert (summaries[0]["request_rate"], summaries[0]["arrival"]) == (None, "burst")
    assert [s["stream"] for s in summaries] == [True, False, False]
    assert [r["body"]["stream"] for r in server.requests] == [True] * 6 + [False] * 7
    assert summaries[0]["median_itl_ms"] is not None and summaries[1]["median_itl_ms"] is None
    assert all(s["server_info"] == info for s in summaries)
