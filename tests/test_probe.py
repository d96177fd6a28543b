"""The user's own probe (`workload: {command: ...}`), as `git bisect run` runs one: real processes
judged by their exit status, and bad campaign files refused through the real console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from deploy import procs
from experiments.campaign import Campaign
from experiments.campaign_load import load_campaign
from experiments.outcomes import CORRUPTION, Outcome
from experiments.workload.probe import MAX_OUTPUT, ProbeSpec, env_name, probe_env, run_probe

BISECT = str(Path(sys.executable).parent / "bisect")


def sh(script: str, tmp_path: Path, timeout_s: float = 30.0) -> tuple[str, ...]:
    run = run_probe(["sh", "-c", script], cwd=str(tmp_path), env=dict(os.environ),
                    timeout_s=timeout_s)
    return run.judgement, run.outcome.value, run.status().split(" after ")[0], run.output


@pytest.mark.real
@pytest.mark.parametrize(("script", "judged"), [
    ("echo fine; exit 0", ("good", "ok", "exit 0", "fine\n")),
    ("echo broken >&2; exit 1", ("bad", "probe_failed", "exit 1", "broken\n")),
    ("exit 127", ("bad", "probe_failed", "exit 127", "")),
    ("echo untestable; exit 125", ("skip", "probe_failed", "exit 125", "untestable\n")),
    ("echo dying; kill -9 $$", ("error", "probe_failed", "killed by SIGKILL", "dying\n")),
    ("exit 130", ("error", "probe_failed", "exit 130", "")),  # a shell's child killed by SIGINT
])
def test_the_exit_status_judges_as_git_bisect_run_does(tmp_path: Path, script: str,
                                                        judged: tuple[str, ...]) -> None:
    assert sh(script, tmp_path) == judged


@pytest.mark.real
def test_a_probe_that_cannot_start_is_an_error_not_bad(tmp_path: Path) -> None:
    run = run_probe([str(tmp_path / "gone.sh")], cwd=str(tmp_path), env={}, timeout_s=5)
    assert run.judgement == "error" and run.exit_code is None
    assert "No such file or directory" in run.status()


@pytest.mark.real
def test_a_probe_past_its_timeout_is_killed_with_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    began = time.monotonic()
    run = run_probe(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; echo started; wait"],
                    cwd=str(tmp_path), env=dict(os.environ), timeout_s=0.5)
    assert time.monotonic() - began < 10
    assert run.judgement == "error" and run.timed_out and run.output == "started\n"
    assert "ran past its timeout" in run.status()
    assert procs.wait_gone(int(pid_file.read_text()), 5)


@pytest.mark.real
def test_a_child_left_holding_the_output_is_not_waited_for(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    run = run_probe(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; exit 0"],
                    cwd=str(tmp_path), env=dict(os.environ), timeout_s=30)
    assert run.judgement == "good" and run.duration_s < 2
    assert procs.wait_gone(int(pid_file.read_text()), 5)  # its group ended with it


@pytest.mark.real
def test_only_the_tail_of_the_output_is_kept(tmp_path: Path) -> None:
    run = run_probe([sys.executable, "-c", "import sys; sys.stdout.write('a' * 100000 + 'END')"],
                    cwd=str(tmp_path), env=dict(os.environ), timeout_s=30)
    assert len(run.output) == MAX_OUTPUT and run.output.endswith("aEND")
    assert run.cut == 100003 - MAX_OUTPUT
    assert run.evidence().startswith("exit 0 after ") and f"[... {run.cut} bytes" in run.evidence()


@pytest.mark.pure
def test_the_probe_is_told_the_variant_in_its_environment() -> None:
    env = probe_env({"PATH": "/bin", "BISECT_LEVEL_STALE": "x"}, variant="index-k=bf16,tp=8",
                    levels={"index-k": "bf16", "tp": "8"}, endpoint="http://127.0.0.1:1",
                    pool="p", trial_id=7, seed=11, run=2, runs=3)
    assert env == {"PATH": "/bin", "BISECT_VARIANT": "index-k=bf16,tp=8",
                   "BISECT_ENDPOINT": "http://127.0.0.1:1", "BISECT_POOL": "p",
                   "BISECT_TRIAL_ID": "7", "BISECT_SEED": "11", "BISECT_RUN": "2",
                   "BISECT_RUNS": "3", "BISECT_LEVEL_INDEX_K": "bf16", "BISECT_LEVEL_TP": "8"}
    assert env_name("a.b") == "BISECT_LEVEL_A_B"


@pytest.mark.pure
def test_a_failing_run_counts_as_corruption() -> None:
    assert Outcome.PROBE_FAILED in CORRUPTION  # the campaign's target (corruption) counts it


# --- the campaign file ----------------------------------------------------------------------

BASE = {
    "name": "probe",
    "nodes": [{"name": "here", "workdir": "/tmp/unused"}],
    "pools": [{"name": "p", "endpoint": "http://127.0.0.1:9", "services": [
        {"name": "s", "node": "here", "start": ["/bin/true"],
         "health_url": "http://127.0.0.1:9/health"}]}],
    "factors": [{"name": "hicache", "levels": {"off": {}, "on": {"flags": ["--x"]}}}],
}


def campaign_file(tmp_path: Path, workload: object, **more: object) -> Path:
    (tmp_path / "probe.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "probe.sh").chmod(0o755)
    (tmp_path / "plain.txt").write_text("not a program\n")
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump({**BASE, **more, "workload": workload}, sort_keys=False))
    return path


@pytest.mark.pure
def test_a_probe_campaign_loads_with_its_directory_and_round_trips(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, {"command": "./probe.sh --quick 'two words'", "runs": 3})
    campaign = load_campaign(path)
    probe = campaign.workload
    assert isinstance(probe, ProbeSpec)
    assert probe.command == ["./probe.sh", "--quick", "two words"]
    assert probe.cwd == str(tmp_path.resolve()) and probe.sessions == 3 and probe.timeout_s == 1800
    stored = json.loads(json.dumps(campaign.model_dump(mode="json")))
    assert Campaign.model_validate(stored).workload == probe  # as the store gives it back


@pytest.mark.real
@pytest.mark.parametrize(("workload", "more", "field", "says"), [
    ({"command": ""}, {}, "workload.command", "needs a program to run"),
    ({"command": []}, {}, "workload.command", "needs a program to run"),
    ({"command": 5}, {}, "workload.command", "a list of strings"),
    ({"command": ["./probe.sh", 3]}, {}, "workload.command[1]", "valid string"),
    ({"command": "./probe.sh 'open"}, {}, "workload.command", "No closing quotation"),
    ({"command": "./probe.sh", "sessions": 80}, {}, "workload.sessions",
     "a key of the built-in stress workload"),
    ({"command": "./probe.sh", "rounds": 2}, {}, "workload.rounds",
     "a key of the built-in stress workload"),
    ({"command": "./probe.sh", "runs": 0}, {}, "workload.runs", "greater than or equal to 1"),
    ({"command": "./probe.sh", "timeout_s": -1}, {}, "workload.timeout_s", "greater than 0"),
    ({"command": "./missing.sh"}, {}, "workload.command[0]", "does not exist"),
    ({"command": "./plain.txt"}, {}, "workload.command[0]", "not an executable file"),
    ({"command": "probe.sh"}, {}, "workload.command[0]", "write ./probe.sh"),
    ({"command": "./probe.sh", "cwd": "nowhere"}, {}, "workload.cwd", "not a directory"),
    ({"command": ["./probe.sh", "a\0b"]}, {}, "workload.command[1]", "U+0000"),
    ({"command": "./probe.sh"}, {"strategy": {"target": "wedging"}}, "strategy.target",
     "exit status"),
    ({"command": "./probe.sh"}, {"generators": {"count": 1}}, "generators",
     "driver's machine"),
])
def test_a_bad_probe_is_refused_through_the_console_script(
        tmp_path: Path, workload: dict[str, object], more: dict[str, object], field: str,
        says: str) -> None:
    path = campaign_file(tmp_path, workload, **more)
    done = subprocess.run([BISECT, "validate", str(path)], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    first = done.stderr.strip().splitlines()[0]
    assert first.startswith(f"error: {path}:"), first
    assert f": {field}: " in first and says in first, first


@pytest.mark.real
def test_a_probe_campaign_is_valid_json_schema_wise(tmp_path: Path) -> None:
    import jsonschema

    path = campaign_file(tmp_path, {"command": ["./probe.sh"], "runs": 2})
    schema = json.loads(subprocess.run([BISECT, "schema"], capture_output=True, text=True,
                                       check=True, timeout=120).stdout)
    jsonschema.validate(yaml.safe_load(path.read_text()), schema)
