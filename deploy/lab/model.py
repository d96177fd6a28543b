"""What a lab is, as written to ``lab.json``: enough to use it, check it and tear it down later,
from another process (``bisect lab down`` runs long after ``bisect lab up`` has exited)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from deploy.transports.ssh_config import HostKeyPolicy, SSHTarget

LAB_FILE = "lab.json"
State = Literal["building", "up", "down"]


class LabError(RuntimeError):
    """The lab cannot be built, used or torn down; the message says why in a sentence."""


@dataclass(frozen=True)
class LabHost:
    name: str  # the host's alias in the lab's ssh_config, e.g. lab-1
    namespace: str  # its network namespace
    address: str  # its address on the lab bridge; its sshd listens on port 22 there
    veth_host: str  # the veth end attached to the bridge (the other end is in the namespace)
    veth_ns: str
    directory: str  # its sshd config, host key, pid file and log
    workdir: str  # a place for services' pid and log files on this host
    sshd_pid: int | None = None
    sshd_start: int | None = None  # start time in /proc ticks: a reused pid is not ours
    init_pid: int | None = None  # systemd labs: the container's PID 1, as this machine sees it
    init_start: int | None = None

    @property
    def sshd_config(self) -> str:
        return f"{self.directory}/sshd_config"

    @property
    def host_key(self) -> str:
        return f"{self.directory}/ssh_host_ed25519_key"

    @property
    def pid_file(self) -> str:
        return f"{self.directory}/sshd.pid"

    @property
    def sshd_log(self) -> str:
        return f"{self.directory}/sshd.log"


@dataclass(frozen=True)
class Lab:
    directory: str
    prefix: str  # every namespace and interface name of this lab starts with it
    subnet: str  # e.g. 10.231.7.0/24
    bridge: str
    bridge_address: str  # this machine's address on the lab network: hosts reach it there
    user: str  # the login user on every host
    hosts: tuple[LabHost, ...] = ()
    state: State = "building"
    systemd: bool = False  # each host is a container with systemd as PID 1 (systemd_host.py)

    # -- the files a client needs --

    @property
    def client_key(self) -> str:
        return f"{self.directory}/id_ed25519"

    @property
    def known_hosts(self) -> str:
        return f"{self.directory}/known_hosts"

    @property
    def ssh_config(self) -> str:
        return f"{self.directory}/ssh_config"

    def host(self, which: str | int) -> LabHost:
        """A host by alias (``lab-1``) or by 1-based number."""
        for index, host in enumerate(self.hosts, start=1):
            if which in (host.name, index):
                return host
        raise LabError(f"the lab in {self.directory} has no host {which!r}")

    def node(self, which: str | int, **extra: Any) -> dict[str, Any]:
        """The host as a campaign node (``nodes:`` entry) reached over SSH through the lab."""
        host = self.host(which)
        return {"name": host.name, "transport": "ssh", "host": host.name,
                "ssh_config": self.ssh_config, "known_hosts": self.known_hosts,
                "workdir": host.workdir, **extra}

    def target(self, which: str | int, *, host_key_policy: HostKeyPolicy = "strict",
               **overrides: Any) -> SSHTarget:
        """An SSHTarget for the host by its alias: resolution goes through the lab's ssh_config."""
        host = self.host(which)
        values: dict[str, Any] = {"node": host.name, "host": host.name,
                                  "ssh_config": self.ssh_config, "known_hosts": self.known_hosts,
                                  "host_key_policy": host_key_policy, "connect_timeout_s": 5.0}
        return SSHTarget(**{**values, **overrides})

    def netns_exec(self, which: str | int, *argv: str) -> list[str]:
        """An argv that runs ``argv`` inside the host's namespace, directly (no SSH)."""
        return ["ip", "netns", "exec", self.host(which).namespace, *argv]

    # -- lab.json --

    def with_host(self, host: LabHost) -> Lab:
        hosts = tuple(host if h.name == host.name else h for h in self.hosts)
        return replace(self, hosts=hosts)

    def save(self) -> None:
        data = asdict(self)
        path = Path(self.directory, LAB_FILE)
        temporary = path.with_suffix(".tmp")  # a crash mid-write never leaves half a file
        temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, path)


def load_lab(directory: str | os.PathLike[str]) -> Lab | None:
    path = Path(directory, LAB_FILE)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        hosts = tuple(LabHost(**host) for host in data.pop("hosts"))
        return Lab(**data, hosts=hosts)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise LabError(f"{path} is not a lab description this version can read: {exc}") from None
