"""The stress harness against the real twin process, and the `bisect stress` options."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from experiments.outcomes import Outcome
from experiments.workload.arrival import Arrival
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import StressResult, arrival_offsets, run_stress
from orchestrator.cli import app
from tests.conftest import TwinFactory


def leak_model(path: Path, probability: float = 0.3, min_inflight: int = 1) -> Path:
    path.write_text(yaml.safe_dump({"rules": [{
        "name": "leak", "when": {}, "min_inflight": min_inflight,
        "probability": probability, "effect": "leak",
    }]}))
    return path


@pytest.mark.real
def test_stream_and_non_stream_agree_on_the_twin(twin: TwinFactory, tmp_path: Path) -> None:
    url = twin("--fault-model", str(leak_model(tmp_path / "faults.yaml")),
               "--twin-latency-ms", "1")

    def run(stream: bool) -> StressResult:
        spec = WorkloadSpec(sessions=40, rounds=3, seed=11, stream=stream)
        return asyncio.run(run_stress(url, spec))

    plain, streamed = run(False), run(True)
    per_session = [(s.key, s.outcome, s.first_bad_turn, s.evidence) for s in plain.sessions]
    assert [(s.key, s.outcome, s.first_bad_turn, s.evidence) for s in streamed.sessions] == (
        per_session)
    counts = plain.counts()
    assert counts["leak"] > 0 and counts["ok"] > 0 and counts["leak"] + counts["ok"] == 40
    assert all(r.streamed and r.ttft_s is not None for r in streamed.requests())
    assert streamed.summary()["total_output_tokens"] > 0  # the twin's usage chunk was read


@pytest.mark.pure
@pytest.mark.parametrize(("options", "said"), [
    (["--slo", "garbage"], "--slo/--goodput: 'garbage' is not KEY=MS"),
    (["--slo", "tpot_ms=abc"], "tpot_ms: 'abc' is not a number of milliseconds"),
    (["--slo", "ttfb_ms=3"], "KEY one of ttft_ms, tpot_ms, itl_ms, e2e_ms (or ttft, tpot"),
    (["--goodput", "ttft:500 e2el:x"], "e2e_ms: 'x' is not a number"),
    (["--request-rate", "-1"], "--request-rate: '-1' is not a rate"),
    (["--request-rate", "nan"], "--request-rate: 'nan' is not a rate"),
    (["--request-rate", "fast"], "--request-rate: 'fast' is not a rate"),
    (["--request-rate", "inf", "--arrival", "poisson"], "--arrival poisson needs a finite"),
    (["--stream", "--disable-stream"], "--stream and --disable-stream contradict"),
    (["--arrival", "poisson"], "request_rate"),
    (["--fail-on", "goodput_slos_ms>1"], "unknown name 'goodput_slos_ms'"),  # not a number
])
def test_cli_bad_options_are_bad_input(options: list[str], said: str) -> None:
    result = CliRunner().invoke(app, ["stress", "http://127.0.0.1:9", *options])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert said in " ".join(result.output.replace("│", " ").split()), result.output


@pytest.mark.real
def test_cli_stress_with_every_option(twin: TwinFactory, tmp_path: Path) -> None:
    url = twin("--twin-latency-ms", "1")
    jsonl = tmp_path / "sessions.jsonl"
    result = CliRunner().invoke(app, [
        "stress", url, "--sessions", "6", "--rounds", "3", "--seed", "2",
        "--request-rate", "60", "--max-concurrency", "4", "--context-start", "200",
        "--context-end", "2000", "--slo", "ttft_ms=10000,tpot_ms=10000,e2e_ms=10000",
        "--jsonl", str(jsonl), "--timeout", "20", "--json",
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["counts"]["ok"] == 6 and summary["completed"] == 18
    assert summary["good_requests"] == 18 and summary["goodput"] > 0
    assert summary["request_goodput"] == summary["goodput"] and summary["slo_attainment"] == 1
    assert summary["goodput_slos_ms"] == {"ttft": 10000, "tpot": 10000, "e2el": 10000}
    assert summary["slo_attainment_by_metric"] == {"ttft": 1.0, "tpot": 1.0, "e2el": 1.0}
    assert summary["mean_ttft_ms"] <= summary["mean_e2e_latency_ms"]
    # streamed by default: the twin's decode pace between chunks
    assert summary["stream"] is True and summary["median_itl_ms"] > 0
    assert summary["median_tpot_ms"] > 0
    # 60 requests a second: sessions of 3 requests start at 20 a second on a seeded schedule,
    # and none before its start, so no more than that (a loaded machine only spreads them)
    spec = WorkloadSpec(sessions=6, rounds=3, seed=2, arrival=Arrival.POISSON, request_rate=60)
    offsets = arrival_offsets(spec, seed=2)
    assert summary["request_rate"] == 60 and summary["duration"] >= offsets[-1] > 0.1
    assert summary["request_throughput"] <= 18 / offsets[-1] < 2 * 60
    # the twin's own server arguments, as bench_serving records them
    assert summary["server_info"]["port"] == int(url.rsplit(":", 1)[1])
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["key"] for r in records] == [f"s2-{i}" for i in range(6)]
    assert all(r["outcome"] == Outcome.OK.value and len(r["requests"]) == 3 for r in records)
    # Context growth reached the twin: its usage counts ~4 chars a token of the messages.
    assert records[0]["requests"][-1]["prompt_tokens"] > 1500
