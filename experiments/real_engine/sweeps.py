"""Write the sweeps that watch the real vLLM on this machine (issue 30).

Both run the stress workload with the model's replies scripted (scripted.py, loaded by vLLM
as ``campaign.py`` loads it for ``--workload stress``): every session of a sound engine comes
back ``ok``, so a fault has clean sessions to stand out from.

``parser``: the planted parser fault's arrival, and quiet while nothing changed. One variant,
``production``; the run accepted as the baseline and the quiet run use ``--parser stock``, the
alert run ``--parser leaky`` (the patch arrives as the production variant's new level).

``throughput``: a deployment repository (``--tree``, a git tree this writes and commits to)
holds the engine's flags in ``vllm.yaml`` (vLLM's ``--config``); ``--max-num-seqs 1``
committed there is the regression. The source tree moved, so every trial of the new commit
runs beside a trial of the baseline's commit, checked out on the same node: throughput is
compared pair by pair (a flag changed in the sweep file itself would have no control beside
it, and is shown as ``uncontrolled``, never alerted on). Corruption and wedging are watched
too: a flag that broke the replies would be caught as well as one that slowed them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from experiments.real_engine.campaign import parser_factor, pools, workload
from experiments.real_engine.optimize import WORKLOAD

# The campaign's stress workload (16 sessions of 4 rounds, 8 in flight), 2 trials before a
# comparison, 3 for the baseline: a leaky parser corrupts about 2 sessions in 3 (a canary holds
# a "7" in about 1 request of 4; the stress campaign saw 23 of 32), a stock one none of 64, so a
# rise of 40 points is caught at the first look and ruled out in a quiet run
# (sweep_compare.compare).
THRESHOLD = 0.4


def parser_sweep(venv: Path, model: Path, port: int, workdir: str,
                 parser: str) -> dict[str, Any]:
    return {
        "name": "real-engine-parser",
        **pools(venv, model, port, workdir, scripted=True),
        "factors": [parser_factor(venv)],
        "variants": {"production": {"parser": parser}},
        "workload": workload("stress"),
        # the parser's fault is corruption: the throughput sweep watches the rest
        "thresholds": {"corruption": THRESHOLD, "wedging": None,
                       "throughput": None, "p99_latency": None},
        "trials": {"min": 2, "max": 3, "confirm": 2},
        "alpha": 0.01,
        "cost": {"restart_s": 90, "workload_s": 60, "gpus": 0},
    }


# optimize.py's workload: several requests in flight is what --max-num-seqs 1 takes away
STRESS = WORKLOAD
CONFIG = "vllm.yaml"


def throughput_sweep(venv: Path, model: Path, port: int, workdir: str,
                     tree: Path) -> dict[str, Any]:
    tree = tree.resolve()
    return {
        "name": "real-engine-throughput",
        **pools(venv, model, port, workdir, ("--config", str(tree / CONFIG)), scripted=True),
        "source": {"tree": str(tree)},
        "variants": {"production": {}},
        "workload": STRESS,
        "thresholds": {"corruption": THRESHOLD, "wedging": 0.4, "throughput": 0.3,
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
