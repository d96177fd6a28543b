"""Secrets: referenced in the campaign file, read from the driver's environment, never stored.

A planted token (a level's env, a service's env, the twin's `--api-key`, the pool's
`api_key_env`) goes through a real campaign on twins; then every artifact is grepped for it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from db.records import LogRow, SessionRow, TrialTiming
from db.store import Store
from experiments.campaign import Campaign
from experiments.campaign_load import load_campaign
from experiments.secrets import SecretMissing, SecretValues, redact, remember
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import run_stress
from orchestrator.cli import app
from orchestrator.demo import twin_pool
from orchestrator.executor.base import TrialReport
from orchestrator.executor.driver import redacted
from orchestrator.executor.ray_pool import private_temp_dir
from tests.conftest import TwinFactory

TOKEN_VAR = "BISECT_TEST_PLANTED_TOKEN"
FACTORS = [{"name": "index_k", "levels": {
    "fp8": {"env": {"BF16_INDEX_K": 0, "BISECT_LEVEL_TOKEN": {"secret": TOKEN_VAR}}},
    "bf16": {"env": {"BF16_INDEX_K": 1}},
}}]


def planted_campaign(workdir: Path, file_secret: Path) -> dict[str, Any]:
    """One pool of one twin that wants the key; the token in four places, as references."""
    fault_model = workdir / "faults.yaml"
    fault_model.write_text("rules: []\n")
    pool = twin_pool("p0", "here", fault_model, latency_ms=1)
    service = pool["services"][0]
    service["start"] += ["--api-key", {"secret": TOKEN_VAR}]
    service["env"] = {"BISECT_SERVICE_KEY": {"secret_file": str(file_secret)}}
    pool["api_key_env"] = TOKEN_VAR
    return {
        "name": "planted secret",
        "nodes": [{"name": "here", "workdir": str(workdir / "services")}],
        "pools": [pool],
        "factors": FACTORS,
        "workload": {"sessions": 6, "rounds": 2, "timeout_s": 20, "seed": 3},
        "strategy": {"kind": "factorial", "repeats": 1},
    }


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def planted(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        dict[str, Any]]:
    """Run the campaign through the CLI with the token in the driver's environment only."""
    workdir = tmp_path_factory.mktemp("secret")
    token, file_token = f"tok-{secrets.token_hex(16)}", f"ftok-{secrets.token_hex(16)}"
    file_secret = workdir / "service.key"
    file_secret.write_text(file_token + "\n")
    campaign_file = workdir / "campaign.yaml"
    campaign_file.write_text(yaml.safe_dump(planted_campaign(workdir, file_secret)))
    db, report = workdir / "store" / "bisect.db", workdir / "report.html"
    os.environ[TOKEN_VAR] = token
    try:
        outputs = {"run": _invoke("run", str(campaign_file), "--store", str(db), "-o",
                                  str(report), "--json")}
        campaign_id = json.loads(outputs["run"][1])["campaign"]
        for command in ("verdict", "log", "show"):
            outputs[command] = _invoke(command, campaign_id, "--store", str(db), "--json")
            outputs[f"{command} (text)"] = _invoke(command, campaign_id, "--store", str(db))
        outputs["ls"] = _invoke("ls", "--store", str(db), "--json")
    finally:
        del os.environ[TOKEN_VAR]
    # Without the variable, a resume refuses before it touches anything: it re-reads it.
    outputs["resume without the secret"] = _invoke("resume", campaign_id, "--store", str(db))
    yield {"workdir": workdir, "db": db, "report": report, "campaign_file": campaign_file,
           "id": campaign_id, "tokens": (token, file_token), "outputs": outputs}


@pytest.mark.real
def test_the_twin_received_the_key_and_the_service_its_secret_env(
        planted: dict[str, Any]) -> None:
    code, stdout, stderr = planted["outputs"]["run"]
    assert code in (0, 3), stderr  # a verdict (no failing variant planted: inconclusive)
    verdict = json.loads(stdout)
    assert verdict["cost"]["trials"] == 2
    # The twin answers 401 without the key: every session judged means every request had it.
    assert sum(v["sessions"] for v in verdict["variants"]) == 12
    trials = json.loads(planted["outputs"]["show"][1])
    assert [t["status"] for t in trials] == ["done", "done"]  # each proven loaded: argv and
    assert all(t["counts"].get("ok") == 6 for t in trials)  # env (secrets included) matched


@pytest.mark.real
def test_a_resume_reads_the_secret_again_and_refuses_without_it(
        planted: dict[str, Any]) -> None:
    code, _, stderr = planted["outputs"]["resume without the secret"]
    assert code == 2 and "Traceback" not in stderr
    assert f"${TOKEN_VAR}" in stderr and "pools[0].api_key_env" in stderr


@pytest.mark.real
def test_the_planted_secret_is_in_no_artifact(planted: dict[str, Any]) -> None:
    workdir: Path = planted["workdir"]
    artifacts: dict[str, bytes] = {}
    for path in sorted(planted["db"].parent.iterdir()):  # the store, its -wal and -shm
        artifacts[str(path)] = path.read_bytes()
    artifacts[str(planted["report"])] = planted["report"].read_bytes()
    for path in sorted((workdir / "services").rglob("*")):  # the node's workdir: logs, pids
        if path.is_file():
            artifacts[str(path)] = path.read_bytes()
    for name, (_, stdout, stderr) in planted["outputs"].items():
        artifacts[f"`bisect {name}` stdout"] = stdout.encode()
        artifacts[f"`bisect {name}` stderr"] = stderr.encode()
    artifacts[str(planted["campaign_file"])] = planted["campaign_file"].read_bytes()
    ray_files = [p for p in Path(os.environ["RAY_TMPDIR"]).rglob("*")
                 if p.is_file() and not p.is_symlink() and not stat.S_ISSOCK(p.lstat().st_mode)]
    for path in ray_files:  # Ray's session: logs of the pool actor that held the values
        artifacts[str(path)] = path.read_bytes()
    assert any(name.endswith("bisect.db") for name in artifacts)
    assert any(name.endswith(".log") for name in artifacts)
    hits = [name for name, data in artifacts.items()
            for token in planted["tokens"] if token.encode() in data]
    print(f"\nplanted secret: {len(artifacts)} artifacts grepped ({len(ray_files)} of Ray's), "
          f"{len(hits)} hits")
    assert hits == []
    stored = json.loads(planted["outputs"]["verdict"][1])
    assert stored["campaign"] == planted["id"]


@pytest.mark.real
def test_the_store_and_the_report_are_owner_only(planted: dict[str, Any]) -> None:
    with Store.open(str(planted["db"])) as store:  # -wal and -shm exist while it is open
        store.list_campaigns()
        files = [*planted["db"].parent.iterdir(), planted["report"]]
        assert {p.name for p in files} >= {"bisect.db", "bisect.db-wal", "bisect.db-shm"}
        for path in files:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


@pytest.mark.real
def test_a_missing_secret_is_bad_input_naming_field_and_variable(tmp_path: Path) -> None:
    campaign_file = tmp_path / "c.yaml"
    data = planted_campaign(tmp_path, tmp_path / "absent.key")
    campaign_file.write_text(yaml.safe_dump(data))
    assert TOKEN_VAR not in os.environ
    assert _invoke("validate", str(campaign_file))[0] == 0  # validation reads no secret
    db = tmp_path / "bisect.db"
    code, _, stderr = _invoke("run", str(campaign_file), "--store", str(db))
    assert code == 2 and "Traceback" not in stderr
    assert str(campaign_file) in stderr and "pools[0].api_key_env" in stderr
    assert f"${TOKEN_VAR} is not set" in stderr
    assert not db.exists()  # nothing made, not even the store
    os.environ[TOKEN_VAR] = "x" * 16
    try:
        with pytest.raises(SecretMissing, match=r"services\[0\]\.env\.BISECT_SERVICE_KEY: "
                                                r"cannot read the secret file"):
            SecretValues.read(load_campaign(campaign_file))
    finally:
        del os.environ[TOKEN_VAR]


@pytest.mark.real
def test_the_store_keeps_the_reference_never_the_value(tmp_path: Path) -> None:
    data = planted_campaign(tmp_path, Path("/run/key"))
    campaign = Campaign.model_validate(data)
    dumped = campaign.model_dump(mode="json")
    assert dumped["factors"][0]["levels"]["fp8"]["env"]["BISECT_LEVEL_TOKEN"]["secret"] \
        == TOKEN_VAR
    assert Campaign.model_validate(dumped) == campaign  # as the store reads it back


@pytest.mark.real
def test_the_secret_tag_is_the_reference_written_short(tmp_path: Path) -> None:
    data = planted_campaign(tmp_path, tmp_path / "k")
    written = yaml.safe_dump(data, sort_keys=False)
    # `NAME:\n  secret: VAR` (the mapping) becomes `NAME: !secret VAR` (the tag).
    tagged_text, count = re.subn(rf"BISECT_LEVEL_TOKEN:\n\s+secret: {TOKEN_VAR}\n",
                                 f"BISECT_LEVEL_TOKEN: !secret {TOKEN_VAR}\n", written)
    assert count == 1
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text(tagged_text, encoding="utf-8")
    assert load_campaign(tagged) == Campaign.model_validate(data)


@pytest.mark.real
def test_credentials_in_a_url_are_refused_pointing_to_api_key_env(tmp_path: Path) -> None:
    data = planted_campaign(tmp_path, tmp_path / "k")
    data["pools"][0]["endpoint"] = "http://user:hunter2@127.0.0.1:30000"
    campaign_file = tmp_path / "c.yaml"
    campaign_file.write_text(yaml.safe_dump(data))
    code, _, stderr = _invoke("validate", str(campaign_file))
    assert code == 2 and "pools[0].endpoint" in stderr and "api_key_env" in stderr
    assert str(campaign_file) in stderr
    code, _, stderr = _invoke("stress", "http://user:hunter2@127.0.0.1:9", "--sessions", "1")
    assert code == 2 and "--api-key-env" in stderr and "Traceback" not in stderr


@pytest.mark.real
def test_stress_sends_the_key_only_when_asked(twin: TwinFactory,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    key = secrets.token_hex(8)
    url = twin("--api-key", key, "--twin-latency-ms", "1")
    spec = WorkloadSpec(sessions=2, rounds=1, timeout_s=10)
    without = asyncio.run(run_stress(url, spec))
    assert {s.outcome.value for s in without.sessions} == {"error"}  # 401 from the twin
    with_key = asyncio.run(run_stress(url, spec, api_key=key))
    assert {s.outcome.value for s in with_key.sessions} == {"ok"}
    monkeypatch.setenv("BISECT_TEST_STRESS_KEY", key)
    code, stdout, stderr = _invoke("stress", url, "--sessions", "2", "--rounds", "1",
                                   "--api-key-env", "BISECT_TEST_STRESS_KEY", "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["judged"] == 2 and key not in stdout + stderr
    code, _, stderr = _invoke("stress", url, "--api-key-env", "BISECT_TEST_NO_SUCH_KEY")
    assert code == 2 and "BISECT_TEST_NO_SUCH_KEY" in stderr


@pytest.mark.pure
def test_what_a_trial_reports_is_redacted_before_it_is_stored() -> None:
    value = f"leaked-{secrets.token_hex(8)}"
    remember(value, "<secret X>")
    report = TrialReport(
        1, f"decode: exited: --api-key {value}", TrialTiming(1.0, 0.5, 0.0, 1),
        [SessionRow(0, "k", "error", 1, 1, f"HTTP 401 for {value}", 0.1)], [],
        [LogRow("s", 3, "traceback", f"server_args=ServerArgs(api_key='{value}')")])
    clean = redacted(report)
    text = repr(clean)
    assert value not in text and text.count("<secret X>") == 3
    assert redact(f"a{value}b") == "a<secret X>b"


@pytest.mark.pure
def test_rays_files_go_under_a_directory_only_the_user_enters(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              ) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    path = Path(private_temp_dir())
    assert path.parent == tmp_path and stat.S_IMODE(path.stat().st_mode) == 0o700
    path.chmod(0o755)  # someone loosened it: never used again
    other = Path(private_temp_dir())
    assert other != path and stat.S_IMODE(other.stat().st_mode) == 0o700
