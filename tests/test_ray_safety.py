"""The Ray a driver starts listens on loopback only and refuses a client without its token;
the tests' own Ray is set up the same way."""

from __future__ import annotations

import ipaddress
import json
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

# A driver as `bisect run` starts Ray (ensure_ray), with one actor as the pools have; it prints
# what the test needs and waits for its stdin to close.
DRIVER = """
import json, os, sys
from orchestrator.executor.ray_pool import ensure_ray
import ray
assert ensure_ray()
@ray.remote(num_cpus=0)
class Pool:
    def pid(self):
        return os.getpid()
pool = Pool.remote()
print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "actor": ray.get(pool.pid.remote()),
                  "token_file": os.environ["RAY_AUTH_TOKEN_PATH"]}), flush=True)
sys.stdin.read()
"""
# A client that asks the GCS for something: ALLOWED or REFUSED.
CLIENT = """
import sys
from ray._raylet import GcsClient
try:
    GcsClient(address=sys.argv[1]).internal_kv_get(b"x", None, timeout=10)
    print("ALLOWED")
except Exception as exc:
    print("REFUSED", type(exc).__name__)
"""


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (children of children included)."""
    parents: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(status.parent.name))
    found, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo += parents.get(child, [])
    return found


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """A local address of /proc/net/tcp{,6} ("0100007F:1F90"): 32-bit words in host order."""
    raw = bytes.fromhex(text.split(":")[0])
    host_order = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(host_order)


def _loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, a dual-stack socket's
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def listening(pids: list[int]) -> dict[str, list[str]]:
    """``"pid name"`` -> the local addresses its TCP sockets listen on, from /proc."""
    addresses: dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address] = {}  # by inode
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                addresses[fields[9]] = _address(fields[1])
    found: dict[str, list[str]] = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            links = [os.readlink(f) for f in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        inodes = [link[8:-1] for link in links if link.startswith("socket:[")]
        bound = [str(addresses[i]) + ("" if _loopback(addresses[i]) else " EXPOSED")
                 for i in inodes if i in addresses]
        if bound:
            found[f"{pid} {name}"] = bound
    return found


def _exposed(found: dict[str, list[str]]) -> dict[str, list[str]]:
    return {who: bound for who, bound in found.items() if any(" EXPOSED" in a for a in bound)}


def _without_ray_settings() -> dict[str, str]:
    """This environment without the tests' own Ray settings, and with the project's old
    `RAY_AUTH_MODE=disabled`: the driver must not depend on either."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_AUTH", "RAY_ENABLE_WINDOWS"))}
    return {**env, "RAY_AUTH_MODE": "disabled"}


@pytest.fixture
def driver() -> Iterator[tuple[subprocess.Popen[str], dict[str, object]]]:
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**_without_ray_settings(), "RAY_TMPDIR": ray_tmp})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the driver did not start Ray"
    yield proc, json.loads(line)
    proc.communicate(timeout=60)  # stdin closed: it exits
    subprocess.run(["rm", "-rf", ray_tmp], check=False)


def _ask(gcs: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", CLIENT, gcs], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    return done.stdout.strip()


def test_a_drivers_ray_listens_on_loopback_and_asks_for_its_token(
        driver: tuple[subprocess.Popen[str], dict[str, object]]) -> None:
    proc, started = driver
    ray_processes = [proc.pid, *descendants(proc.pid)]
    found = listening(ray_processes)
    names = " ".join(found)
    assert "gcs_server" in names and "raylet" in names, found  # not vacuous: Ray's servers
    assert str(started["actor"]) in " ".join(w.split()[0] for w in found)  # and the actor's
    assert _exposed(found) == {}

    token_file = Path(str(started["token_file"]))
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text()
    assert len(token) >= 32
    for pid in ray_processes:  # the token is in a file, never in an environment
        try:
            assert token.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue

    gcs = str(started["gcs"])
    assert gcs.startswith("127.0.0.1:")
    anyone = _without_ray_settings()
    assert _ask(gcs, anyone).startswith("REFUSED")
    guessing = {**anyone, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * len(token)}
    assert _ask(gcs, guessing).startswith("REFUSED")
    holder = {**anyone, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    assert _ask(gcs, holder) == "ALLOWED"  # the same client with the token gets in

    proc.communicate(timeout=60)
    assert not token_file.exists(), "the token file outlived the driver"


def test_the_tests_own_ray_is_as_safe(ray_cluster: object) -> None:
    import ray

    found = listening([os.getpid(), *descendants(os.getpid())])
    assert any("raylet" in who for who in found), found
    assert _exposed(found) == {}
    assert os.environ["RAY_AUTH_MODE"] == "token"
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
