"""A lab host reached through a fault proxy, and the campaign run against it: the node-fault
tests (tests/test_node_faults.py) and the fault benchmark (bench/faults.py) share them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from db.store import Store
from deploy.lab import Lab
from deploy.lab.sshd import public_key
from experiments.campaign import Campaign
from orchestrator.stored import create_campaign
from tests.support.fault_campaigns import campaign, twin_service
from tests.support.fault_proxy import FaultProxy

TWIN_PORT = 30000


def proxied_node(lab: Lab, proxy: FaultProxy, directory: Path) -> dict[str, Any]:
    """Lab host 1 as a node reached at the proxy: its host key recorded for 127.0.0.1:PORT."""
    host = lab.host(1)
    known = directory / "known_hosts"
    known.write_text(f"[127.0.0.1]:{proxy.port} {public_key(host.host_key)}\n")
    config = directory / "ssh_config"
    config.write_text("")  # nothing from ~/.ssh/config
    return {"name": host.name, "transport": "ssh", "host": "127.0.0.1", "port": proxy.port,
            "user": lab.user, "identity_file": lab.client_key, "known_hosts": str(known),
            "ssh_config": str(config), "workdir": host.workdir, "connect_timeout_s": 3}


def lab_spec(lab: Lab, directory: Path, node: dict[str, Any]) -> dict[str, Any]:
    host = lab.host(1)
    service = twin_service(TWIN_PORT, node=host.name, host=host.address)
    pool = {"name": "pool-1", "endpoint": f"http://{host.address}:{TWIN_PORT}",
            "services": [service]}
    return campaign(directory, [pool], nodes=[node])


def start(spec: dict[str, Any], db: Path) -> str:
    with Store.open(str(db)) as store:
        return create_campaign(store, Campaign.model_validate(spec), "test")


def when(prefix: str, act: Callable[[], None], *, once: bool = True) -> Callable[[str], None]:
    """A progress hook that acts when the driver says ``prefix...`` (the fault's moment)."""
    done: list[bool] = []

    def hook(message: str) -> None:
        if message.strip().startswith(prefix) and not (once and done):
            done.append(True)
            act()
    return hook


def both(*hooks: Callable[[str], None]) -> Callable[[str], None]:
    def hook(message: str) -> None:
        for each in hooks:
            each(message)
    return hook
