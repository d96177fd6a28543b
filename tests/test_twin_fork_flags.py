"""A fork's own flags on the twin: declared by the campaign (the twin service's env), accepted,
listed by `--help`, reported and matched by fault rules like SGLang's; the preflight's
LevelFlags check passes a campaign that uses them and names an undeclared one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.transports.factory import Transports
from experiments.campaign import Campaign
from experiments.twin import faults
from experiments.twin.args import FORK_FLAGS_ENV
from experiments.twin.simulate import server_view
from orchestrator.demo import twin_pool
from orchestrator.executor.nodes import PreflightFailed, check_nodes
from tests.support.twins import (
    FAST,
    REPO,
    body,
    get,
    is_leak,
    opening,
    post_chat,
    processes,
    start_twins,
)

pytestmark = pytest.mark.real

FORK = "--bf16-index-k --index-k-block=TOKENS"
MODEL = {"rules": [{
    "name": "fork-race",
    "when": {"flags": {"bf16-index-k": True, "index-k-block": 64}},
    "probability": 1.0, "effect": "leak",
}]}


def twin_cli(*args: str, fork: str | None = FORK) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != FORK_FLAGS_ENV}
    if fork is not None:
        env[FORK_FLAGS_ENV] = fork
    return subprocess.run([sys.executable, "-m", "experiments.twin", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=30)


def test_help_lists_the_declared_fork_flags() -> None:
    shown = twin_cli("--help")
    assert shown.returncode == 0
    assert "fork flags" in shown.stdout and "--bf16-index-k" in shown.stdout
    assert "--index-k-block TOKENS" in shown.stdout
    plain = twin_cli("--help", fork=None)
    assert plain.returncode == 0 and "--bf16-index-k" not in plain.stdout


@pytest.mark.parametrize(("fork", "message"), [
    ("--port", "--port is already a flag of the twin"),
    ("--tp_size", "--tp_size is already a flag"),  # SGLang's --tp-size, spelt with _
    ("--x --x=N", "--x is already a flag of the twin (an SGLang flag or a twin-only one), or "
     "declared twice"),
    ("bf16", "'bf16' is not a flag: write --name for a switch"),
    ("--a=1", "'--a=1' is not a flag"),
])
def test_a_bad_declaration_exits_2_with_one_line(fork: str, message: str) -> None:
    result = twin_cli("--help", fork=fork)
    assert result.returncode == 2
    assert f"${FORK_FLAGS_ENV}: " in result.stderr and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_fault_rules_match_fork_flags_over_http(tmp_path: Path) -> None:
    model = tmp_path / "faults.yaml"
    model.write_text(yaml.safe_dump(MODEL))
    env = {FORK_FLAGS_ENV: FORK}
    with processes(tmp_path) as procs:
        both, one, none = start_twins(
            procs,
            ("both", ("--fault-model", str(model), "--bf16-index-k", "--index-k-block", "64",
                      *FAST), env),
            ("one", ("--fault-model", str(model), "--bf16-index-k", *FAST), env),
            ("none", ("--fault-model", str(model), *FAST), env))
        assert is_leak(post_chat(both, body(opening("k")))[1])
        assert not is_leak(post_chat(one, body(opening("k")))[1])
        assert not is_leak(post_chat(none, body(opening("k")))[1])
        info = json.loads(get(f"{both}/get_server_info")[1])
        # Reported like SGLang's own flags: in the server args and the twin's flag view.
        assert info["bf16_index_k"] is True and info["index_k_block"] == "64"
        assert info["twin"]["flags"]["bf16-index-k"] is True
        assert "bf16_index_k=True, index_k_block='64'" in procs.log("both")
    # The in-process model sees the same flags (the benchmark's pools).
    view = server_view(["--bf16-index-k", "--index-k-block", "64"], {FORK_FLAGS_ENV: FORK})
    decision = faults.decide(faults.FaultModel.model_validate(MODEL), twin_seed=0,
                             flags=view.flags, env=view.env, inflight=1, session_key="k")
    assert decision is not None and decision.rule == "fork-race"


def test_a_rule_on_an_undeclared_flag_names_the_declaration(tmp_path: Path) -> None:
    model = tmp_path / "faults.yaml"
    model.write_text(yaml.safe_dump(MODEL))
    result = twin_cli("--fault-model", str(model), "--twin-startup-delay", "0",
                      fork="--bf16-index-k")
    assert result.returncode == 2
    assert (f"fault model {model}, field rules[0].when.flags.index-k-block: the twin accepts "
            f"no such flag (a fork's own flag must be declared in ${FORK_FLAGS_ENV})"
            in result.stderr)
    unknown = twin_cli("--bf16-index-k", "--twin-startup-delay", "0", fork=None)
    assert unknown.returncode == 2 and "unrecognized arguments: --bf16-index-k" in unknown.stderr


def fork_campaign(tmp_path: Path, fork: str | None, level_flags: list[str]) -> Campaign:
    pool = twin_pool("p", "here", tmp_path / "faults.yaml", latency_ms=1)
    if fork is not None:  # the campaign declares the fork's flags where the twin is defined
        pool["services"][0]["env"] = {FORK_FLAGS_ENV: fork}
    data: dict[str, Any] = {
        "name": "fork flags",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [pool],
        "factors": [{"name": "index_k", "levels": {"fp8": {}, "bf16": {"flags": level_flags}}}],
        "workload": {"sessions": 8, "rounds": 1, "timeout_s": 10},
        "strategy": {"kind": "factorial", "repeats": 1},
    }
    return Campaign.model_validate(data)


def test_preflight_accepts_declared_fork_flags_and_names_an_undeclared_one(
        tmp_path: Path) -> None:
    (tmp_path / "faults.yaml").write_text(yaml.safe_dump(MODEL))
    levels = ["--bf16-index-k", "--index-k-block", "64"]
    good = fork_campaign(tmp_path, FORK, levels)
    transports = Transports(good.nodes)
    try:
        result = check_nodes(good, transports)  # runs the twin's real --help with that env
        assert result.problems == []
        with pytest.raises(PreflightFailed) as caught:
            check_nodes(fork_campaign(tmp_path, "--bf16-index-k", levels), transports)
        assert "factor index_k, level bf16 passes --index-k-block" in str(caught.value)
        assert "--bf16-index-k" not in str(caught.value)  # declared: not a problem
        with pytest.raises(PreflightFailed, match="level bf16 passes --bf16-index-k"):
            check_nodes(fork_campaign(tmp_path, None, levels), transports)
    finally:
        transports.close()
