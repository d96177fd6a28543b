"""A node's own setup that no retry can fix (issue 28, G2): a unit that is not installed, a
`systemctl start` that fails before the variant's command runs, a command systemd cannot
execute. Against the real systemd lab host: the service manager raises SetupError naming node
and unit, and a real `bisect run` stops at once with exit 2, one trial, nothing retried, the
campaign not left running and the unit as the operator installed it. A command that runs and
exits is the service's own failure (the variant's), never setup."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from db.store import Store
from deploy.errors import SetupError
from deploy.lab import Lab
from deploy.lab.units import install_unit, service_unit
from deploy.services.base import ServiceConfig
from deploy.services.systemd import UNIT_DIR, StartFailed, SystemdServiceManager
from deploy.transports.ssh import SSHTransport
from orchestrator.cli import app
from tests.support.systemd_campaigns import twin_start, unit_campaign

pytestmark = pytest.mark.real

needs_root = pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"),
                                reason="a systemd lab host needs root")
PY = sys.executable
PORT = 30040
SLEEPER = [PY, "-c", "import time; time.sleep(600)"]


def install(node: SSHTransport, name: str, *extra: str, argv: list[str] | None = None) -> None:
    install_unit(node, f"{name}.service",
                 service_unit(argv or SLEEPER, description=name) + "".join(
                     line + "\n" for line in extra))


@pytest.fixture(scope="module")
def units(systemd_node: SSHTransport) -> None:
    """The operator's units, each broken one way (the drop-in resets ExecStart only)."""
    install(systemd_node, "prefalse", "ExecStartPre=/bin/false")
    install(systemd_node, "premissing", "ExecStartPre=/nonexistent/bisect-prepare")
    install(systemd_node, "nochdir", "WorkingDirectory=/nonexistent/bisect-dir")
    install(systemd_node, "plain")
    install(systemd_node, "notify", "Type=notify")


def _no_dropin(node: SSHTransport, unit: str) -> bool:
    return node.run(["test", "-e", f"{UNIT_DIR}/{unit}.d/zz-bisect.conf"]).returncode == 1


@needs_root
def test_the_manager_raises_setup_errors_naming_node_and_unit(
        systemd_lab: Lab, systemd_node: SSHTransport, units: None) -> None:
    manager = SystemdServiceManager(systemd_node)
    node = systemd_node.node
    with pytest.raises(SetupError, match=f"^{node}: ghost.service is not installed") as missing:
        manager.start(ServiceConfig.of("ghost", SLEEPER, {}))
    assert (missing.value.node, missing.value.unit) == (node, "ghost.service")
    assert _no_dropin(systemd_node, "ghost.service")
    manager.stop("ghost")  # what a restore does: stopping a unit that is not there is no error

    cases = {
        "prefalse": ("prefalse", SLEEPER, "status=1/FAILURE"),  # `systemctl start` fails
        "premissing": ("premissing", SLEEPER, "/nonexistent/bisect-prepare"),
        "nochdir": ("nochdir", SLEEPER, "CHDIR"),  # systemd's 200: the command never ran
        # ExecStart naming a missing executable (the drop-in's, bypassing the preflight):
        # Type=simple returns before the exec fails, with 203/EXEC
        "exec": ("plain", ["/nonexistent/bisect-server", "--port", "1"],
                 "/nonexistent/bisect-server"),
    }
    for case, (name, argv, why) in cases.items():
        try:
            with pytest.raises(SetupError) as raised:
                manager.start(ServiceConfig.of(name, argv, {"X": "1"}))
            first = str(raised.value).splitlines()[0]
            assert first.startswith(f"{node}: {name}.service cannot start whatever the variant"), \
                (case, first)
            assert why in first and "fix the unit" in first, (case, first)
            assert (raised.value.node, raised.value.unit) == (node, f"{name}.service")
            # said from the unit (what systemd was asked to run), whether the journal has the
            # executor's line yet or not: on a loaded node it can come after the sync
            said = {"exec": "plain.service: ExecStart's /nonexistent/bisect-server",
                    "premissing": "premissing.service: ExecStartPre's /nonexistent/bisect-prepare"}
            if case in said:
                assert f"{said[case]} could not be executed (status=203/EXEC)" in str(
                    raised.value), str(raised.value)
        finally:
            manager.stop(name)
            manager.remove_dropin(name)


@needs_root
def test_a_command_that_runs_and_exits_is_the_variant_s_failure_not_setup(
        systemd_lab: Lab, systemd_node: SSHTransport, units: None) -> None:
    manager = SystemdServiceManager(systemd_node)
    exits = [PY, "-c", "import sys; sys.exit(1)"]  # as a variant's flag may make a server do
    try:
        started = manager.start(ServiceConfig.of("plain", exits, {}))  # Type=simple: started
        assert started.pid == 0 or not manager.is_running("plain")
        with pytest.raises(StartFailed, match=r"notify\.service` failed"):  # Type=notify: waits
            manager.start(ServiceConfig.of("notify", exits, {}))
    finally:
        for name in ("plain", "notify"):
            manager.stop(name)
            manager.remove_dropin(name)


def campaign_file(lab: Lab, tmp_path: Path, unit: str) -> Path:
    return unit_campaign(
        lab, tmp_path / f"{unit}.yaml", unit=unit, port=PORT, repeats=2,
        start=twin_start(lab, [PY, "-m", "experiments.twin"], PORT),
        factors=[{"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": "0"}},
                                                "bf16": {"env": {"BF16_INDEX_K": "1"}}}}])


@needs_root
@pytest.mark.parametrize(("unit", "words"), [
    ("ghost.service", "ghost.service is not installed there"),  # (a) not installed
    ("prefalse.service", "prefalse.service cannot start whatever the variant"),  # (b) start fails
    ("premissing.service", "/nonexistent/bisect-prepare"),  # (c) a missing executable
])
def test_a_run_on_a_unit_that_cannot_start_stops_at_once_as_bad_input(
        systemd_lab: Lab, systemd_node: SSHTransport, units: None, ray_cluster: None,
        tmp_path: Path, unit: str, words: str) -> None:
    db = tmp_path / "bisect.db"
    before = (systemd_node.run(["systemctl", "cat", unit]).stdout
              if unit != "ghost.service" else "")
    result = CliRunner().invoke(app, ["run", str(campaign_file(systemd_lab, tmp_path, unit)),
                                      "--store", str(db)])
    assert result.exit_code == 2, result.output
    node = systemd_lab.host(1).name
    message = result.stderr.split("error: ", 1)[1]
    assert message.startswith(f"{node}: {unit}") and words in message, message
    assert "resume" not in message and "infrastructure" not in message
    with Store.open(str(db)) as store:
        [campaign] = store.list_campaigns()
        trials = store.trials(campaign.id, status=None)
        assert campaign.status not in ("running",)
    assert len(trials) == 1, [t.error for t in trials]  # at once: no retry, no second variant
    assert trials[0].status == "failed" and trials[0].failure == "setup"
    assert f"{node}: {unit}" in (trials[0].error or "")
    # the nodes as found: no drop-in, the unit not running, exactly as the operator left it
    assert _no_dropin(systemd_node, unit)
    if before:
        assert systemd_node.run(["systemctl", "cat", unit]).stdout == before
        assert systemd_node.run(["systemctl", "is-active", unit]).stdout.strip() != "active"
