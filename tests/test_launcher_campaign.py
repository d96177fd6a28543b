"""A start command that is a launcher (issue 29): real twin campaigns on the systemd lab host,
the unit's command a wrapper script as deployments write them. One that ends ``exec python -m
… "$@"`` passes the proof of load, which names the process it proved (the unit's MainPID, now the
twin) and the launcher; one that rebuilds the command line and drops a flag fails it, naming the
flag, and its variant is never stressed."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from db.store import Store
from deploy.lab import Lab
from deploy.lab.units import install_unit, service_unit
from deploy.transports.ssh import SSHTransport
from orchestrator.cli import app
from tests.support.systemd_campaigns import twin_start, unit_campaign

pytestmark = pytest.mark.real

PY = sys.executable
PORT = 30050
FLAG = "--enable-hierarchical-cache"
TWIN = f"{shlex.quote(PY)} -m experiments.twin"
LAUNCHERS = {
    # what a deployment's run.sh does: set up, then become the server with its arguments
    "exec": f'#!/bin/sh\ncd /\nexec {TWIN} "$@"\n',
    # one that rebuilds the command line on the way and forgets a flag
    "drop": (f"#!/bin/sh\nfor a do shift; [ \"$a\" = {FLAG} ] || set -- \"$@\" \"$a\"; done\n"
             f'exec {TWIN} "$@"\n'),
}


def launcher(node: SSHTransport, kind: str) -> str:
    """The launcher script on the node (the lab host's own root: gone with the lab)."""
    path = f"/usr/local/bin/bisect-launch-{kind}.sh"
    node.run(["sh", "-c", 'umask 022; printf %s "$2" > "$1" && chmod 755 "$1"', "sh", path,
              LAUNCHERS[kind]]).check()
    return path


def run_campaign(lab: Lab, node: SSHTransport, tmp_path: Path, kind: str
                 ) -> tuple[int, list[str], list[dict[str, Any]], str, dict[str, Any]]:
    """Run a two-variant campaign (hicache off|on) whose unit starts the ``kind`` launcher;
    return the exit code, the launcher's argv, each trial's outcome with its proof, what
    `bisect show --steps` prints and the verdict."""
    script, unit = launcher(node, kind), f"launched-{kind}.service"
    argv = twin_start(lab, [script], PORT)
    install_unit(node, unit, service_unit(argv, description=f"twin by {kind} launcher"))
    path = unit_campaign(lab, tmp_path / f"{kind}.yaml", unit=unit, start=argv, port=PORT,
                         repeats=1, factors=[{"name": "hicache", "levels": {
                             "off": {"env": {"NOTE": "off"}}, "on": {"flags": FLAG}}}])
    db = tmp_path / f"{kind}.db"
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(db), "--json"])
    trials: list[dict[str, Any]] = []
    with Store.open(str(db)) as store:
        [record] = store.list_campaigns()
        for trial in store.trials(record.id, status=None):
            prove = next((s for s in store.steps(trial.id) if s.name == "prove"), None)
            trials.append({"levels": trial.levels, "status": trial.status, "error": trial.error,
                           "proof": prove.details if prove else None})
    shown = CliRunner().invoke(app, ["show", record.id, "--store", str(db), "--steps"],
                               env={"COLUMNS": "200"}).stdout
    return result.exit_code, argv, trials, shown, json.loads(result.stdout)


def test_a_launcher_that_execs_the_server_passes_the_proof(
        systemd_lab: Lab, systemd_node: SSHTransport, ray_cluster: None, tmp_path: Path) -> None:
    code, argv, trials, shown, verdict = run_campaign(systemd_lab, systemd_node, tmp_path,
                                                      "exec")
    assert code == 3, trials  # two sessions a variant decide nothing: the run itself went well
    assert verdict["unresolvable"] == []
    assert sorted(t["levels"]["hicache"] for t in trials) == ["off", "on"]
    for trial in trials:
        assert trial["status"] == "done", trial
        checks = trial["proof"]["checks"]
        flags = [FLAG] if trial["levels"]["hicache"] == "on" else []
        served = [PY, "-m", "experiments.twin", *argv[1:], *flags]
        # exec'd: the unit's MainPID is now the twin, with every argument of the variant's
        assert checks["proved"] == {"pid": checks["pid"], "argv": served, "how": "launcher",
                                    "launcher": [argv[0]]}
        assert checks["argv"] == served
        if not flags:
            assert checks["env"]["NOTE"] == "off"  # the environment is the server's own
        assert f"proved process {checks['pid']}, started by the launcher {argv[0]}" in shown


def test_a_launcher_that_drops_a_flag_fails_the_proof_naming_it(
        systemd_lab: Lab, systemd_node: SSHTransport, ray_cluster: None, tmp_path: Path) -> None:
    code, argv, trials, _, verdict = run_campaign(systemd_lab, systemd_node, tmp_path, "drop")
    served = shlex.join([PY, "-m", "experiments.twin", *argv[1:]])
    on = [t for t in trials if t["levels"]["hicache"] == "on"]
    off = [t for t in trials if t["levels"]["hicache"] == "off"]
    assert [t["status"] for t in off] == ["done"], trials  # what it passes on is proven
    assert off[0]["proof"]["checks"]["proved"]["launcher"] == [argv[0]]
    assert [t["status"] for t in on] == ["failed", "failed"], trials  # tried twice, skipped
    for trial in on:
        problems = trial["proof"]["problems"]
        assert problems == [f"the command line differs from the variant's (missing {FLAG!r}): "
                            f"the process runs {served}"], problems
        assert "proved" not in trial["proof"]["checks"]
        assert trial["error"] == f"twin: the variant is not loaded: {problems[0]}"
    assert code == 3, json.dumps(trials)[:2000]  # the variant left undecided, not a failed run
    [skipped] = verdict["unresolvable"]  # skipped, saying at which step and why
    assert skipped["levels"] == {"hicache": "on"} and skipped["attempts"] == 2
    assert skipped["why"] == f"it could not be proven loaded: {on[-1]['error']}"
