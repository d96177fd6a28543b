"""From a service's declared manager to a ServiceManager (plain values: no campaign model)."""

from __future__ import annotations

from typing import Literal

from deploy.services.base import ServiceManager
from deploy.services.process import ProcessServiceManager
from deploy.services.systemd import SystemdServiceManager
from deploy.transports.base import Transport

ManagerKind = Literal["process", "systemd"]


def manager_for(kind: ManagerKind, transport: Transport, *, service: str, workdir: str,
                unit: str | None = None, start_timeout_s: float = 600.0) -> ServiceManager:
    if kind == "systemd":
        return SystemdServiceManager(transport, units={service: unit} if unit else None,
                                     start_timeout_s=start_timeout_s)
    return ProcessServiceManager(transport, workdir)
