"""From a node's plain values to a transport. deploy never imports the campaign model: any object
with these attributes (the campaign's ``Node`` has them all) is a node here."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from deploy.transports.base import Transport
from deploy.transports.local import LocalTransport

if TYPE_CHECKING:
    from deploy.transports.ssh_config import HostKeyPolicy, SSHTarget


class NodeSpec(Protocol):
    # Read-only properties, so frozen models and plain dataclasses both qualify.
    @property
    def name(self) -> str: ...
    @property
    def transport(self) -> str: ...
    @property
    def host(self) -> str | None: ...
    @property
    def port(self) -> int | None: ...
    @property
    def user(self) -> str | None: ...
    @property
    def identity_file(self) -> str | Sequence[str] | None: ...
    @property
    def ssh_config(self) -> str | None: ...
    @property
    def known_hosts(self) -> str | None: ...
    @property
    def host_key_policy(self) -> HostKeyPolicy: ...
    @property
    def connect_timeout_s(self) -> float: ...


def ssh_target(node: NodeSpec) -> SSHTarget:
    from deploy.transports.ssh_config import SSHTarget

    if not node.host:
        raise ValueError(f"node {node.name}: transport ssh needs a host")
    files = node.identity_file
    identity_files = (files,) if isinstance(files, str) else tuple(files or ())
    return SSHTarget(
        node=node.name, host=node.host, port=node.port, user=node.user,
        identity_files=identity_files, ssh_config=node.ssh_config, known_hosts=node.known_hosts,
        host_key_policy=node.host_key_policy, connect_timeout_s=node.connect_timeout_s,
    )


def transport_for(node: NodeSpec) -> Transport:
    """A new transport for ``node``. SSH connects lazily, on the first command."""
    if node.transport == "local":
        return LocalTransport(node.name)
    if node.transport == "ssh":
        # paramiko (with invoke) is a fifth of a second to import: paid only by SSH campaigns,
        # not by every pool actor and CLI process of a local one
        from deploy.transports.ssh import SSHTransport

        return SSHTransport(ssh_target(node))
    raise ValueError(f"node {node.name}: unknown transport {node.transport!r}")


class Transports:
    """One transport per node, shared by every service on it (one SSH connection per node)."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        self._nodes = {node.name: node for node in nodes}
        self._open: dict[str, Transport] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Transport:
        with self._lock:
            if name not in self._open:
                self._open[name] = transport_for(self._nodes[name])
            return self._open[name]

    def close(self) -> None:
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for transport in opened:
            transport.close()
