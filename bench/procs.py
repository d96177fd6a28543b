"""Pinned processes for bench/harness.py: the stub server and the client workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any

from worker import MARK

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """User + system seconds of a process so far, from /proc (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def stub_connections(url: str) -> int:
    """Connections the stub has accepted so far."""
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as response:
        return int(json.loads(response.read())["connections"])


def start_stub(script: Path, port: int, core: int) -> subprocess.Popen[str]:
    stub = subprocess.Popen(["taskset", "-c", str(core), sys.executable, str(script),
                             "--port", str(port)], stdout=subprocess.PIPE, text=True)
    assert stub.stdout is not None
    line = stub.stdout.readline()
    if not line.startswith("ready"):
        stub.kill()
        raise RuntimeError(f"stub server did not start: {line!r}")
    return stub


class Worker:
    """A client process pinned to ``core``; ``run`` sends one job and waits for its result."""

    def __init__(self, name: str, argv: list[str], core: int) -> None:
        self.name = name
        self.process = subprocess.Popen(
            ["taskset", "-c", str(core), sys.executable, *argv], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false",
                 "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        self.tail: deque[str] = deque(maxlen=30)

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        proc0 = cpu_of(self.process.pid)
        stdin.write(json.dumps(job) + "\n")
        stdin.flush()
        for line in stdout:
            if line.startswith(MARK):
                result: dict[str, Any] = json.loads(line[len(MARK):])
                result["proc_cpu_s"] = cpu_of(self.process.pid) - proc0
                return result
            self.tail.append(line.rstrip())
        return {"error": f"{self.name} exited; last output: " + " | ".join(self.tail)}

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
