"""Where a test run's CPU goes: every process it starts, daemons included, by kind.

``time`` counts only the children pytest waits for; a run's PostgreSQL, sshd, Ray daemons and
the twins its campaigns start are missed, or counted in another test's. This runs pytest with
the arguments given, reads every process's CPU from /proc five times a second meanwhile (the
last reading of each process is its total; one that lived under 0.2 s may be missed, and the
CPU spent between the last reading and its end is), and prints the seconds of CPU per kind of
process (``kind``), with the machine's busy share over the run (/proc/stat).

    .venv/bin/python -m bench.suite_cpu [--json FILE] -- -n 2 --dist loadgroup -q

Processes that were running before the run are left out (the poller counts what started
after it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from deploy import procs

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
RAY_PARTS = ("default_worker", "setup_worker", "log_monitor", "dashboard/agent",
             "dashboard/dashboard", "runtime_env/agent", "autoscaler", "raylet", "gcs_server")


def kind(comm: str, cmdline: str) -> str:
    """A process's kind, from its name and command line: the twin by its first option, the
    console script by its command, Ray's processes by their part."""
    if "experiments.twin" in cmdline or "experiments/twin" in cmdline:
        option = re.search(r"experiments.twin(\.router)? (--[\w-]+)", cmdline)
        return "twin " + (" ".join(g for g in option.groups() if g) if option else "?")
    if "/bin/bisect" in cmdline:
        words = cmdline.split("/bin/bisect", 1)[1].split()
        return "bisect " + (words[0] if words else "")
    if "orchestrator.executor.reaper" in cmdline:
        return "reaper"
    if "exec(eval(sys.stdin.readline()))" in cmdline:
        return "pytest worker (tests in process)"
    if "/bin/pytest" in cmdline or " -m pytest" in cmdline:
        return "pytest"
    if comm.startswith("ray::") or "site-packages/ray/" in cmdline:
        part = next((p for p in RAY_PARTS if p in cmdline or p in comm), comm)
        return f"ray {part}"
    for name in ("postgres", "sshd", "chrom", "systemd", "node"):
        if comm.startswith(name):
            return name
    return "other " + comm


class Poller:
    """Every process's last CPU reading, keyed by pid and start time (pids are reused)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, int], dict[str, Any]] = {}
        self.before = self._starts()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _starts(self) -> set[tuple[int, int]]:
        found = set()
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            start = procs.start_time(pid)
            if start is not None:  # else gone meanwhile
                found.add((pid, start))
        return found

    def _read(self) -> None:
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            fields = procs.stat_fields(pid)
            if fields is None:  # gone meanwhile
                continue
            key = (pid, int(fields[19]))
            if key in self.before:
                continue
            if key not in self.seen:
                try:
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:  # gone meanwhile
                    continue
                self.seen[key] = {"pid": pid, "start": key[1], "parent": int(fields[1]),
                                  "comm": comm, "cmdline": cmd.decode(errors="replace")}
            self.seen[key]["cpu_s"] = (int(fields[11]) + int(fields[12])) * TICK_S

    def of_run(self, root: int) -> set[tuple[int, int]]:
        """The keys of the processes descended from ``root`` as first seen (a daemon that had
        left its parent by then is not: it is listed as not traced to the run)."""
        parents = {p["pid"]: p["parent"] for p in self.seen.values()}

        def descends(pid: int) -> bool:
            for _ in range(64):  # a pid reused into a loop cannot hang this
                if pid == root:
                    return True
                if pid not in parents:
                    return False
                pid = parents[pid]
            return False

        return {key for key, process in self.seen.items() if descends(process["pid"])}

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._read()

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def busy_ticks() -> tuple[int, int]:
    """(busy, all) ticks of every core since boot, from /proc/stat."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write every process's reading here")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    busy0, all0 = busy_ticks()
    began = time.monotonic()
    with Poller() as poller:
        pytest = subprocess.Popen([sys.executable, "-m", "pytest", *args.pytest_args])
        code = pytest.wait()
    wall = time.monotonic() - began
    busy1, all1 = busy_ticks()
    ours = poller.of_run(pytest.pid)
    per_kind: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for key, process in poller.seen.items():
        name = kind(process["comm"], process["cmdline"])
        if key not in ours:
            name = f"(not traced to the run) {name}"
        per_kind[name] += process["cpu_s"]
        count[name] += 1
    total = sum(per_kind.values())
    print(f"\npytest exit {code}; {wall:.0f} s wall; the cores "
          f"{100 * (busy1 - busy0) / (all1 - all0):.0f}% busy; {total:.0f} s of CPU read "
          f"in {len(poller.seen)} processes")
    print("| CPU s | share | processes | kind |\n|---:|---:|---:|---|")
    for name, cpu in per_kind.most_common():
        if cpu >= 1:
            print(f"| {cpu:.0f} | {100 * cpu / total:.0f}% | {count[name]} | {name} |")
    if args.json:
        Path(args.json).write_text(json.dumps([{**p, "kind": kind(p["comm"], p["cmdline"])}
                                               for p in poller.seen.values()]))
    sys.exit(code)


if __name__ == "__main__":
    main()
