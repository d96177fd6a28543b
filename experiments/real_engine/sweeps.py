"""Write the sweeps that watch the real vLLM on this machine (issue 30): the planted parser
fault's arrival, caught by the probe of forced calls and quiet while nothing changed.

``python -m experiments.real_engine.sweeps parser --parser stock|leaky --model DIR > FILE``:
one variant, ``production``; the run accepted as the baseline and the quiet run use ``stock``,
the alert run ``leaky`` (the patch arrives as the production variant's new level).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from experiments.real_engine.campaign import parser_factor, pools

# Eight probe runs a trial, 2 trials before a comparison, 3 for the baseline: 24 stock runs
# with none bad against 16 rule out a rise of 40 points (Chan's test at alpha's share), and a
# leaky run is bad about 3 times in 4 (BENCHMARKS.md "A real engine"): a rise of 40 points is
# caught at the first look. Chosen on the sweep's own comparison (sweep_compare.compare).
PROBE_RUNS = 8
THRESHOLD = 0.4


def parser_sweep(venv: Path, model: Path, port: int, workdir: str,
                 parser: str) -> dict[str, Any]:
    return {
        "name": "real-engine-parser",
        **pools(venv, model, port, workdir),
        "factors": [parser_factor(venv)],
        "variants": {"production": {"parser": parser}},
        "workload": {"command": ["python3", "-m", "experiments.real_engine.probe"],
                     "cwd": str(Path(__file__).resolve().parents[2]),
                     "runs": PROBE_RUNS, "timeout_s": 600},
        # a probe judges by its exit status: no wedging, throughput or latency
        "thresholds": {"corruption": THRESHOLD, "wedging": None,
                       "throughput": None, "p99_latency": None},
        "trials": {"min": 2, "max": 3, "confirm": 2},
        "alpha": 0.01,
        "cost": {"restart_s": 90, "workload_s": 60, "gpus": 0},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["parser"])
    parser.add_argument("--venv", type=Path, default=Path(".venv-vllm"))
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--port", type=int, default=39130)
    parser.add_argument("--workdir", default="bisect-real-engine/services")
    parser.add_argument("--parser", choices=["stock", "leaky"], default="stock")
    args = parser.parse_args()
    json.dump(parser_sweep(args.venv, args.model, args.port, args.workdir, args.parser),
              sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
