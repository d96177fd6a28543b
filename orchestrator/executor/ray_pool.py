"""Ray behind one small adapter: pools become actors; nothing else in the code sees Ray."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import ray
import ray._private.ray_constants as ray_constants
from ray._raylet import Config  # type: ignore[attr-defined]
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.executor.base import PoolCrashed, TrialOrder, TrialReport
from orchestrator.executor.load_generators import driver_settings
from orchestrator.executor.trial import PoolRunner


class RayNotStarted(RuntimeError):
    """``ray.init`` failed: the local Ray did not come up (or the cluster named was not joined)."""


def ensure_ray(address: str | None = None, *,
               starting: Callable[[str], None] | None = None) -> bool:
    """Start (or join) Ray once per process; True if this call started a local Ray (joined,
    the cluster and its token file are not this process's to clean up). ``starting`` is told
    the token file of a local Ray before any of its processes exists (each of them carries the
    file's path in its environment: the reaper's mark of this Ray). A start that fails
    (Ray's own errors are a bare ``Exception``, a RuntimeError or a ConnectionError, its
    start-up timeouts among them) raises ``RayNotStarted`` with one sentence."""
    if ray.is_initialized():
        return False
    if address is None and "RAY_TMPDIR" not in os.environ:
        os.environ["RAY_TMPDIR"] = private_temp_dir()
    if address is None:  # a cluster joined keeps its own settings (README: run one safely)
        token_file = local_ray_environment()
        if starting is not None:
            starting(token_file)
    began = time.monotonic()
    # ray.init sets a SIGTERM handler of its own (sys.exit(15)); the caller's stays: the CLI's
    # stops a run as Ctrl-C does, the nodes put back and the campaign stored as interrupted.
    caller_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=True,
        )
    except Exception as exc:
        waited = time.monotonic() - began
        why = " ".join(str(exc).split()) or type(exc).__name__
        why = why if len(why) <= 300 else why[:299] + "…"
        where = "" if address is None else f" (joining {address})"
        raise RayNotStarted(f"Ray did not start within {waited:.1f} s{where}: {why}") from None
    finally:
        if caller_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, caller_sigterm)
    return address is None


def local_ray_environment() -> str:
    """Make the Ray this process starts listen on loopback only and ask every client for a
    token (Ray's defaults: every interface, the node's address; the project used to turn
    authentication off). Returns the token file: 0600, fresh, named by RAY_AUTH_TOKEN_PATH so
    that Ray's processes read it and no environment carries the token itself; removed at exit.

    Ray binds its gRPC servers and agents to the node's address, and takes loopback as the
    node's address only when it believes clusters are off (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER,
    read by each of its processes at import: by this one already, hence the constant too)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    descriptor, token_file = tempfile.mkstemp(prefix="bisect-ray-token-",
                                              dir=os.environ.get("RAY_TMPDIR"))
    with os.fdopen(descriptor, "w") as out:  # mkstemp: 0600
        out.write(secrets.token_hex(32))
    atexit.register(_remove_quietly, token_file)  # (and by the reaper after a kill)
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = token_file
    os.environ.pop("RAY_AUTH_TOKEN", None)
    Config.initialize("")  # this process read the mode at import too (as Ray's own switch does)
    return token_file


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def private_temp_dir() -> str:
    """A directory for Ray's files that only this user can enter. Ray makes its own folders
    0777 whatever the umask (``try_make_directory_shared``): inside this one, nobody else
    reaches its logs or sockets. Short (socket paths must stay under 108 bytes) and reused;
    one that is not ours alone is never used."""
    path = f"{tempfile.gettempdir()}/bisect-ray-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
            or info.st_mode & 0o077):
        return tempfile.mkdtemp(prefix="bisect-ray-")  # 0700, new
    return path


class PoolActors:
    """The ``Executor`` on Ray: one actor per pool. Actors hold no CPU reservation: they mostly
    wait on the network."""

    def __init__(self, campaign_json: dict[str, Any], pool_names: list[str],
                 secret_values: dict[str, str] | None = None) -> None:
        # On the driver's machine: `transport: local` nodes are this machine, and only load
        # generators (orchestrator/executor/load_generators.py) go to the cluster's other machines.
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        actor = ray.remote(num_cpus=0)(PoolRunner).options(scheduling_strategy=here,
                                                           **driver_settings())
        self.actors: dict[str, Any] = {
            # Secrets travel as an argument (in memory), never in the campaign's JSON.
            name: actor.remote(campaign_json, name, secret_values or {}) for name in pool_names
        }
        self.running: dict[Any, str] = {}

    def submit(self, pool: str, order: TrialOrder) -> None:
        self.running[self.actors[pool].run_trial.remote(order)] = pool

    @property
    def busy(self) -> set[str]:
        return set(self.running.values())

    def next_report(self) -> tuple[str, TrialReport]:
        """Block until some pool finishes its trial; return the pool and its report."""
        [ready], _ = ray.wait(list(self.running), num_returns=1)
        pool = self.running.pop(ready)
        try:
            report: TrialReport = ray.get(ready)
        except RayError as exc:
            cause = getattr(exc, "cause", None) or exc
            raise PoolCrashed(f"pool {pool} crashed: {type(cause).__name__}: {cause}") from exc
        return pool, report

    def shutdown(self) -> None:
        try:
            ray.get([a.shutdown.remote() for a in self.actors.values()], timeout=120)
        finally:
            for handle in self.actors.values():
                ray.kill(handle)
