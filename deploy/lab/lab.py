"""Build, inspect and tear down a lab: N real SSH hosts on this machine, in network namespaces.

Everything lives under one directory (keys, configs, ``lab.json``), so ``lab_down`` works from any
process later. ``lab.json`` is written before anything is created and after every step: a lab that
failed halfway, or whose builder was killed, is torn down like a whole one.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from deploy.lab import net, probe, registry, systemd_host
from deploy.lab.model import Lab, LabError, LabHost, load_lab
from deploy.lab.sshd import (
    SSHD,
    is_ours,
    public_key,
    sshd_pids_in,
    start_sshd,
    terminate,
    write_keypair,
    write_sshd_config,
)

MAX_HOSTS = 50


def _require_root(action: str, *, systemd: bool = False) -> None:
    if os.geteuid() != 0:
        raise LabError(f"`lab {action}` needs root: it creates network namespaces, a bridge and "
                       f"veth pairs and runs sshd; run it as root (for example with sudo)")
    if not os.path.exists(SSHD):
        raise LabError(f"{SSHD} is missing: install it with `apt-get install -y openssh-server`")
    if shutil.which(net.IP) is None:
        raise LabError("the `ip` command is missing: install it with `apt-get install -y iproute2`")
    if systemd:
        systemd_host.require()


def _plan(directory: str, prefix: str, hosts: int, subnet: str | None, systemd: bool) -> Lab:
    network = net.choose_subnet(subnet, prefix)
    addresses = [str(a) for a in network.hosts()]
    if hosts > len(addresses) - 1:
        raise LabError(f"subnet {network} has room for {len(addresses) - 1} hosts, not {hosts}")
    planned = []
    for index in range(1, hosts + 1):
        name = f"lab-{index}"
        veth_host, veth_ns = net.veth_names(prefix, index)
        planned.append(LabHost(
            name=name, namespace=net.namespace_name(prefix, index), address=addresses[index],
            veth_host=veth_host, veth_ns=veth_ns, directory=f"{directory}/hosts/{name}",
            workdir=f"{directory}/hosts/{name}/work",
        ))
    return Lab(directory=directory, prefix=prefix, subnet=str(network),
               bridge=net.bridge_name(prefix), bridge_address=addresses[0],
               user=getpass.getuser(), hosts=tuple(planned), systemd=systemd)


def _write_client_files(lab: Lab) -> None:
    known = [f"{h.address} {public_key(h.host_key)}" for h in lab.hosts]
    Path(lab.known_hosts).write_text("\n".join(known) + "\n", encoding="utf-8")
    entries = [
        f"Host {h.name}\n    HostName {h.address}\n    Port 22\n    User {lab.user}\n"
        f"    IdentityFile {lab.client_key}\n    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {lab.known_hosts}\n    StrictHostKeyChecking yes\n"
        for h in lab.hosts
    ]
    header = "# The lab's hosts. Try: ssh -F THIS_FILE lab-1\n\n"
    Path(lab.ssh_config).write_text(header + "\n".join(entries), encoding="utf-8")


def _wait_reachable(lab: Lab, timeout_s: float = 10.0) -> None:
    """From this machine's namespace, over the bridge: the path every client will take."""
    for host in lab.hosts:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                probe.connect_over_bridge(lab, host, 22, timeout_s=1.0).close()
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise LabError(f"{host.name} ({host.address}:22) is not reachable from this "
                                   f"machine over the lab bridge: {exc.strerror or exc}") from None
                time.sleep(0.02)


def lab_up(directory: str | os.PathLike[str], hosts: int = 2, *, subnet: str | None = None,
           prefix: str | None = None, owner_pid: int | None = None,
           systemd: bool = False) -> Lab:
    """Build a lab of ``hosts`` SSH hosts under ``directory`` (replacing a stale one there).

    ``prefix`` names its namespaces and interfaces (default: derived from the directory).
    ``owner_pid``: the lab belongs to that process; once it has exited, the next ``lab_up`` on
    this machine tears the lab down (a killed test run leaves nothing behind for long).
    ``systemd``: every host is a container with systemd as PID 1 (see ``systemd_host``)."""
    _require_root("up", systemd=systemd)
    path = os.path.abspath(directory)
    if re.search(r"\s", path):
        raise LabError(f"lab directory {path!r} contains whitespace (ssh_config cannot hold it)")
    prefix = prefix or net.default_prefix(path)
    if not re.fullmatch(r"[a-z][a-z0-9]{1,8}", prefix):
        raise LabError(f"lab prefix {prefix!r} must be 2–9 lowercase letters or digits")
    if not 1 <= hosts <= MAX_HOSTS:
        raise LabError(f"a lab has 1 to {MAX_HOSTS} hosts, not {hosts}")
    os.makedirs(path, exist_ok=True)
    with registry.locked():
        for orphan_prefix, orphan_directory in registry.orphans():
            _teardown(orphan_directory, orphan_prefix)
        _teardown(path, None)  # the lab this directory held before, whatever its prefix
        _teardown(path, prefix)  # a stale lab of the same prefix: its names are ours to reuse
        lab = _plan(path, prefix, hosts, subnet, systemd)
        lab.save()  # before anything exists: whatever follows, a teardown knows what to undo
        registry.register(prefix, path, owner_pid)
        try:
            return _build(lab)
        except BaseException:
            _teardown(path, prefix)
            raise


def _build(lab: Lab) -> Lab:
    write_keypair(lab.client_key, f"bisect-lab-client@{lab.prefix}")
    Path(lab.directory, "authorized_keys").write_text(
        public_key(lab.client_key) + "\n", encoding="utf-8")
    for host in lab.hosts:
        os.makedirs(host.workdir, exist_ok=True)
        write_keypair(host.host_key, f"{host.name}@{lab.prefix}")
        write_sshd_config(lab, host)
    _write_client_files(lab)
    prefixlen = int(lab.subnet.split("/")[1])
    net.create_bridge(lab.bridge, lab.bridge_address, prefixlen)
    for host in lab.hosts:
        net.create_host(host, lab.bridge, prefixlen)
        # A systemd host boots in the background (its sshd is a unit): they boot in parallel.
        started = systemd_host.launch(lab, host) if lab.systemd else start_sshd(lab, host)
        lab = lab.with_host(started)
        lab.save()
    if lab.systemd:
        lab = systemd_host.wait_booted(lab)
        lab.save()
    _wait_reachable(lab)
    lab = replace(lab, state="up")
    lab.save()
    return lab


def lab_down(directory: str | os.PathLike[str], *, prefix: str | None = None) -> None:
    """Tear the lab down: its sshd daemons, what runs in its namespaces, its namespaces, veths and
    bridge. Idempotent; works on half-built labs. Only processes inside the lab's own namespaces
    are killed (its sshd and what was started through them), never anything else."""
    _require_root("down")
    with registry.locked():
        _teardown(os.path.abspath(directory), prefix)


def _teardown(path: str, prefix: str | None) -> None:
    try:
        lab = load_lab(path)
    except LabError:
        lab = None  # unreadable: tear down by prefix alone
    if lab is not None and prefix is not None and lab.prefix != prefix:
        lab = None  # the directory now holds another lab: only the names of `prefix` are ours
    prefix = lab.prefix if lab else (prefix or net.default_prefix(path))
    stale_namespaces, stale_links = net.owned(prefix)
    hosts = lab.hosts if lab else ()
    # Containers first: killing a container's PID 1 ends all it runs at once (and their cgroups
    # go); looked up by name too, for a lab whose lab.json is lost.
    systemd_host.kill(hosts, prefix)
    namespaces = sorted({h.namespace for h in hosts} | set(stale_namespaces))
    # The daemons we started (checked by start time: a reused pid is someone else's) ...
    pids = [h.sshd_pid for h in hosts
            if h.sshd_pid is not None and is_ours(h.sshd_pid, h.sshd_start)]
    # ... and everything inside the lab's namespaces: sshd's sessions, services started over SSH.
    present = set(net.namespaces())
    for namespace in namespaces:
        if namespace in present:
            pids.extend(net.namespace_pids(namespace))
    terminate(sorted(set(pids)))
    links = [*stale_links, *(h.veth_host for h in hosts), *([lab.bridge] if lab else [])]
    net.delete(namespaces, links)
    registry.unregister(prefix)
    if lab and lab.state != "down":
        hosts = tuple(replace(h, sshd_pid=None, sshd_start=None, init_pid=None, init_start=None)
                      for h in lab.hosts)
        replace(lab, hosts=hosts, state="down").save()


def restart_sshd(directory: str | os.PathLike[str], which: str | int, *,
                 new_host_key: bool = False) -> Lab:
    """Restart one host's sshd, dropping every SSH connection to it (services it started keep
    running). ``new_host_key``: as if the host were reinstalled; known_hosts keeps the old key."""
    _require_root("restart")
    lab = load_lab(os.path.abspath(directory))
    if lab is None or lab.state != "up":
        raise LabError(f"no lab is up in {directory}")
    host = lab.host(which)
    if lab.systemd:  # systemd restarts the killed sshd itself: the new key must be there first
        if new_host_key:
            write_keypair(host.host_key, f"{host.name}@{lab.prefix}")
        lab = lab.with_host(systemd_host.restart_sshd(host))
        lab.save()
        return lab
    terminate(sshd_pids_in(net.namespace_pids(host.namespace)))
    if new_host_key:
        write_keypair(host.host_key, f"{host.name}@{lab.prefix}")
    lab = lab.with_host(start_sshd(lab, host))
    lab.save()
    return lab


@dataclass(frozen=True)
class HostStatus:
    name: str
    address: str
    namespace: bool  # its namespace exists
    sshd: bool  # the sshd we started is alive
    reachable: bool  # port 22 answers over the lab bridge (never probed once the host is gone)
    systemd: bool | None = None  # systemd labs: its container's systemd is PID 1 and alive


@dataclass(frozen=True)
class LabStatus:
    directory: str
    state: Literal["absent", "up", "degraded", "down"]
    hosts: tuple[HostStatus, ...]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def lab_status(directory: str | os.PathLike[str]) -> LabStatus:
    """What is left of the lab in ``directory`` (no root needed)."""
    path = os.path.abspath(directory)
    lab = load_lab(path)
    if lab is None:
        return LabStatus(path, "absent", ())
    present = set(net.namespaces())
    hosts = []
    for host in lab.hosts:
        # Only over the bridge, and only while the host is there: a lab address whose bridge is
        # gone would take the default route off the machine.
        reachable = host.namespace in present and probe.ssh_port_open(lab, host)
        init = is_ours(host.init_pid, host.init_start) if lab.systemd else None
        hosts.append(HostStatus(host.name, host.address, host.namespace in present,
                                is_ours(host.sshd_pid, host.sshd_start), reachable, init))
    checks = [h.namespace and h.sshd and h.reachable and h.systemd is not False for h in hosts]
    anything = any(h.namespace or h.sshd or h.systemd for h in hosts) or lab.bridge in net.links()
    state: Literal["up", "degraded", "down"] = "down"
    if lab.state == "up" and all(checks):
        state = "up"
    elif anything:
        state = "degraded"
    return LabStatus(path, state, tuple(hosts))
