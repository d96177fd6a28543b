"""The in-process fault model (for benchmarks) agrees with a real twin over HTTP, session by
session: the benchmark's outcome distribution is the twin's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from experiments.outcomes import Outcome
from experiments.twin.faults import load
from experiments.twin.simulate import server_view, session_outcomes
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
