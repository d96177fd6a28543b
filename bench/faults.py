"""Every fault kind, several times: what each made of the trials (for RELIABILITY.md).

Network faults go through the loopback fault proxy (tests/support/fault_proxy.py) on the way
to a twin's endpoint, health URL or metrics URL, and (``--lab``, root) on the way to a lab
host's sshd inside whole campaigns; service faults are a twin killed mid-stress, one that never
becomes healthy, one that wedges, and a server answering garbage. Each row: the fault, the runs,
the session outcomes and trial states they gave, the sessions counted corrupt (must be 0), the
trials the driver retried, and the campaigns that failed cleanly (RunFailed, exit 1).

    .venv/bin/python -m bench.faults [--runs 3] [--lab] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from experiments.outcomes import is_corrupt
from orchestrator.executor.base import TrialReport
from tests.conftest import free_port
from tests.support import garbage_server
from tests.support.fault_campaigns import TrialBench, campaign, twin_service
from tests.support.fault_proxy import FaultProxy, Toxic

ENDPOINT_TOXICS: dict[str, Toxic] = {
    "latency 40±30 ms": Toxic("latency", latency_ms=40, jitter_ms=30),
    "latency over the timeout": Toxic("latency", latency_ms=5000),
    "bandwidth 100 KB/s": Toxic("bandwidth", rate_kbps=100),
    "slow_close 300 ms": Toxic("slow_close", delay_ms=300),
    "timeout 0 (hang)": Toxic("timeout", "upstream", timeout_ms=0),
    "timeout 300 ms (close)": Toxic("timeout", timeout_ms=300),
    "reset_peer": Toxic("reset_peer"),
    "reset_peer, toxicity 0.5": Toxic("reset_peer", toxicity=0.5),
    "slicer 1-13 B": Toxic("slicer", average_size=7, size_variation=6),
    "limit_data 600 B": Toxic("limit_data", bytes=600),
}


@dataclass
class Row:
    fault: str
    runs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    corrupt: int = 0
    retried: int = 0
    failed_cleanly: int = 0

    def add(self, report: TrialReport) -> None:
        self.runs += 1
        if report.error is not None:
            self.outcomes["trial failed: " + ("infra" if report.failure == "infrastructure"
                                              else "deploy")] += 1
        for session in report.sessions:
            self.outcomes[session.outcome] += 1
            self.corrupt += is_corrupt(session.outcome)


def twin_rows(work: Path, runs: int, stream: bool) -> list[Row]:
    port = free_port()
    upstream = ("127.0.0.1", port)
    mode = "sse" if stream else "json"
    rows = []
    with (FaultProxy(upstream, seed=1) as endpoint, FaultProxy(upstream) as health,
          FaultProxy(upstream) as metrics):
        service = twin_service(port, health=health.url("/health"),
                               metrics=metrics.url("/metrics"), startup_timeout_s=3)
        spec = campaign(work / mode, [{"name": "p", "endpoint": endpoint.url(),
                                       "services": [service]}], workload={"stream": stream})
        bench = TrialBench(spec, "p")
        try:
            for name, toxic in ENDPOINT_TOXICS.items():
                row = Row(f"endpoint ({mode}): {name}")
                for _ in range(runs):
                    with endpoint.toxic(toxic):
                        row.add(bench.run({"page": "p1"}))
                rows.append(row)
            row = Row(f"endpoint ({mode}): down")
            for _ in range(runs):
                endpoint.down()
                row.add(bench.run({"page": "p1"}))
                endpoint.up()
            rows.append(row)
            if not stream:
                rows += _side_rows(bench, health, metrics, runs)
                rows.append(_crash_row(bench, endpoint, work / mode, runs))
        finally:
            bench.shutdown()
    return rows


def _side_rows(bench: TrialBench, health: FaultProxy, metrics: FaultProxy,
               runs: int) -> list[Row]:
    rows = []
    for name, toxic in {"hang": Toxic("timeout", timeout_ms=0),
                        "reset_peer": Toxic("reset_peer")}.items():
        row = Row(f"metrics url: {name}")
        for _ in range(runs):
            with metrics.toxic(toxic):
                row.add(bench.run({"page": "p1"}))
        rows.append(row)
        row = Row(f"health url: {name} (deploy)")
        for _ in range(runs):
            with health.toxic(toxic):  # a restart each time: the deploy waits on health
                row.add(bench.run({"page": "p2"}))
            bench.run({"page": "p1"})  # healed, on the other level
        rows.append(row)
    return rows


def _crash_row(bench: TrialBench, endpoint: FaultProxy, work: Path, runs: int) -> Row:
    row = Row("service: killed mid-stress")
    for _ in range(runs):
        bench.deploy({"page": "p1"})
        pid = int((work / "services" / "sglang.pid").read_text().split()[0])
        seen = endpoint.stats.accepted

        def kill(pid: int = pid, seen: int = seen) -> None:
            if endpoint.wait_accepted(seen + 2):  # /v1/models, then a chat request in flight
                os.killpg(pid, signal.SIGKILL)

        with endpoint.toxic(Toxic("latency", latency_ms=300)):
            killer = threading.Thread(target=kill)
            killer.start()
            row.add(bench.run({"page": "p1"}))
            killer.join()
    return row


def service_rows(work: Path, runs: int) -> list[Row]:
    faults = work / "faults.yaml"
    faults.write_text(yaml.safe_dump({"rules": [{"name": "wedge", "probability": 1.0,
                                                 "when": {"flags": {"disable-cuda-graph": True}},
                                                 "effect": "wedge"}]}))
    port = free_port()
    spec = campaign(work / "service", [{"name": "p", "endpoint": f"http://127.0.0.1:{port}",
                                        "services": [twin_service(port, fault_model=faults,
                                                                  startup_timeout_s=2)]}],
                    factors=[{"name": "server", "levels": {
                        "fine": {}, "never_healthy": {"flags": ["--twin-startup-delay", "600"]},
                        "exits": {"flags": ["--tp-size", "x"]},
                        "wedged": {"flags": ["--disable-cuda-graph"]}}}],
                    workload={"timeout_s": 1.5, "rounds": 1})
    bench = TrialBench(spec, "p")
    rows = []
    try:
        for level in ("never_healthy", "exits", "wedged"):
            row = Row(f"service: {level.replace('_', ' ')}")
            for _ in range(runs):
                row.add(bench.run({"server": level}))
                bench.run({"server": "fine"})  # a restart between: each run starts it anew
            rows.append(row)
    finally:
        bench.shutdown()
    return rows + garbage_rows(work, runs)


def garbage_rows(work: Path, runs: int) -> list[Row]:
    row = Row(f"service: garbage replies ({len(garbage_server.REPLIES)} kinds)")
    for stream in (False, True):
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        service = {"name": "garbage", "node": "here", "health_url": f"{base}/health",
                   "metrics_url": f"{base}/metrics",
                   "start": [sys.executable, garbage_server.__file__, "--port", str(port)]}
        spec = campaign(work / f"garbage-{stream}", [{"name": "p", "endpoint": base,
                                                      "services": [service]}],
                        factors=[{"name": "reply", "levels": {
                            k: {"env": {garbage_server.ENV: k}} for k in garbage_server.REPLIES}}],
                        workload={"rounds": 1, "sessions": 3, "stream": stream})
        bench = TrialBench(spec, "p")
        try:
            for kind in garbage_server.REPLIES:
                if kind.startswith("sse") == stream:
                    for _ in range(runs):
                        row.add(bench.run({"reply": kind}))
        finally:
            bench.shutdown()
    return [row]


def lab_rows(work: Path, runs: int) -> list[Row]:
    """Whole campaigns over SSH through the proxy: a drop that heals, and a node gone."""
    from db.store import Store
    from deploy.lab import lab_down, lab_up
    from deploy.lab.registry import process_prefix
    from orchestrator.executor.driver import RunFailed, run_campaign
    from orchestrator.executor.ray_pool import ensure_ray
    from tests.support.lab_faults import both, lab_spec, proxied_node, start, when

    ensure_ray()
    lab = lab_up(work / "lab", hosts=1, prefix=process_prefix("blf"), owner_pid=os.getpid())
    heal, gone = Row("ssh: connection cut mid-trial, back"), Row("ssh: node gone for good")
    try:
        for index in range(runs):
            for row, heals in ((heal, True), (gone, False)):
                directory = work / f"ssh-{index}-{heals}"
                directory.mkdir()
                with FaultProxy((lab.host(1).address, 22)) as proxy:
                    db = directory / "bisect.db"
                    campaign_id = start(lab_spec(lab, directory,
                                                 proxied_node(lab, proxy, directory)), db)
                    hook: Callable[[str], None] = when("trial 1 on", proxy.down)
                    if heals:
                        hook = both(hook, when("FAILED", proxy.up))
                    with Store.open(str(db)) as store:
                        try:
                            run_campaign(store, campaign_id, progress=hook)
                        except RunFailed:
                            row.failed_cleanly += 1
                        proxy.up()
                        if not heals:  # the heal after the failure: resume finishes
                            run_campaign(store, campaign_id)
                        _count(row, store.trials(campaign_id, status=None))
    finally:
        lab_down(work / "lab")
    return [heal, gone]


def _count(row: Row, trials: list[Any]) -> None:
    row.runs += 1
    for trial in trials:
        if trial.status == "failed":
            row.retried += 1
            row.outcomes["trial failed: infra"] += 1
        for outcome, n in trial.counts.items():
            row.outcomes[outcome] += n
            row.corrupt += n * is_corrupt(outcome)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lab", action="store_true", help="also SSH campaigns (root)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bisect-faults-") as temporary:
        work = Path(temporary)
        rows = [*twin_rows(work, args.runs, stream=False), *twin_rows(work, args.runs, True),
                *service_rows(work, args.runs)]
        if args.lab:
            rows += lab_rows(work, args.runs)
    if args.json:
        print(json.dumps([{**row.__dict__, "outcomes": dict(row.outcomes)} for row in rows],
                         indent=2))
        return
    print("| fault | runs | outcomes | corruption counted | retried | failed cleanly |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        shown = ", ".join(f"{k} {v}" for k, v in sorted(row.outcomes.items()))
        print(f"| {row.fault} | {row.runs} | {shown} | {row.corrupt} | {row.retried} | "
              f"{row.failed_cleanly} |")
    sys.exit(1 if any(row.corrupt for row in rows) else 0)


if __name__ == "__main__":
    main()
