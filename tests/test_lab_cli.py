"""`bisect lab up|status|down` through the CLI, with a lab of its own."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app

pytestmark = pytest.mark.real


@pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"), reason="needs root")
def test_lab_up_writes_a_valid_campaign_and_down_removes_everything(tmp_path: Path) -> None:
    runner = CliRunner()
    directory = tmp_path / "lab"
    up = runner.invoke(app, ["lab", "up", "--dir", str(directory), "--hosts", "1"])
    try:
        assert up.exit_code == 0, up.output
        assert "lab-1" in up.stdout and "bisect run" in up.stdout
        campaign = directory / "campaign.yaml"
        valid = runner.invoke(app, ["validate", str(campaign)])
        assert valid.exit_code == 0, valid.output
        status = runner.invoke(app, ["lab", "status", "--dir", str(directory), "--json"])
        state = json.loads(status.stdout)
        assert state["state"] == "up" and state["hosts"][0]["reachable"]
    finally:
        down = runner.invoke(app, ["lab", "down", "--dir", str(directory)])
    assert down.exit_code == 0, down.output
    after = json.loads(runner.invoke(
        app, ["lab", "status", "--dir", str(directory), "--json"]).stdout)
    assert after["state"] in ("down", "absent")
    assert not any(h["namespace"] or h["sshd"] for h in after["hosts"])
