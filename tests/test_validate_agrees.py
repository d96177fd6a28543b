"""What `bisect run` would refuse, `bisect validate` refuses first (issue 26, item 3).

Each case once validated and then failed the run: a service named `..` (a bare ValueError, exit
1, the campaign left `running`), a `file://` health URL (the start-up timeout waited out), a
`gopher://` endpoint (spoken to as http), an endpoint without a scheme, two pools on one
endpoint. Now each is exit 2 naming the file, the line and the field, from `validate` and from
`run` alike, and nothing is stored. `validate` also names every host a run will contact.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.demo import twin_pool

pytestmark = pytest.mark.real

Data = dict[str, Any]


def campaign(tmp_path: Path, pools: int = 1) -> Data:
    faults = tmp_path / "faults.yaml"
    faults.write_text("rules: []\n")
    return {
        "name": "agree",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")},
                  {"name": "far", "transport": "ssh", "host": "10.99.0.7", "port": 2222,
                   "workdir": "/var/lib/bisect"}],
        "pools": [twin_pool(f"p{i}", "here", faults, latency_ms=1) for i in range(pools)],
        "factors": [{"name": "f", "levels": {"a": {}, "b": {}}}],
        "workload": {"sessions": 2, "rounds": 1, "timeout_s": 10},
        "strategy": {"kind": "factorial", "repeats": 1},
    }


def written(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def line_of(path: Path, text: str) -> int:
    return [n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line][-1]


def setting(*path: str | int, value: str, shown: str | None = None) -> Callable[[Data], str]:
    """A change that sets one field (services[0] of pools[0] unless the path says otherwise);
    it returns the text that marks the field's line."""
    def change(data: Data) -> str:
        where: Any = data
        for key in (path[:-1] if path[0] in ("pools", "nodes") else
                    ("pools", 0, "services", 0, *path[:-1])):
            where = where[key]
        where[path[-1]] = value
        return shown or value
    return change


dots = setting("name", value="..", shown="name: ..")
file_health = setting("health_url", value="file:///etc/hostname")
gopher = setting("pools", 0, "endpoint", value="gopher://127.0.0.1:70/")
no_scheme = setting("pools", 0, "endpoint", value="127.0.0.1:30000")
bare_host = setting("metrics_url", value="localhost:30000/metrics")
no_host = setting("health_url", value="http:///health")
bad_port = setting("pools", 0, "endpoint", value="http://127.0.0.1:99999")


def dotdot_workdir(data: dict[str, Any]) -> str:
    data["nodes"][0]["workdir"] += "/../elsewhere"
    return "elsewhere"


def shared_endpoint(data: dict[str, Any]) -> str:
    first = data["pools"][0]["endpoint"]  # the same server, written another way
    data["pools"][1]["endpoint"] = first.replace("http://", "HTTP://") + "/"
    return "HTTP://"


def shared_pid_file(data: dict[str, Any]) -> str:
    data["pools"][1]["services"][0]["name"] = data["pools"][0]["services"][0]["name"]
    return "name: sglang-p0"


def token_env(data: Data) -> str:
    data["pools"][0]["services"][0]["env"] = {"BISECT_SERVICE_TOKEN": "mine"}
    return "BISECT_SERVICE_TOKEN"


CASES = {
    "service named ..": (dots, 1, "pools[0].services[0].name", "is not a name"),
    "file:// health": (file_health, 1, "health_url", "not an http:// or https:// URL"),
    "gopher:// endpoint": (gopher, 1, "endpoint", "not an http:// or https:// URL"),
    "endpoint without a scheme": (no_scheme, 1, "endpoint", "not an http:// or https:// URL"),
    "metrics without a scheme": (bare_host, 1, "metrics_url", "not an http:// or https:// URL"),
    "URL without a host": (no_host, 1, "health_url", "names no host"),
    "port out of range": (bad_port, 1, "endpoint", "no valid port"),
    "workdir with ..": (dotdot_workdir, 1, "workdir", "cannot hold '..'"),
    "two pools, one endpoint": (shared_endpoint, 2, "pools[1].endpoint",
                                "pool 'p0' has this endpoint too"),
    "bisect's own env name": (token_env, 1, "env.BISECT_SERVICE_TOKEN", "is bisect's own"),
    "two services, one pid file": (shared_pid_file, 2, "pools[1].services[0].name",
                                   "would share a pid file"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_run_refuses_validate_refuses_first(tmp_path: Path, case: str) -> None:
    change, pools, field, message = CASES[case]
    data = campaign(tmp_path, pools)
    marker = change(data)
    path = written(tmp_path, data)
    db = tmp_path / "bisect.db"
    for command in (["validate", str(path)], ["run", str(path), "--store", str(db)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, (command, result.output)
        assert f"{path}:{line_of(path, marker)}:" in result.stderr, result.stderr
        assert field in result.stderr and message in result.stderr, result.stderr
        assert "Traceback" not in result.output
    assert not (tmp_path / "services").exists() and not db.exists()  # nothing made or stored


def test_validate_names_every_host_a_run_contacts(tmp_path: Path) -> None:
    data = campaign(tmp_path, pools=2)
    path = written(tmp_path, data)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    listed = result.stdout.split("a run sends traffic to:\n", 1)[1].splitlines()
    ports = [pool["endpoint"].rsplit(":", 1)[1] for pool in data["pools"]]
    assert listed == [
        "  ssh 10.99.0.7:2222: node far",
        *(f"  http://127.0.0.1:{port}: pool p{i} endpoint, sglang-p{i} health, "
          f"sglang-p{i} health_generate, sglang-p{i} metrics" for i, port in enumerate(ports)),
    ]


def test_an_unforeseen_error_before_the_first_trial_leaves_no_running_campaign(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure nobody foresaw (here, the preflight itself raising) ends the run; the campaign
    says `failed` in `bisect ls`, never `running` with no driver."""
    from orchestrator.executor import driver

    def broken(*_: object, **__: object) -> None:
        raise ValueError("an error nobody foresaw")

    monkeypatch.setattr(driver, "check_nodes", broken)
    data = campaign(tmp_path)
    data["nodes"] = data["nodes"][:1]
    db = tmp_path / "bisect.db"
    result = CliRunner().invoke(app, ["run", str(written(tmp_path, data)), "--store", str(db)])
    assert result.exit_code != 0
    listed = CliRunner().invoke(app, ["ls", "--store", str(db), "--json"])
    assert [row["status"] for row in json.loads(listed.stdout)] == ["failed"], listed.output
