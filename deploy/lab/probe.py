"""The one way this machine opens a connection to a lab host: over the lab's bridge, or not at all.

A lab address is a private address of the lab's own /24. While the bridge exists the kernel
routes it there; once the bridge is gone the same address takes the machine's default route,
off the machine, to whatever answers there. So a probe first checks, without a packet, that the
host's namespace and the lab's bridge both exist, and then binds its socket to the bridge
(``SO_BINDTODEVICE``): even if the bridge vanishes between the check and the connect, the
kernel may send the packet out of that device only, never out of another.
"""

from __future__ import annotations

import errno
import os
import socket

from deploy.lab.model import Lab, LabHost

NETNS_DIR = "/run/netns"  # where `ip netns add` mounts its namespaces
SYS_NET_DIR = "/sys/class/net"


def namespace_exists(namespace: str) -> bool:
    return os.path.exists(os.path.join(NETNS_DIR, namespace))


def bridge_exists(bridge: str) -> bool:
    return os.path.isdir(os.path.join(SYS_NET_DIR, bridge))


def host_present(lab: Lab, host: LabHost) -> bool:
    """The host's namespace and the lab's bridge both exist (read from files: no packet)."""
    return namespace_exists(host.namespace) and bridge_exists(lab.bridge)


def connect_over_bridge(lab: Lab, host: LabHost, port: int, timeout_s: float) -> socket.socket:
    """A TCP connection to ``host:port`` that can only leave through the lab's bridge.

    Raises ``OSError`` (ENETUNREACH) without sending anything when the host or the bridge is
    gone, and whatever ``connect`` raises otherwise."""
    if not host_present(lab, host):
        raise OSError(errno.ENETUNREACH,
                      f"{host.name}: its namespace or the lab bridge {lab.bridge} is gone")
    sock = bound_socket(lab.bridge, timeout_s)
    try:
        sock.connect((host.address, port))
    except BaseException:
        sock.close()
        raise
    return sock


def bound_socket(device: str, timeout_s: float) -> socket.socket:
    """A TCP socket whose packets may leave through ``device`` only (gone: the connect fails)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Since Linux 5.7 an unprivileged socket may bind to a device too (one not yet bound).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
        sock.settimeout(timeout_s)
    except BaseException:
        sock.close()
        raise
    return sock


def ssh_port_open(lab: Lab, host: LabHost, timeout_s: float = 0.5) -> bool:
    """Port 22 of the host answers over the bridge; False, with no packet sent, if it is gone."""
    try:
        connect_over_bridge(lab, host, 22, timeout_s).close()
    except OSError:
        return False
    return True
