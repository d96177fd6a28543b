"""What the schedule tests share: a valid sweep file, and the `bisect` program a schedule runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def write_sweep(directory: Path, name: str = "nightly") -> Path:
    """A sweep file that validates; its one node cannot be reached (SSH to port 1 of the
    loopback: refused at once), so a run of it fails, fast."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(SWEEP.format(name=name), encoding="utf-8")
    return path


_LAUNCHER = f"""#!{sys.executable}
# `bisect` with `bisect schedule` registered, for as long as orchestrator/cli/__init__.py does
# not import orchestrator.cli.schedule_view itself.
import sys
from orchestrator.cli import main, schedule_view  # noqa: F401
sys.exit(main())
"""


def schedule_program(directory: Path) -> Path:
    """The `bisect` console script when it has `bisect schedule`; until then, a launcher named
    `bisect` in ``directory`` that registers it (the real CLI otherwise)."""
    registered = subprocess.run([str(VENV_BISECT), "schedule", "--help"], capture_output=True,
                                check=False, timeout=60).returncode == 0
    if registered:
        return VENV_BISECT
    directory.mkdir(parents=True, exist_ok=True)
    launcher = directory / "bisect"
    launcher.write_text(_LAUNCHER, encoding="utf-8")
    launcher.chmod(0o755)
    return launcher
