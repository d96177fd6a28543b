"""What the schedule tests share: sweep files a schedule runs (one that fails at once, one on
twins that passes), and the `bisect` program a schedule runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from orchestrator.demo import twin_pool

VENV_BISECT = Path(sys.executable).parent / "bisect"

SWEEP = """\
name: {name}
nodes:
- name: n1
  transport: ssh
  host: 127.0.0.1
  port: 1
  known_hosts: /dev/null
  connect_timeout_s: 2
  workdir: /tmp/bisect-unreachable
pools:
- name: p1
  endpoint: http://127.0.0.1:9
  services:
  - name: twin
    node: n1
    start: [/usr/bin/true]
    health_url: http://127.0.0.1:9/health
    startup_timeout_s: 1
factors:
- name: index_k
  levels:
    fp8: {{env: {{BF16_INDEX_K: '0'}}}}
    bf16: {{env: {{BF16_INDEX_K: '1'}}}}
variants:
  production: {{index_k: fp8}}
  risky: {{index_k: bf16}}
"""

# No per-token cost (as FAST in tests/support/twins.py): a run counts outcomes, not time.
FAST = ["--twin-prefill-us-per-token", "0", "--twin-decode-ms-per-token", "0"]


def write_sweep(directory: Path, name: str = "nightly") -> Path:
    """A sweep file that validates; its one node cannot be reached (SSH to port 1 of the
    loopback: refused at once), so a run of it fails, fast."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(SWEEP.format(name=name), encoding="utf-8")
    return path


def write_twin_sweep(directory: Path, name: str = "twins") -> Path:
    """A sweep file that runs clean where it runs: one `transport: local` node (the machine the
    sweep runs on), one twin pool on a loopback port (free on this machine; a lab host's own
    network namespace has only its sshd listening), one variant, a fault model without faults,
    a tiny workload and the fewest trials. Its services and files live in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    faults = directory / "faults.yaml"
    faults.write_text(yaml.safe_dump({"rules": []}), encoding="utf-8")
    pool = twin_pool("p1", "here", faults, latency_ms=1)
    pool["services"][0]["start"] += FAST
    data: dict[str, Any] = {
        "name": name,
        "nodes": [{"name": "here", "transport": "local", "workdir": str(directory / "services")}],
        "pools": [pool],
        "factors": [{"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": "0"}},
                                                    "bf16": {"env": {"BF16_INDEX_K": "1"}}}}],
        "variants": {"production": {"index_k": "fp8"}},
        "workload": {"sessions": 8, "rounds": 1, "timeout_s": 20},
        "trials": {"min": 2, "max": 2, "confirm": 2},
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
