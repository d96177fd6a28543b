"""A small campaign file of one twin run as a unit of the systemd lab host (tests/lab_fixture's
``systemd_lab``): two sessions of one round per trial, a factorial over the given factors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from deploy.lab import Lab


def twin_start(lab: Lab, program: list[str], port: int) -> list[str]:
    """``program`` (the twin, or a launcher of it) with the twin's arguments on the lab host."""
    return [*program, "--host", lab.host(1).address, "--port", str(port),
            "--twin-startup-delay", "0"]


def unit_campaign(lab: Lab, path: Path, *, unit: str, start: list[str], port: int,
                  factors: list[dict[str, Any]], repeats: int) -> Path:
    """Write the campaign to ``path``: its one service is ``unit``, started as ``start``."""
    host = lab.host(1)
    base = f"http://{host.address}:{port}"
    campaign = {
        "name": f"{path.stem} on {unit}",
        "nodes": [lab.node(1)],
        "pools": [{"name": "p", "endpoint": base, "services": [{
            "name": "twin", "node": host.name, "manager": "systemd", "unit": unit,
            "start": start, "health_url": f"{base}/health", "startup_timeout_s": 30}]}],
        "factors": factors,
        "workload": {"sessions": 2, "rounds": 1, "timeout_s": 10},
        "strategy": {"kind": "factorial", "repeats": repeats},
    }
    path.write_text(yaml.safe_dump(campaign))
    return path
