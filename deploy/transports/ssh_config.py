"""Where an SSH node really is: a node's own values, completed from an OpenSSH-style config.

Resolution follows OpenSSH where it matters to us: values stated on the node win over the
config file (like command-line options), the config's ``HostName``/``User``/``Port``/
``IdentityFile``/``IdentitiesOnly``/``UserKnownHostsFile``/``ProxyJump``/``ProxyCommand`` fill
the rest. Jump hosts are looked up in the same config, so ``ProxyJump bastion`` may be an alias.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from typing import Any, Literal

import paramiko

from deploy.safe_words import host_error
from deploy.transports.base import TransportError

HostKeyPolicy = Literal["strict", "accept_new"]
DEFAULT_SSH_CONFIG = "~/.ssh/config"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


@dataclass(frozen=True)
class SSHTarget:
    """How to reach one node over SSH, as plain values (deploy never sees the campaign model)."""

    node: str  # the node's name: every error message starts with it
    host: str  # an address, a DNS name, or a Host alias of the ssh config
    port: int | None = None  # None: the config's Port, else 22
    user: str | None = None  # None: the config's User, else the local user
    identity_files: tuple[str, ...] = ()  # none given: the config's, else the agent and ~/.ssh/id_*
    ssh_config: str | None = None  # None: ~/.ssh/config when it exists
    known_hosts: str | None = None  # None: the config's UserKnownHostsFile, else ~/.ssh/known_hosts
    host_key_policy: HostKeyPolicy = "strict"
    connect_timeout_s: float = 10.0


@dataclass(frozen=True)
class Hop:
    """One SSH connection of a route: a jump host or the node itself."""

    label: str  # as the user wrote it (alias or address), for messages
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    identities_only: bool


@dataclass(frozen=True)
class Route:
    hops: tuple[Hop, ...]  # jump hosts first, the node last
    known_hosts: str
    proxy_command: str | None


def _load_config(target: SSHTarget) -> paramiko.SSHConfig:
    path = os.path.expanduser(target.ssh_config or DEFAULT_SSH_CONFIG)
    if not os.path.exists(path):
        if target.ssh_config:  # named on the node: a missing file is a mistake, not a default
            raise TransportError(f"{target.node}: ssh_config {path} does not exist")
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(path)
    except (OSError, ValueError, paramiko.SSHException) as exc:
        raise TransportError(f"{target.node}: cannot read ssh_config {path}: {exc}") from None


def _port(node: str, value: Any) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if not 0 < port < 65536:
        raise TransportError(f"{node}: invalid SSH port {value!r}")
    return port


def _hop(
    node: str, config: paramiko.SSHConfig, label: str, *,
    user: str | None = None, port: int | None = None, identity_files: tuple[str, ...] = (),
) -> tuple[Hop, dict[str, Any]]:
    options: dict[str, Any] = dict(config.lookup(label))
    # Like OpenSSH, a config's IdentityFile that does not exist is skipped (configs often list
    # several); one named on the node must exist, and paramiko will say so if it does not.
    configured = [os.path.expanduser(f) for f in options.get("identityfile", ())]
    files = tuple(dict.fromkeys([*(os.path.expanduser(f) for f in identity_files),
                                 *(f for f in configured if os.path.exists(f))]))
    hop = Hop(
        label=label,
        hostname=str(options.get("hostname", label)),
        port=port if port is not None else _port(node, options.get("port", 22)),
        user=user or options.get("user") or getpass.getuser(),
        identity_files=files,
        identities_only=str(options.get("identitiesonly", "no")).lower() == "yes",
    )
    return hop, options


def _parse_jump(node: str, spec: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` or ``ssh://[user@]host[:port]``, as ProxyJump writes a hop."""
    spec = spec.strip().removeprefix("ssh://")
    user, _, rest = spec.rpartition("@")
    host, port = rest, None
    if rest.startswith("["):  # [v6addr]:port
        host, _, tail = rest[1:].partition("]")
        port = _port(node, tail[1:]) if tail.startswith(":") else None
    elif rest.count(":") == 1:
        host, _, text = rest.partition(":")
        port = _port(node, text)
    if not host:
        raise TransportError(f"{node}: invalid ProxyJump hop {spec!r}")
    return user or None, host, port


def resolve(target: SSHTarget) -> Route:
    """The hops to connect through and the known_hosts file to check them against."""
    for value, what in ((target.host, "host"), (target.user, "user")):
        error = host_error(value, what) if value is not None else None
        if error:
            raise TransportError(f"{target.node}: {error}; refused before connecting")
    config = _load_config(target)
    final, options = _hop(
        target.node, config, target.host,
        user=target.user, port=target.port, identity_files=target.identity_files,
    )
    hops: list[Hop] = []
    jump = str(options.get("proxyjump", "none")).strip()
    if jump.lower() != "none":
        for spec in jump.split(","):
            user, host, port = _parse_jump(target.node, spec)
            # A jump host's own ProxyJump is ignored: one chain, as written on the node's entry.
            hops.append(_hop(target.node, config, host, user=user, port=port)[0])
    hops.append(final)
    command = options.get("proxycommand")
    proxy_command = None if hops[:-1] or not command or command.lower() == "none" else command
    known = options.get("userknownhostsfile")
    if isinstance(known, list):  # several files may be listed; the first is the one we write
        known = known[0] if known else None
    known_hosts = target.known_hosts or (str(known).split()[0] if known else DEFAULT_KNOWN_HOSTS)
    return Route(tuple(hops), os.path.expanduser(known_hosts), proxy_command)
