"""The adaptive strategy end to end on real twins: a few scenarios of bench/strategies.py, each
run as a whole campaign (twin servers restarted per variant, proof of load, the stress workload
over HTTP, Ray pool actors, a SQLite store), once per workload seed.

Slow (about half a minute per campaign on 2 cores), so a handful of seeds: it checks that the
simulated figures hold when every part is real, not the rates themselves.

    .venv/bin/python -m bench.twins [--seeds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from db.store import Store
from experiments.campaign import Campaign
from orchestrator.core.verdict import Status
from orchestrator.demo import FAULT_MODEL, demo_campaign
from orchestrator.executor.driver import run_campaign
from orchestrator.stored import create_campaign

SEED_RULE = FAULT_MODEL["rules"][0]
# Known-good and known-bad differing in all four factors (the demo's differ in index_k only):
# the flips back to known-good's levels get first looks and one sufficiency test.
ALL_DIFFER = ({"index_k": "fp8", "hicache": "off", "topk_v2": "off", "cuda_graph": "on"},
              {"index_k": "bf16", "hicache": "on", "topk_v2": "on", "cuda_graph": "off"})
Ends = tuple[dict[str, str], dict[str, str]] | None  # known-good and known-bad, or the demo's


@dataclass(frozen=True)
class TwinScenario:
    name: str
    rules: list[dict[str, Any]]  # fault rules planted in every twin
    culprits: list[dict[str, str]]  # what a right verdict names
    ends: Ends = None


SCENARIOS = [
    TwinScenario("seed: bf16 x HiCache among 4", [SEED_RULE],
                 [{"index_k": "bf16", "hicache": "on"}]),
    TwinScenario("single factor: bf16 alone, 10%", [
        {**SEED_RULE, "name": "bf16", "when": {"env": {"BF16_INDEX_K": "1"}},
         "probability": 0.1}], [{"index_k": "bf16"}]),
    TwinScenario("no culprit (0.3% noise only)", [], []),
    TwinScenario("single factor, all 4 differ: topk_v2 alone, 10%", [
        {**SEED_RULE, "name": "topk-v2", "when": {"env": {"SGLANG_OPT_USE_TOPK_V2": "1"}},
         "probability": 0.1}], [{"topk_v2": "on"}], ALL_DIFFER),
]


def campaign_for(workdir: Path, scenario: TwinScenario, seed: int) -> Campaign:
    workdir.mkdir(parents=True)
    fault_model = workdir / "fault-model.yaml"
    fault_model.write_text(yaml.safe_dump({**FAULT_MODEL, "rules": scenario.rules}),
                           encoding="utf-8")
    data = demo_campaign(workdir, fault_model).model_dump(mode="json")
    data["workload"]["seed"] = seed
    if scenario.ends:
        data["known_good"], data["known_bad"] = scenario.ends
    return Campaign.model_validate(data)


def run_one(workdir: Path, scenario: TwinScenario, seed: int) -> dict[str, Any]:
    campaign = campaign_for(workdir, scenario, seed)
    started = time.monotonic()
    with Store.open(str(workdir / "bisect.db")) as store:
        verdict = run_campaign(store, create_campaign(store, campaign, "bench"))
    document = verdict.to_json()
    found: list[dict[str, str]] | None = None
    if verdict.status is Status.CULPRIT:
        found = [dict(c.factors) for c in verdict.culprits]
    elif verdict.status is Status.NOT_REPRODUCED:
        found = []
    return {"seed": seed, "status": verdict.status.value, "found": found,
            "trials": document["cost"]["trials"],
            "stopped_early": document["cost"]["stopped_early"],
            "gpu_s": document["cost"]["gpu_s_equivalent"],
            "wall_s": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bisect-bench-") as tmp:
        for index, scenario in enumerate(SCENARIOS):
            runs = [run_one(Path(tmp) / f"{index}-{seed}", scenario, seed)
                    for seed in range(1, args.seeds + 1)]
            want = sorted(map(str, scenario.culprits))
            row = {"scenario": scenario.name, "runs": runs,
                   "correct": sum(r["found"] is not None and sorted(map(str, r["found"])) == want
                                  for r in runs) / len(runs),
                   "median_trials": statistics.median(r["trials"] for r in runs),
                   "median_gpu_s": statistics.median(r["gpu_s"] for r in runs),
                   "median_wall_s": statistics.median(r["wall_s"] for r in runs)}
            rows.append(row)
            print(f"{scenario.name:34} correct {row['correct']:4.0%}  "
                  f"trials {row['median_trials']:4g}  "
                  f"full-trial equivalents {row['median_gpu_s'] / 9200:5.2f}  "
                  f"wall {row['median_wall_s']:5.1f} s  "
                  f"(stopped early: {[r['stopped_early'] for r in runs]})", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
