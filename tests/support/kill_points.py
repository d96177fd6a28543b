"""Kill the driver with SIGKILL, resume, check: shared by test_kill_resume.py (a few fixed
points) and bench/kill_points.py (many random ones).

A driver runs as `bisect run` in a session of its own, with a marker in its environment that
every process it starts inherits (Ray's workers, the twins, its reaper). After the kill, "no
process left" means: nothing in the driver's session (Ray's agents rename themselves, which
hides their environment, but keep the session) and nothing carrying the marker.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from db.store import Store
from orchestrator.demo import twin_pool
from orchestrator.stored import trial_seed

BISECT = str(Path(sys.executable).parent / "bisect")
def race_faults(probability: float = 0.5) -> dict[str, Any]:
    """bf16 index keys AND HiCache leak, with this probability per session."""
    return {"rules": [{
        "name": "race", "when": {"env": {"BF16_INDEX_K": "1"},
                                 "flags": {"enable-hierarchical-cache": True}},
        "min_inflight": 1, "probability": probability, "effect": "leak",
    }]}


FAULTS = race_faults()
CULPRIT = [{"index_k": "bf16", "hicache": "on"}]
CHAT = '"POST /v1/chat/completions'
READY = "The server is fired up and ready to roll!"  # the twin's last startup line


def write_campaign(workdir: Path, sessions: int = 16, *, rounds: int = 2, latency_ms: int = 30,
                   name: str = "kill points", faults: dict[str, Any] = FAULTS) -> Path:
    """Three factors, the race planted in two of them, one twin pool on this machine."""
    fault_file = workdir / "faults.yaml"
    fault_file.write_text(yaml.safe_dump(faults))
    campaign = {
        "name": name,
        "nodes": [{"name": "here", "workdir": str(workdir / "services")}],
        "pools": [twin_pool("p", "here", fault_file, latency_ms=latency_ms)],
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": "0"}},
                                           "bf16": {"env": {"BF16_INDEX_K": "1"}}}},
            {"name": "hicache", "levels": {"off": {},
                                           "on": {"flags": ["--enable-hierarchical-cache"]}}},
            {"name": "topk_v2", "levels": {"off": {}, "on": {"env": {"TOPK": "1"}}}},
        ],
        "workload": {"sessions": sessions, "rounds": rounds, "timeout_s": 20},
        "known_good": {"index_k": "fp8", "hicache": "on", "topk_v2": "on"},
        "known_bad": {"index_k": "bf16", "hicache": "on", "topk_v2": "on"},
    }
    path = workdir / "campaign.yaml"
    path.write_text(yaml.safe_dump(campaign))
    return path


@dataclass
class Bench:
    """One campaign's directory, store and marker."""

    workdir: Path
    campaign: Path
    marker: str
    ray_tmp: str  # short: Ray's socket paths must stay under 108 bytes

    @classmethod
    def make(cls, workdir: Path, sessions: int = 16) -> Bench:
        workdir.mkdir(parents=True, exist_ok=True)
        return cls(workdir, write_campaign(workdir, sessions), uuid.uuid4().hex,
                   tempfile.mkdtemp(prefix="ray-", dir="/tmp"))

    def close(self) -> None:
        shutil.rmtree(self.ray_tmp, ignore_errors=True)

    @property
    def db(self) -> Path:
        return self.workdir / "bisect.db"

    @property
    def services(self) -> Path:
        return self.workdir / "services"

    def env(self) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith(("RAY_AUTH", "RAY_ENABLE_WINDOWS"))}
        return {**clean, "RAY_TMPDIR": self.ray_tmp, "BISECT_KILL_MARK": self.marker}

    def run(self) -> subprocess.Popen[bytes]:
        return self._start(["run", str(self.campaign)])

    def resuming(self, campaign_id: str) -> subprocess.Popen[bytes]:
        """`bisect resume`, started (for a later kill)."""
        return self._start(["resume", campaign_id])

    def _start(self, args: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen([BISECT, *args, "--store", str(self.db), "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(),
                                start_new_session=True)

    def resume(self, campaign_id: str) -> tuple[subprocess.CompletedProcess[str], int]:
        """`bisect resume`, to its end; its result and its pid (its session's id)."""
        return self._to_the_end(["resume", campaign_id])

    def run_to_the_end(self) -> tuple[subprocess.CompletedProcess[str], int]:
        """`bisect run` again (a kill before the campaign was stored leaves nothing to resume)."""
        return self._to_the_end(["run", str(self.campaign)])

    def _to_the_end(self, args: list[str]) -> tuple[subprocess.CompletedProcess[str], int]:
        argv = [BISECT, *args, "--store", str(self.db), "--json"]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=self.env(), start_new_session=True) as driver:
            out, err = driver.communicate(timeout=600)
        return subprocess.CompletedProcess(argv, driver.returncode, out, err), driver.pid

    def trials(self) -> list[tuple[int, str]]:
        return query(self.db, "SELECT seq, status FROM trial ORDER BY id")

    def campaign_ids(self) -> list[str]:
        return [row[0] for row in query(self.db, "SELECT id FROM campaign")]

    def service_log(self) -> list[str]:
        logs = sorted(self.services.glob("*.log"))
        return logs[0].read_text(errors="replace").splitlines() if logs else []

    def phase(self) -> str:
        """Where a campaign is, seen from outside: the store, the lock, the service's log."""
        if not self.campaign_ids():
            return "store create"
        states = self.trials()
        if not states:
            locked = (self.services / ".bisect.lock").exists()
            return "preflight, Ray start" if locked else "lock"
        if states[-1][1] == "running":
            if not list(self.services.glob("*.pid")):
                return "deploy"
            log = self.service_log()
            started = max((i for i, line in enumerate(log) if READY in line), default=-1)
            return "stress" if any(CHAT in line for line in log[started + 1:]) \
                else "restart, proof"
        return "store write, next trial, verdict"


def query(db: Path, sql: str) -> list[Any]:
    try:
        with closing(sqlite3.connect(db, timeout=5)) as connection:
            return list(connection.execute(sql))
    except sqlite3.OperationalError:
        return []  # not created yet


def wait_until(condition: Callable[[], bool], driver: subprocess.Popen[bytes] | None,
               timeout_s: float) -> bool:
    """Poll a condition on the files (the only way to see another process's progress)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        if driver is not None and driver.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def kill(driver: subprocess.Popen[Any]) -> None:
    """SIGKILL to the driver alone, as the OOM killer would; then reap its zombie."""
    if driver.poll() is None:
        os.kill(driver.pid, signal.SIGKILL)
    driver.wait()


def leftovers(marker: str, session: int) -> list[str]:
    """Processes still running that a driver started: in its session, or with its marker."""
    found = []
    needle = f"BISECT_KILL_MARK={marker}".encode()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        pid = int(stat.parent.name)
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            environ = (stat.parent / "environ").read_bytes()
            name = (stat.parent / "comm").read_text().strip()
        except OSError:
            continue
        if fields[0] in ("Z", "X") or pid == os.getpid():
            continue
        if int(fields[3]) == session or needle in environ:
            found.append(f"{pid} {name}")
    return found


def no_leftovers(marker: str, session: int, timeout_s: float = 60.0) -> list[str]:
    """Wait (bounded) for the driver's reaper to finish; what is left then."""
    wait_until(lambda: not leftovers(marker, session), None, timeout_s)
    return leftovers(marker, session)


def problems_after_resume(bench: Bench, killed_at: list[tuple[int, str]],
                          resumed: subprocess.CompletedProcess[str],
                          expected: list[dict[str, str]]) -> list[str]:
    """Every invariant a resume must keep, as sentences (empty: all kept)."""
    found = []
    if resumed.returncode != 0:
        return [f"resume exited {resumed.returncode}: {resumed.stderr[-1500:]}"]
    verdict = json.loads(resumed.stdout)
    culprits = [c["factors"] for c in verdict["culprits"]]
    if verdict["status"] != "culprit" or culprits != expected:
        found.append(f"verdict {verdict['status']} {culprits}, expected {expected}")
    states = bench.trials()
    seqs = [seq for seq, _ in states]
    if len(seqs) != len(set(seqs)):
        found.append(f"a trial was written twice: {states}")
    lost = [seq for seq, status in killed_at if status == "done" and (seq, "done") not in states]
    if lost:
        found.append(f"finished trials lost: {lost}")
    unfinished = [seq for seq, status in killed_at if status == "running"]
    if any((seq, "discarded") not in states for seq in unfinished):
        found.append(f"interrupted trials {unfinished} not discarded: {states}")
    if verdict["cost"]["trials"] != sum(status == "done" for _, status in states):
        found.append("the verdict's trials are not the stored ones")
    with Store.open(str(bench.db), create=False) as store:  # the run seed, kept: every
        [record] = store.list_campaigns()  # trial's, before the kill and after, drawn from it
        seeds = [(t.seq, t.seed) for t in store.trials(record.id, status=None)]
    if verdict["seed"] != record.spec["workload"]["seed"]:
        found.append(f"the verdict's seed {verdict['seed']} is not the stored run seed")
    draws = {trial_seed(verdict["seed"], slot) for slot in range(1, len(seeds) + 1)}
    counted = [seed for seq, seed in seeds if (seq, "done") in states]
    if not {seed for _, seed in seeds} <= draws or len(set(counted)) != len(counted):
        found.append(f"trial seeds not drawn from the run seed {verdict['seed']}: {seeds}")
    if (bench.services / ".bisect.lock").exists():
        found.append("a node is still locked")
    if query(bench.db, "SELECT node FROM node_lock WHERE released_at IS NULL"):
        found.append("the store says a node is still locked")
    if list(bench.services.glob("*.pid")):
        found.append("a service was left running (pid file)")
    if query(bench.db, "PRAGMA integrity_check") != [("ok",)]:
        found.append("PRAGMA integrity_check failed")
    if query(bench.db, "SELECT status FROM campaign") != [("done",)]:
        found.append(f"campaign status {query(bench.db, 'SELECT status FROM campaign')}")
    return found
