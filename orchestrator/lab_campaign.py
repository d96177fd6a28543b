"""A ready campaign for a lab of SSH test hosts: one twin per host, the seed investigation's
factors, and the fault model of the demo. `bisect lab up` writes it; the SSH tests run it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from deploy.lab import Lab
from orchestrator.demo import DEMO_FACTORS, FAULT_MODEL

TWIN_PORT = 30000


def lab_pool(lab: Lab, which: int, fault_model: Path) -> dict[str, Any]:
    """A pool of one combined twin inside lab host ``which``, deployed over SSH."""
    host = lab.host(which)
    base = f"http://{host.address}:{TWIN_PORT}"
    return {
        "name": f"pool-{which}",
        "endpoint": base,
        "services": [{
            "name": "sglang",
            "node": host.name,
            # An absolute interpreter: an SSH session has sshd's PATH and starts in $HOME.
            "start": [sys.executable, "-m", "experiments.twin", "--host", host.address,
                      "--port", str(TWIN_PORT), "--enable-metrics",
                      "--fault-model", str(fault_model), "--twin-startup-delay", "0.2",
                      "--twin-latency-ms", "5"],
            "health_url": f"{base}/health",
            "metrics_url": f"{base}/metrics",
            "startup_timeout_s": 60,
            # On systemd hosts `bisect lab up --systemd` installs the unit SERVICE.service.
            **({"manager": "systemd"} if lab.systemd else {}),
        }],
    }


def lab_campaign(lab: Lab, fault_model: Path, **overrides: Any) -> dict[str, Any]:
    hosts = range(1, len(lab.hosts) + 1)
    return {
        "name": "lab: DeepSeek tool-call leaks under load (twins over SSH)",
        "nodes": [lab.node(which) for which in hosts],
        "pools": [lab_pool(lab, which, fault_model) for which in hosts],
        "factors": DEMO_FACTORS,
        "workload": {"sessions": 80, "rounds": 4, "timeout_s": 30},
        "known_good": {"index_k": "fp8", "hicache": "on", "topk_v2": "on", "cuda_graph": "on"},
        "known_bad": {"index_k": "bf16", "hicache": "on", "topk_v2": "on", "cuda_graph": "on"},
        **overrides,
    }


def write_lab_campaign(lab: Lab, directory: Path) -> Path:
    """Write the fault model and the campaign file next to the lab; return the campaign's path."""
    fault_model = directory / "fault-model.yaml"
    fault_model.write_text(yaml.safe_dump(FAULT_MODEL, sort_keys=False), encoding="utf-8")
    path = directory / "campaign.yaml"
    path.write_text(yaml.safe_dump(lab_campaign(lab, fault_model), sort_keys=False),
                    encoding="utf-8")
    return path
