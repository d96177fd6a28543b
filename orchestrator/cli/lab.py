"""`bisect lab up|down|status`: real SSH test hosts on this machine, to try bisect without GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from deploy.lab import LabError, lab_down, lab_status, lab_up
from orchestrator.cli.common import JsonOption, app, error, out

lab_app = typer.Typer(no_args_is_help=True, help="A lab of SSH test hosts (needs root).")
app.add_typer(lab_app, name="lab")
DirOption = Annotated[Path, typer.Option("--dir", help="Where the lab keeps its files.")]
DEFAULT_DIR = Path("bisect-lab")


@lab_app.command("up")
def up(directory: DirOption = DEFAULT_DIR,
       hosts: Annotated[int, typer.Option(min=1, max=16)] = 2) -> None:
    """Build the hosts (network namespaces, each with its own sshd) and a ready campaign file."""
    from orchestrator.lab_campaign import write_lab_campaign

    try:
        lab = lab_up(directory.resolve(), hosts)
    except LabError as exc:
        error(str(exc))
        raise typer.Exit(2) from None
    campaign = write_lab_campaign(lab, directory.resolve())
    for host in lab.hosts:
        out.print(f"{host.name}: {host.address} (ssh -F {lab.ssh_config} {host.name})",
                  highlight=False)
    out.print(f"campaign: {campaign}\nrun it:   bisect run {campaign}", highlight=False)


@lab_app.command("down")
def down(directory: DirOption = DEFAULT_DIR) -> None:
    """Stop everything the lab runs and remove its namespaces, links and bridge."""
    try:
        lab_down(directory.resolve())
    except LabError as exc:
        error(str(exc))
        raise typer.Exit(2) from None
    out.print(f"lab in {directory} is down", highlight=False)


@lab_app.command("status")
def status(directory: DirOption = DEFAULT_DIR, as_json: JsonOption = False) -> None:
    """What is up: hosts, addresses, sshd."""
    state = lab_status(directory.resolve())
    if as_json:
        print(json.dumps(state.as_dict(), indent=2))
        return
    out.print(f"lab {directory}: {state.state}", highlight=False)
    for host in state.hosts:
        checks = ", ".join(f"{name} {'ok' if ok else 'MISSING'}" for name, ok in (
            ("namespace", host.namespace), ("sshd", host.sshd), ("port 22", host.reachable)))
        out.print(f"  {host.name} {host.address}: {checks}", highlight=False)
