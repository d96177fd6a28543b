"""The in-process fault model (for benchmarks) agrees with a real twin over HTTP, session by
session: the benchmark's outcome distribution is the twin's."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml

from experiments.outcomes import Outcome
from experiments.twin.faults import load
from experiments.twin.simulate import server_view, session_outcomes, session_results
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import run_stress
from tests.conftest import TwinFactory

MODEL = {
    "seed": 11,
    "rules": [
        {"name": "race", "when": {"env": {"BF16_INDEX_K": "1"},
                                  "flags": {"enable-hierarchical-cache": True}},
         "min_inflight": 8, "probability": 0.2, "effect": "leak", "markup": "dsml"},
        {"name": "eager", "when": {"flags": {"disable-cuda-graph": True}},
         "min_inflight": 1, "probability": 0.1, "effect": "lost_plot"},
    ],
    "noise": {"probability": 0.02, "effect": "no_tool"},
}


@pytest.mark.real
@pytest.mark.parametrize(("flags", "env"), [
    (["--enable-hierarchical-cache"], {"BF16_INDEX_K": "1"}),
    (["--enable-hierarchical-cache", "--disable-cuda-graph"], {"BF16_INDEX_K": "1"}),
    ([], {"BF16_INDEX_K": "0"}),
])
def test_simulated_sessions_match_the_twin_over_http(
        twin: TwinFactory, tmp_path: Path, flags: list[str], env: dict[str, str]) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump(MODEL))
    url = twin("--fault-model", str(path), "--twin-latency-ms", "20", *flags, env=env)
    spec = WorkloadSpec(sessions=60, rounds=3, timeout_s=20)
    result = asyncio.run(run_stress(url, spec, seed=5))
    over_http = [s.outcome for s in sorted(result.sessions, key=lambda s: s.index)]
    simulated = session_outcomes(load(path), server_view(flags, env), sessions=60, seed=5)
    assert over_http == simulated
    assert any(o is not Outcome.OK for o in simulated) or env["BF16_INDEX_K"] == "0"


PER_REQUEST = {
    "seed": 3,
    "rules": [
        # A wedge that hits a share of requests: a session can hang in any round.
        {"name": "stuck", "per": "request", "probability": 0.08, "effect": "wedge"},
        {"name": "leaky", "per": "request", "when": {"flags": {"enable-hierarchical-cache": True}},
         "probability": 0.05, "effect": "leak"},
        {"name": "session-wide", "probability": 0.05, "effect": "lost_plot"},
    ],
    "noise": {"probability": 0.02, "per": "request", "effect": "no_tool"},
}


@pytest.mark.real
def test_per_request_draws_match_the_twin_round_by_round(twin: TwinFactory,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump(PER_REQUEST))
    flags = ["--enable-hierarchical-cache"]
    url = twin("--fault-model", str(path), "--twin-latency-ms", "5", *flags)
    spec = WorkloadSpec(sessions=48, rounds=4, timeout_s=6)  # ample on a loaded machine
    result = asyncio.run(run_stress(url, spec, seed=9))
    over_http = [(s.outcome, s.first_bad_turn)
                 for s in sorted(result.sessions, key=lambda s: s.index)]
    simulated = [(s.outcome, s.first_bad_turn) for s in session_results(
        load(path), server_view(flags, {}), sessions=48, seed=9, rounds=4)]
    assert over_http == simulated
    # Wedges and leaks after the first round: the draws are per request, not per session.
    late = {outcome for outcome, turn in simulated if turn is not None and turn > 1}
    assert {Outcome.TIMEOUT, Outcome.LEAK} <= late
    # A per-request wedge is the twin's wedge: it holds until the client leaves, then aborts.
    timeouts = sum(outcome is Outcome.TIMEOUT for outcome, _ in simulated)
    [log] = tmp_path.glob("twin-*.log")
    deadline = time.monotonic() + 5
    while log.read_text().count("Aborted by AbortReq") < timeouts and time.monotonic() < deadline:
        time.sleep(0.05)
    text = log.read_text()
    assert text.count("Aborted by AbortReq") == timeouts
    assert text.count("KVPoll status: WaitingForInput") >= timeouts
    assert "client disconnected" in text


@pytest.mark.pure
def test_a_model_without_per_request_rules_draws_as_before() -> None:
    # The per-session draw keeps its payload: stored seeds give the outcomes they always gave.
    from experiments.twin.faults import FaultModel, draw

    assert draw(11, 0, "race", "s5-0") == draw(11, 0, "race", "s5-0", None)
    assert draw(11, 0, "race", "s5-0") != draw(11, 0, "race", "s5-0", 1)
    model = FaultModel.model_validate(MODEL)
    view = server_view(["--enable-hierarchical-cache"], {"BF16_INDEX_K": "1"})
    one = session_outcomes(model, view, sessions=200, seed=5)
    assert session_outcomes(model, view, sessions=200, seed=5, rounds=6) == one
    assert sum(o is not Outcome.OK for o in one) > 0
