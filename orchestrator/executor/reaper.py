"""The driver's reaper: a small process that outlives a killed driver and stops what it started.

A driver killed with SIGKILL runs no ``finally``: the services it started on this machine
(``transport: local``, ``manager: process``: each in its own session, on purpose) and the Ray
it started (whose dashboard and runtime-env agents survive their raylet) would run on. The
reaper is started first, in a session of its own (a Ctrl-C or a ``kill`` of the driver's
group does not reach it), and reads the driver's messages on a pipe until end of file, which
comes when the driver exits, however it exits:

- in every case, if the driver was starting a Ray of its own, first: it kills Ray's processes
  (by the driver's token file path in their environment, told before ``ray.init``, and by
  their place in the process tree; started after the driver, Ray's by name or path: a kill
  in the middle of ``ray.init`` leaves no agent behind, a pool's actor cannot deploy after
  the services are stopped, and another driver's Ray in the same process group is left
  alone) and removes the Ray token file;
- not told ``done`` (the driver died before restoring the nodes): it asks every service's
  manager to stop what bisect left (``ServiceManager.stop_leftover``): the process manager's
  groups, each through its pid file, on this machine and, over the campaign's own SSH
  transports, on its SSH nodes (systemd units are left to the resume: they may have run before
  the campaign, and the resume puts them back as they were).

Its pid is written in the node locks: a resumed campaign waits for it to finish before taking
the locks over (``deploy.locks.LockInfo.holder_gone``), so it never stops the new driver's
services. The resume still restores every node (checkouts, patches, drop-ins).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from deploy import procs

if TYPE_CHECKING:
    from deploy.transports.base import Transport
    from experiments.campaign import Campaign


def services_of(campaign: Campaign) -> list[dict[str, Any]]:
    """Every service as plain values: enough to build its manager after the driver is gone."""
    workdirs = {n.name: n.workdir for n in campaign.nodes}
    return [{"node": s.node, "manager": s.manager, "workdir": workdirs[s.node], "name": s.name,
             "unit": s.unit} for pool in campaign.pools for s in pool.services]


def ssh_nodes(campaign: Campaign) -> dict[str, dict[str, Any]]:
    """The SSH nodes as plain values, for the reaper to reach them after the driver is gone."""
    return {n.name: n.model_dump(mode="json") for n in campaign.nodes if n.transport == "ssh"}


class Reaper:
    """The driver's side: start the reaper, tell it what to reap, tell it when all is restored."""

    def __init__(self, campaign: Campaign) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.executor.reaper"], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        self.watching_ray = False
        self._send({"services": services_of(campaign), "nodes": ssh_nodes(campaign)})

    @property
    def pid(self) -> int:
        return self.process.pid

    def _send(self, message: dict[str, Any]) -> None:
        pipe: IO[bytes] | None = self.process.stdin
        if pipe is None or pipe.closed:
            return
        with contextlib.suppress(BrokenPipeError):
            pipe.write(json.dumps(message).encode() + b"\n")
            pipe.flush()

    def watch_ray(self, token_file: str) -> None:
        """This process is about to start a Ray of its own, whose processes are marked by
        ``token_file``'s path in their environment (``_ray_processes`` says which): they are
        killed when this process ends, if Ray's own shutdown has not, and the token file
        removed. Another driver's Ray, started from the same script or test run (one process
        group), is left alone."""
        import ray  # only a driver that starts Ray gets here

        self._send({"ray": {"marker": f"RAY_AUTH_TOKEN_PATH={token_file}",
                            "group": os.getpgid(0), "after": procs.start_time(os.getpid()),
                            "package": str(Path(ray.__file__).parent)},
                    "files": [token_file]})
        self.watching_ray = True

    def done(self) -> None:
        """The nodes are restored: services are no longer the reaper's business. Without a Ray
        to watch it exits now; with one, when this process does."""
        self._send({"done": True})
        if not self.watching_ray and self.process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
            self.process.wait()


def _stop_services(services: list[dict[str, Any]], nodes: dict[str, dict[str, Any]]) -> None:
    # Imported here: the reaper starts with every run (its start is the driver's cost, 0.5 s of
    # CPU with these), and most runs end with ``done``, stopping nothing.
    from deploy.services.factory import manager_for
    from deploy.transports.factory import transport_for
    from deploy.transports.local import LocalTransport
    from experiments.campaign import Node

    transports: dict[str, Transport] = {}  # connected on first use: not for a no-op
    try:
        for service in services:
            with contextlib.suppress(Exception):  # one that cannot be stopped: stop the others
                node = service["node"]
                if node not in transports:
                    transports[node] = (transport_for(Node.model_validate(nodes[node]))
                                        if node in nodes else LocalTransport(node))
                manager_for(service["manager"], transports[node], service=service["name"],
                            workdir=service["workdir"], unit=service["unit"],
                            ).stop_leftover(service["name"])
    finally:
        for transport in transports.values():
            with contextlib.suppress(Exception):
                transport.close()


def _is_ray(pid: int, package: bytes) -> bool:
    try:
        name = Path(f"/proc/{pid}/comm").read_bytes().strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return name in (b"raylet", b"gcs_server") or argv.startswith(b"ray::") or package in argv


TOKEN_PATH = b"RAY_AUTH_TOKEN_PATH="


def _ray_processes(group: int, after: int, package: bytes, marker: bytes) -> list[int]:
    """Ray's processes started at or after ``after`` (clock ticks) by this driver's Ray:

    - those that carry its token file's path in their environment (GCS, raylet, workers), and
      their descendants (the raylet's agents: /proc shows their environment overwritten once
      they rename themselves);
    - in the driver's process group, those whose parent is no Ray process and whose
      environment names no other token file: the agents once their raylet is gone (it dies
      with the driver; they do not).

    Not the rest of the group: another driver's Ray can be there (two drivers started from one
    script, or one test run), its GCS and raylet with their own token file, its agents under
    their raylet."""
    seen: dict[int, tuple[int, int, bool, bool]] = {}  # pid: parent, group, marked, another's
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            if fields[0] == "Z" or int(fields[19]) < after or pid == os.getpid():
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        marked = marker in environ
        another = not marked and any(entry.startswith(TOKEN_PATH) for entry in environ)
        seen[pid] = (int(fields[1]), int(fields[2]), marked, another)
    ray = {pid for pid in seen if _is_ray(pid, package)}
    ours = {pid for pid, (parent, its_group, marked, another) in seen.items()
            if marked or (its_group == group and parent not in ray and not another)}
    grown = True
    while grown:  # down the tree: children of ours are ours
        children = {pid for pid, (parent, *_) in seen.items() if parent in ours} - ours
        ours |= children
        grown = bool(children)
    return sorted(ours & ray)


def _kill_ray(group: int, after: int, package: str, marker: str,
              settle_s: float = 5.0) -> None:
    """Kill them, and again while some still appear (a raylet may be forking a worker as it
    dies), for ``settle_s`` at most."""
    deadline = time.monotonic() + settle_s
    while True:
        pids = _ray_processes(group, after, package.encode(), marker.encode())
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if not pids or time.monotonic() > deadline:
            return
        time.sleep(0.2)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the end of the pipe ends it
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    services: list[dict[str, Any]] = []
    nodes: dict[str, dict[str, Any]] = {}
    ray: dict[str, Any] = {}
    files: list[str] = []
    done = False
    for line in sys.stdin.buffer:  # until the driver exits, however it exits
        with contextlib.suppress(ValueError):
            message = json.loads(line)
            services += message.get("services", [])
            nodes.update(message.get("nodes", {}))
            ray.update(message.get("ray", {}))
            files += message.get("files", [])
            done = done or bool(message.get("done"))
    # Ray first: a pool's actor outlives its driver for a while and may still be deploying,
    # starting a service after a stop that came first.
    if ray.get("marker"):
        _kill_ray(int(ray["group"]), int(ray["after"]), str(ray["package"]), str(ray["marker"]))
    if not done:
        _stop_services(services, nodes)
    for path in files:
        with contextlib.suppress(OSError):
            os.unlink(path)


if __name__ == "__main__":
    main()
