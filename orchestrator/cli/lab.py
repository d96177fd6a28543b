"""`bisect lab up|down|status`: real SSH test hosts on this machine, to try bisect without GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import JsonOption, app, emit_json, error, out

if TYPE_CHECKING:  # the lab (and SSH) is imported by its commands: `bisect verdict` needs none
    from deploy.lab import Lab

lab_app = typer.Typer(no_args_is_help=True, help="A lab of SSH test hosts (needs root).")
app.add_typer(lab_app, name="lab")
DirOption = Annotated[Path, typer.Option("--dir", help="Where the lab keeps its files.")]
DEFAULT_DIR = Path("bisect-lab")


SystemdOption = Annotated[bool, typer.Option(
    "--systemd", help="Make each host a container with systemd as PID 1 (like real nodes), "
                      "its services installed as units.")]


@lab_app.command("up")
def up(directory: DirOption = DEFAULT_DIR,
       hosts: Annotated[int, typer.Option(min=1, max=16, help="How many SSH hosts.")] = 2,
       systemd: SystemdOption = False) -> None:
    """Build the hosts (network namespaces, each with its own sshd) and a ready campaign file."""
    from deploy.lab import LabError, lab_up
    from orchestrator.lab_campaign import write_lab_campaign

    try:
        lab = lab_up(directory.resolve(), hosts, systemd=systemd)
    except LabError as exc:
        error(str(exc))
        raise typer.Exit(2) from None
    campaign = write_lab_campaign(lab, directory.resolve())
    if systemd:
        for unit in _install_units(lab, campaign):
            out.print(f"unit: {unit}", highlight=False, markup=False)
    for host in lab.hosts:
        out.print(f"{host.name}: {host.address} (ssh -F {lab.ssh_config} {host.name})",
                  highlight=False, markup=False)
    out.print(f"campaign: {campaign}\nrun it:   bisect run {campaign}", highlight=False,
              markup=False)


def _install_units(lab: Lab, campaign: Path) -> list[str]:
    """Each service of the lab's campaign as a unit on its host, as an operator would have it:
    the systemd service manager then applies variants as drop-ins on these units."""
    import yaml

    from deploy.lab.units import install_unit, service_unit
    from deploy.transports.ssh import SSHTransport

    installed = []
    for pool in yaml.safe_load(campaign.read_text(encoding="utf-8"))["pools"]:
        for service in pool["services"]:
            unit = f"{service['name']}.service"
            transport = SSHTransport(lab.target(service["node"]))
            try:
                install_unit(transport, unit, service_unit(
                    list(service["start"]), description=f"{service['name']} (bisect lab twin)"))
            finally:
                transport.close()
            installed.append(f"{unit} on {service['node']}")
    return installed


@lab_app.command("down")
def down(directory: DirOption = DEFAULT_DIR) -> None:
    """Stop everything the lab runs and remove its namespaces, links and bridge."""
    from deploy.lab import LabError, lab_down

    try:
        lab_down(directory.resolve())
    except LabError as exc:
        error(str(exc))
        raise typer.Exit(2) from None
    out.print(f"lab in {directory} is down", highlight=False, markup=False)


@lab_app.command("status")
def status(directory: DirOption = DEFAULT_DIR, as_json: JsonOption = False) -> None:
    """What is up: hosts, addresses, sshd."""
    from deploy.lab import lab_status

    state = lab_status(directory.resolve())
    if as_json:
        emit_json(state.as_dict())
        return
    out.print(f"lab {directory}: {state.state}", highlight=False, markup=False)
    for host in state.hosts:
        parts = [("namespace", host.namespace), ("sshd", host.sshd), ("port 22", host.reachable)]
        if host.systemd is not None:
            parts.insert(1, ("systemd", host.systemd))
        checks = ", ".join(f"{name} {'ok' if ok else 'MISSING'}" for name, ok in parts)
        out.print(f"  {host.name} {host.address}: {checks}", highlight=False, markup=False)
