"""Write the sweeps that watch the real vLLM on this machine (issue 30).

``parser``: the planted parser fault's arrival, caught by the probe of forced calls, and quiet
while nothing changed. One variant, ``production``; the run accepted as the baseline and the
quiet run use ``--parser stock``, the alert run ``--parser leaky`` (the patch arrives as the
production variant's new level).

``throughput``: a deployment repository (``--tree``, a git tree this writes and commits to)
holds the engine's flags in ``vllm.yaml`` (vLLM's ``--config``); ``--max-num-seqs 1``
committed there is the regression. The source tree moved, so every trial of the new commit
runs beside a trial of the baseline's commit, checked out on the same node: throughput is
compared pair by pair (a flag changed in the sweep file itself would have no control beside
it, and is shown as ``uncontrolled``, never alerted on).
"""

from __future__ import annotations

import argparse
import json
import subprocess
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


# 32 one-round sessions, 8 in flight (the rest as `bisect stress` sends them, measured by hand
# first): several requests in flight is what --max-num-seqs 1 takes away. Random weights corrupt
# every session (no canary is kept), so corruption is not watched here: the parser sweep is.
STRESS = {"sessions": 32, "rounds": 1, "max_concurrency": 8, "timeout_s": 300, "stream": False}
CONFIG = "vllm.yaml"


def throughput_sweep(venv: Path, model: Path, port: int, workdir: str,
                     tree: Path) -> dict[str, Any]:
    tree = tree.resolve()
    return {
        "name": "real-engine-throughput",
        **pools(venv, model, port, workdir, ("--config", str(tree / CONFIG))),
        "source": {"tree": str(tree)},
        "variants": {"production": {}},
        "workload": STRESS,
        "thresholds": {"corruption": None, "wedging": 0.4, "throughput": 0.3,
                       "p99_latency": None},
        # three pairs before the comparison, three fresh ones to confirm: a paired t on two
        # pairs has one degree of freedom, and a 30% drop under the machine's load was
        # seldom significant on it (sweep_compare.compare on simulated pairs)
        "trials": {"min": 3, "max": 3, "confirm": 3},
        "alpha": 0.01,
        "cost": {"restart_s": 90, "workload_s": 60, "gpus": 0},
    }


def commit_flags(tree: Path, flags: dict[str, Any], message: str) -> str:
    """Write ``flags`` as the tree's vllm.yaml and commit it (the tree made where missing);
    the commit's id."""
    tree.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(tree), "-c", "user.name=bisect", "-c", "user.email=bisect@localhost"]
    if not (tree / ".git").exists():
        subprocess.run([*git, "init", "-q"], check=True)
    (tree / CONFIG).write_text(json.dumps(flags, indent=1) + "\n", encoding="utf-8")
    subprocess.run([*git, "add", CONFIG], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", message], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["parser", "throughput"])
    parser.add_argument("--venv", type=Path, default=Path(".venv-vllm"))
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--port", type=int, default=39130)
    parser.add_argument("--workdir", default="bisect-real-engine/services")
    parser.add_argument("--parser", choices=["stock", "leaky"], default="stock")
    parser.add_argument("--tree", type=Path, default=Path("bisect-real-engine/deploy"))
    parser.add_argument("--max-num-seqs", type=int, help="commit this to the tree's flags")
    args = parser.parse_args()
    if args.kind == "throughput":
        if args.max_num_seqs is not None or not (args.tree / CONFIG).exists():
            flags = {} if args.max_num_seqs is None else {"max-num-seqs": args.max_num_seqs}
            commit_flags(args.tree, flags, f"vllm flags: {flags or 'the defaults'}")
        written = throughput_sweep(args.venv, args.model, args.port, args.workdir, args.tree)
    else:
        written = parser_sweep(args.venv, args.model, args.port, args.workdir, args.parser)
    json.dump(written, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
