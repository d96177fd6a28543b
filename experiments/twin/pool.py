"""Command lines of a twin pool on this machine: prefill + decode + router, as a campaign pool.

A disaggregated twin pool is three processes, started in this order (the campaign's restart
order): the prefill (HTTP port and bootstrap port), the decode, the router in front of both. The
fault model goes to the decode, which decides; give it to the prefill too if you like (a decode
without one uses its prefill's).
"""

from __future__ import annotations

import random
import socket
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Below the kernel's ephemeral range and above Ray's worker ports (10002-19999 by default)
LOWEST = 20_000


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


_HANDED: deque[int] = deque(maxlen=256)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server started later. Not one ``bind(0)`` hands
    out: that is an ephemeral port, which any outgoing connection (Ray makes many) may take as
    its source port before the server binds it, and the server then dies at start ("address in
    use") on a loaded machine. So a random port between Ray's worker ports and the ephemeral
    range; ``bind(0)`` only where that range leaves no room."""
    start = _ephemeral_start()
    for _ in range(64 if start - LOWEST >= 1_000 else 0):
        port = random.randrange(LOWEST, start)
        # not one handed out lately: several servers are often given their ports before any
        # binds (a test's six twins at once once got one port twice; the second died at start)
        if port not in _HANDED and _bindable(host, port):
            _HANDED.append(port)
            return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class PDPorts:
    prefill: int
    bootstrap: int
    decode: int
    router: int
    host: str = "127.0.0.1"

    @classmethod
    def free(cls, host: str = "127.0.0.1") -> PDPorts:
        ports: set[int] = set()
        while len(ports) < 4:  # four distinct ports, even if the kernel hands one out twice
            ports.add(free_port(host))
        prefill, bootstrap, decode, router = sorted(ports)
        return cls(prefill, bootstrap, decode, router, host)

    def url(self, port: int) -> str:
        return f"http://{self.host}:{port}"


def twin_argv(port: int, *args: str, host: str = "127.0.0.1") -> list[str]:
    return [sys.executable, "-m", "experiments.twin", "--host", host, "--port", str(port), *args]


def prefill_argv(ports: PDPorts, *args: str) -> list[str]:
    return twin_argv(ports.prefill, "--disaggregation-mode", "prefill",
                     "--disaggregation-bootstrap-port", str(ports.bootstrap), *args,
                     host=ports.host)


def decode_argv(ports: PDPorts, *args: str) -> list[str]:
    return twin_argv(ports.decode, "--disaggregation-mode", "decode", *args, host=ports.host)


def router_argv(ports: PDPorts, *args: str) -> list[str]:
    return [sys.executable, "-m", "experiments.twin.router", "--pd-disaggregation",
            "--host", ports.host, "--port", str(ports.router),
            "--prefill", ports.url(ports.prefill), str(ports.bootstrap),
            "--decode", ports.url(ports.decode), *args]


def pd_pool(name: str, node: str, fault_model: Path | None, *, latency_ms: float = 20,
            extra: Sequence[str] = ()) -> dict[str, Any]:
    """Campaign-file data of one PD twin pool on free loopback ports.

    Services are named ``{name}-prefill``, ``{name}-decode``, ``{name}-router``; factors whose
    levels add SGLang flags must name the first two in ``services:`` (the router, like
    sglang_router, rejects server flags).
    """
    ports = PDPorts.free()
    common = ["--tool-call-parser", "deepseekv32", "--enable-metrics",
              "--twin-startup-delay", "0.3", "--twin-latency-ms", str(latency_ms), *extra]
    if fault_model is not None:
        common += ["--fault-model", str(fault_model)]

    def service(role: str, start: list[str], port: int, metrics: bool) -> dict[str, Any]:
        base = ports.url(port)
        return {"name": f"{name}-{role}", "node": node, "start": start,
                "health_url": f"{base}/health",
                "metrics_url": f"{base}/metrics" if metrics else None,
                "startup_timeout_s": 60}

    return {
        "name": name,
        "endpoint": ports.url(ports.router),
        "services": [
            service("prefill", prefill_argv(ports, *common), ports.prefill, True),
            service("decode", decode_argv(ports, *common), ports.decode, True),
            service("router", router_argv(ports), ports.router, False),
        ],
    }
