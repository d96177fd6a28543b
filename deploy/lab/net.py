"""The lab's network: one bridge on this machine, one namespace per host, a veth pair between.

Hosts get addresses in a private /24 and only its connected route: they can reach each other
and this machine's bridge address, nothing else (no default route, no forwarding, no NAT).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import subprocess
from collections.abc import Iterable

from deploy.lab.model import LabError, LabHost

IP = "ip"


def ip(*args: str, check: bool = True) -> str:
    try:
        done = subprocess.run([IP, *args], capture_output=True, text=True, check=False,
                              timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"cannot run `ip {' '.join(args)}`: {exc}") from None
    if check and done.returncode != 0:
        raise LabError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


def default_prefix(directory: str) -> str:
    """Short (interface names have 15 bytes) and stable per directory: a rebuilt lab in the same
    directory replaces its stale self, two directories never share names."""
    return "bl" + hashlib.sha1(directory.encode()).hexdigest()[:5]


def namespace_name(prefix: str, index: int) -> str:
    return f"{prefix}-{index}"


def bridge_name(prefix: str) -> str:
    return f"{prefix}b"


def veth_names(prefix: str, index: int) -> tuple[str, str]:
    return f"{prefix}h{index}", f"{prefix}n{index}"


def namespaces() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def links() -> list[str]:
    # `ip -o link`: "7: name@peer: <...>"; a veth whose peer is elsewhere shows "@ifN".
    return [line.split(":")[1].strip().split("@")[0] for line in ip("-o", "link").splitlines()]


def namespace_pids(namespace: str) -> list[int]:
    out = ip("netns", "pids", namespace, check=False)
    return [int(word) for word in out.split() if word.isdigit()]


def owned(prefix: str) -> tuple[list[str], list[str]]:
    """Namespaces and links named like this lab's (exact patterns: prefixes never overlap)."""
    ns = [n for n in namespaces() if re.fullmatch(rf"{re.escape(prefix)}-\d+", n)]
    return ns, [n for n in links() if _is_ours(prefix, n)]


def _is_ours(prefix: str, link: str) -> bool:
    return re.fullmatch(rf"{re.escape(prefix)}(b|h\d+)", link) is not None


def _networks_in_use(prefix: str) -> list[tuple[str, ipaddress.IPv4Network]]:
    """Networks on other interfaces than this lab's own (stale) ones, which are about to go."""
    used = []
    for line in ip("-o", "-4", "addr", "show").splitlines():
        words = line.split()
        if len(words) > 3 and words[2] == "inet" and not _is_ours(prefix, words[1]):
            used.append((words[1], ipaddress.IPv4Interface(words[3]).network))
    for line in ip("-4", "route", "show").splitlines():
        words = line.split()
        if words and words[0] != "default" and "dev" in words:
            dev = words[words.index("dev") + 1]
            if not _is_ours(prefix, dev):
                used.append((dev, ipaddress.IPv4Network(words[0], strict=False)))
    return used


def choose_subnet(requested: str | None, prefix: str) -> ipaddress.IPv4Network:
    """The requested /24 if nothing else uses it; else (when none was asked) a free 10.231.x/24."""
    used = _networks_in_use(prefix)

    def clash(net: ipaddress.IPv4Network) -> str | None:
        return next((dev for dev, other in used if net.overlaps(other)), None)

    if requested is not None:
        try:
            net = ipaddress.IPv4Network(requested)
        except ValueError as exc:
            raise LabError(f"subnet {requested!r} is not an IPv4 network: {exc}") from None
        if not net.is_private or net.prefixlen > 29:
            raise LabError(f"subnet {requested} must be a private IPv4 network of /29 or wider")
        if dev := clash(net):
            raise LabError(f"subnet {net} overlaps a network already on {dev}; choose another")
        return net
    start = int(prefix.encode().hex(), 16) % 256
    for step in range(256):
        net = ipaddress.IPv4Network(f"10.231.{(start + step) % 256}.0/24")
        if clash(net) is None:
            return net
    raise LabError("no free /24 in 10.231.0.0/16 for the lab; pass a subnet")


def create_bridge(name: str, address: str, prefixlen: int) -> None:
    ip("link", "add", name, "type", "bridge")
    ip("addr", "add", f"{address}/{prefixlen}", "dev", name)
    ip("link", "set", name, "up")


def create_host(host: LabHost, bridge: str, prefixlen: int) -> None:
    ip("netns", "add", host.namespace)
    ip("-n", host.namespace, "link", "set", "lo", "up")  # services may talk to 127.0.0.1 inside
    ip("link", "add", host.veth_host, "type", "veth", "peer", "name", host.veth_ns,
       "netns", host.namespace)
    ip("link", "set", host.veth_host, "master", bridge, "up")
    ip("-n", host.namespace, "addr", "add", f"{host.address}/{prefixlen}", "dev", host.veth_ns)
    ip("-n", host.namespace, "link", "set", host.veth_ns, "up")


def delete(namespace_names: Iterable[str], link_names: Iterable[str]) -> None:
    """Delete what exists of these; a namespace takes its veth (and so the peer) with it."""
    present = set(namespaces())
    for name in namespace_names:
        if name in present:
            ip("netns", "del", name)
    present = set(links())
    for name in link_names:
        if name in present:
            ip("link", "del", name, check=False)  # may vanish with its peer meanwhile
