"""A guard on every connection the test process opens: loopback and this machine's own links only.

Tests may send traffic only to loopback and to the lab hosts in namespaces they made. An audit
hook (``sys.addaudithook``, event ``socket.connect``) sees every ``connect`` Python makes, from
paramiko, asyncio, urllib and aiohttp alike. A target that is not loopback is looked up with
``ip route get``: a route through a gateway, or out of the device that holds the default route,
would leave the machine, so the connect is refused before any packet is sent and the attempt is
recorded; the autouse fixture in conftest fails the test that made it (the refusal alone could be
swallowed by code that treats an ``OSError`` as "unreachable").

``attempts()`` also records every INET connect in a block, so a test can assert that some code
made no connection attempt at all.

What it cannot see: connections made by other processes (twins, Ray workers, sshd) and by C code
that calls ``connect(2)`` itself (uvloop, gRPC). Those targets come from the same campaign files.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Attempt:
    host: str
    port: int
    device: str | None  # SO_BINDTODEVICE, if the socket was bound to one
    allowed: bool
    why: str


@dataclass
class _Guard:
    lock: threading.Lock = field(default_factory=threading.Lock)
    refused: list[Attempt] = field(default_factory=list)
    recorders: list[list[Attempt]] = field(default_factory=list)
    installed: bool = False


_GUARD = _Guard()


@cache
def _uplinks() -> frozenset[str]:
    """The devices of the default routes: what goes out of them leaves the machine."""
    devices = set()
    for family in ("-4", "-6"):
        done = subprocess.run(["ip", "-j", family, "route", "show", "default"],
                              capture_output=True, text=True, check=False)
        for route in json.loads(done.stdout or "[]"):
            if route.get("dev"):
                devices.add(route["dev"])
    return frozenset(devices)


def _bound_device(sock: socket.socket) -> str | None:
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, 16)
    except OSError:
        return None
    name = raw.split(b"\0", 1)[0].decode()
    return name or None


def _judge(address: str, device: str | None) -> tuple[bool, str]:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped and ip.ipv4_mapped.is_loopback):
        return True, "loopback"
    if ip.is_unspecified:
        return True, "unspecified (this machine)"
    if device is not None:  # the kernel sends out of this device or not at all
        if device in _uplinks():
            return False, f"bound to the uplink {device}"
        return True, f"bound to {device}"
    done = subprocess.run(["ip", "-j", "route", "get", str(ip)],
                          capture_output=True, text=True, check=False)
    routes = json.loads(done.stdout or "[]") if done.returncode == 0 else []
    if not routes:
        return True, "no route (nothing is sent)"
    route = routes[0]
    if route.get("type") == "local" or route.get("dev") == "lo":
        return True, "an address of this machine"
    if route.get("gateway"):
        return False, f"routed through the gateway {route['gateway']} ({route.get('dev')})"
    if route.get("dev") in _uplinks():
        return False, f"on the uplink {route.get('dev')}"
    return True, f"on this machine's link {route.get('dev')}"


def _resolve(host: Any) -> list[str]:
    if not isinstance(host, str | bytes):
        return []
    name = host.decode() if isinstance(host, bytes) else host
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
        return [name]
    except ValueError:
        pass
    try:  # a name: judge every address it resolves to (getaddrinfo is no connect event)
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(name, None)})
    except OSError:
        return []


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect":
        return
    sock, address = args
    if not isinstance(sock, socket.socket) or sock.family not in (socket.AF_INET,
                                                                  socket.AF_INET6):
        return
    host, port = address[0], int(address[1])
    device = _bound_device(sock)
    attempts = [Attempt(ip, port, device, *_judge(ip, device)) for ip in _resolve(host)]
    with _GUARD.lock:
        for recorder in _GUARD.recorders:
            recorder.extend(attempts)
        refused = [a for a in attempts if not a.allowed]
        _GUARD.refused.extend(refused)
    if refused:
        raise PermissionError(f"test traffic off the machine refused: {refused[0].host}:"
                              f"{refused[0].port} is {refused[0].why}")


def install() -> None:
    """Install the hook once per process (audit hooks cannot be removed)."""
    if not _GUARD.installed:
        _GUARD.installed = True
        sys.addaudithook(_hook)


def take_refused() -> list[Attempt]:
    """The refused attempts since the last call (the fixture's check after each test)."""
    with _GUARD.lock:
        refused, _GUARD.refused = _GUARD.refused, []
    return refused


@contextmanager
def attempts() -> Iterator[list[Attempt]]:
    """Every INET connect attempted in the block, allowed or not."""
    install()
    recorded: list[Attempt] = []
    with _GUARD.lock:
        _GUARD.recorders.append(recorded)
    try:
        yield recorded
    finally:
        with _GUARD.lock:
            _GUARD.recorders.remove(recorded)
