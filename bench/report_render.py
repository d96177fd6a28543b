"""Report rendering benchmark: a 500-trial campaign, stored through the Store API as a run stores
it, reported in every format (issue 15 asks the HTML in <= 5 s and <= 5 MB).

The campaign: four two-level factors (16 variants) in a factorial of 31 repeats plus 4 more
trials of the culprit variant (500 trials), 80 sessions a trial; ``index_k=bf16 AND
hicache=on`` leaks DSML in ~15% of its sessions (each leak's evidence ~300 characters of raw
server text), a few errors and timeouts everywhere; each trial has ``--ticks`` metric scrapes
(0.5 s apart) of four of the kept metrics, abort log lines, a ``facts`` step per node, its
performance figures and its two load generators. Each run times ``build_report`` (store ->
report model) and each format's render and write, on a fresh Store each repetition; medians are
reported, with each file's size.

    .venv/bin/python -m bench.report_render [--trials 500] [--ticks 240] [--reps 3]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from db import GeneratorRow, LogRow, MetricRow, SessionRow, StepRow, Store, TrialTiming
from experiments.campaign import Campaign
from orchestrator.stored import create_campaign

TARGET_S, TARGET_BYTES = 5.0, 5_000_000  # the issue: <= 5 s, <= 5 MB
FACTORS = {"index_k": ("fp8", "bf16"), "hicache": ("off", "on"), "topk_v2": ("off", "on"),
           "cuda_graph": ("on", "off")}
CULPRIT = {"index_k": "bf16", "hicache": "on"}
LEAK = ('<｜DSML｜function_calls><｜DSML｜invoke name="read_file"><｜DSML｜parameter '
        'name="path" string="true">/srv/app/config.yaml</｜DSML｜parameter></｜DSML｜invoke>'
        '</｜DSML｜function_calls> Let me read the configuration first, then I will check the '
        'deployment manifest and the service definitions before changing anything.')
METRICS = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
           "sglang:gen_throughput")
NODES = ("gpu-a", "gpu-b")
LOADGENS = ("10.0.0.21", "10.0.0.22")  # each trial's sessions split between two load machines


def spec(trials: int) -> dict[str, Any]:
    service = {"name": "sglang", "node": "gpu-a",
               "start": "python -m sglang.launch_server --port 30000",
               "health_url": "http://127.0.0.1:30000/health"}
    return {
        "name": f"report benchmark: {trials} trials",
        "nodes": [{"name": n, "workdir": "/var/tmp/bisect"} for n in NODES],
        "pools": [{"name": "pool-1", "endpoint": "http://127.0.0.1:30000",
                   "services": [service]}],
        "factors": [{"name": f, "levels": {lvl: {"env": {f.upper(): lvl}} for lvl in levels}}
                    for f, levels in FACTORS.items()],
        "workload": {"sessions": 80, "rounds": 4, "timeout_s": 60},
        "strategy": {"kind": "factorial", "repeats": max(1, trials // 16)},
        "cost": {"restart_s": 90, "workload_s": 485, "gpus": 16},
        "generators": {"count": len(LOADGENS), "resources": {"loadgen": 1}},
    }


def variants() -> list[dict[str, str]]:
    out: list[dict[str, str]] = [{}]
    for factor, levels in FACTORS.items():
        out = [{**v, factor: lvl} for v in out for lvl in levels]
    return out


def sessions(rng: random.Random, culprit: bool, seq: int) -> list[SessionRow]:
    rows = []
    for i in range(80):
        roll = rng.random()
        outcome = "leak" if culprit and roll < 0.15 else "timeout" if roll > 0.995 else \
            "error" if roll > 0.99 else "ok"
        rows.append(SessionRow(idx=i, key=f"s{seq}.{i}", outcome=outcome, turns=4,
                               first_bad_turn=2 if outcome == "leak" else None,
                               evidence=f"{LEAK} #{seq}.{i}" if outcome == "leak" else None,
                               latency_s=0.5 + rng.random()))
    return rows


def metrics(rng: random.Random, ticks: int) -> list[MetricRow]:
    rows = []
    for tick in range(ticks):
        running = rng.randint(40, 80)
        for name, value in zip(METRICS, (running, rng.randint(0, 20), rng.random(),
                                         running * 25.0), strict=True):
            rows.append(MetricRow("sglang", tick * 0.5, name, {"tp_rank": "0"}, float(value)))
    return rows


def facts_steps(at: datetime) -> list[StepRow]:
    return [StepRow("facts", node, at, 0.2, "ok", {
        "host": f"{node}.cluster", "gpu": "NVIDIA H200", "driver": "570.86.15",
        "server_version": "0.5.4", "server_build": "sglang 0.5.4 (cu128)",
        "commit": "0123456789abcdef0123456789abcdef01234567"}) for node in NODES]


def store_campaign(store: Store, trials: int, ticks: int) -> str:
    rng = random.Random(15)
    campaign_id = create_campaign(store, Campaign.model_validate(spec(trials)), "bench")
    plan = [v for _ in range(trials // 16) for v in variants()]
    plan += [dict(CULPRIT, topk_v2="off", cuda_graph="on")] * (trials - len(plan))
    at = datetime.now(UTC)
    for seq, levels in enumerate(plan):
        variant = store.variant(campaign_id, levels)
        trial = store.start_trial(campaign_id, variant.id, seq, "pool-1", seed=seq)
        culprit = all(levels[f] == lvl for f, lvl in CULPRIT.items())
        logs = [LogRow("sglang", 100 + k, "abort", f"Abort request rid={seq}-{k}")
                for k in range(rng.randint(0, 3))]
        performance = {  # as StressResult.performance gives it
            "wall_s": 14.0, "requests": 320, "completed": 318, "output_tokens": 28_000,
            "good_sessions": 80, "request_throughput": 22.8,
            "output_throughput": 2000.0 + rng.random() * 200, "goodput": 5.7,
            "ttft": {"p50_ms": 300.0, "p90_ms": 600.0, "p99_ms": 900.0}, "tpot": None,
            "itl": {"p50_ms": 20.0, "p90_ms": 35.0, "p99_ms": 60.0},
            "e2e": {"p50_ms": 2300.0, "p90_ms": 3600.0, "p99_ms": 4900.0}}
        store.finish_trial(trial, TrialTiming(wall_s=20.0, restart_s=5.0, workload_s=14.0,
                                              restarts=1),
                           sessions(rng, culprit, seq), metrics(rng, ticks), logs,
                           generators=[GeneratorRow(f"ray-node-{k}", address, 40, 40, False)
                                       for k, address in enumerate(LOADGENS)],
                           steps=facts_steps(at), performance=performance)
    store.set_campaign_status(campaign_id, "done", finished=True)
    return campaign_id


def run_once(db_path: Path, campaign_id: str, out: Path) -> dict[str, Any]:
    from orchestrator.cli.report_view import rendered
    from orchestrator.reports.campaign.build import build_report
    from orchestrator.reports.files import write_private

    figures: dict[str, Any] = {}
    with Store.open(str(db_path), create=False) as store:  # a fresh store: nothing cached
        start = time.perf_counter()
        report = build_report(store, campaign_id)
        figures["build_s"] = time.perf_counter() - start
    for fmt, suffix in (("html", ".html"), ("md", ".md"), ("junit", ".xml"), ("json", ".json")):
        start = time.perf_counter()
        path = write_private(out / f"report{suffix}", rendered(report, fmt))
        figures[f"{fmt}_s"] = time.perf_counter() - start
        figures[f"{fmt}_bytes"] = path.stat().st_size
    figures["html_total_s"] = figures["build_s"] + figures["html_s"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--ticks", type=int, default=240,
                        help="metric scrapes a trial (0.5 s apart; 240: two minutes)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        db_path = Path(tmp) / "bisect.db"
        start = time.perf_counter()
        with Store.open(str(db_path)) as store:
            campaign_id = store_campaign(store, args.trials, args.ticks)
        stored_s = time.perf_counter() - start
        runs = [run_once(db_path, campaign_id, Path(tmp)) for _ in range(args.reps)]
        store_bytes = db_path.stat().st_size
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    result = {"trials": args.trials, "ticks": args.ticks, "reps": args.reps,
              "store_s": round(stored_s, 1), "store_bytes": store_bytes,
              "median": median, "runs": runs, "python": sys.version.split()[0],
              "machine": platform.machine(), "processor": platform.processor()}
    print(f"{args.trials} trials x 80 sessions, {args.ticks} scrapes x {len(METRICS)} metrics "
          f"a trial; stored in {stored_s:.1f} s ({store_bytes / 1e6:.1f} MB); median of "
          f"{args.reps}:")
    print(f"  build_report {median['build_s']:.2f} s")
    for fmt in ("html", "md", "junit", "json"):
        print(f"  {fmt:<6} render+write {median[f'{fmt}_s']:.3f} s, "
              f"{median[f'{fmt}_bytes'] / 1024:,.0f} KiB")
    ok = median["html_total_s"] <= TARGET_S and median["html_bytes"] <= TARGET_BYTES
    print(f"  html in all {median['html_total_s']:.2f} s (target <= {TARGET_S:g} s), "
          f"{median['html_bytes'] / 1e6:.2f} MB (target <= 5 MB): "
          f"{'within' if ok else 'OVER'} the targets")
    print("command: .venv/bin/python -m bench.report_render "
          f"--trials {args.trials} --ticks {args.ticks} --reps {args.reps}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
