"""The fastest clean configuration of the real vLLM on this machine, and the grid that checks it
(issue 30, item 3).

``search``: `bisect optimize`'s TPE over ``--max-num-seqs`` (256, vLLM's default; 4; 1) x
``--enforce-eager`` (off, on), a budget under the grid's, production a cautious
``--max-num-seqs 4 --enforce-eager``; ``grid``: every configuration of the same space three
times, on the same store, right after. The stress workload's sessions are judged by the
classifier (the model's replies scripted, scripted.py): a configuration must stay clean to be
named.
``check SEARCH GRID``: the search's answer against the grid's measurements (the two verdicts'
JSON), a line a configuration, exit 1 where the grid's own trials show the answer slower than
the grid's fastest configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from math import prod
from pathlib import Path
from statistics import mean
from typing import Any

from experiments.real_engine.campaign import pools, workload

FACTORS = [
    {"name": "max_num_seqs", "levels": {
        "256": {}, "4": {"flags": ["--max-num-seqs", "4"]},
        "1": {"flags": ["--max-num-seqs", "1"]},
    }},
    {"name": "eager", "levels": {"off": {}, "on": {"flags": ["--enforce-eager"]}}},
]
PRODUCTION = {"max_num_seqs": "4", "eager": "on"}
SPACE = prod(len(factor["levels"]) for factor in FACTORS)  # configurations


# 32 sessions of 4 rounds, 8 in flight: several requests in flight is what a low --max-num-seqs
# takes away (the throughput sweep runs the same)
WORKLOAD = {**workload("stress"), "sessions": 32}
# Trials a configuration on the grid, and a candidate the search confirms (its final pairs as
# many): a paired t on two pairs has one degree of freedom (run 2's answer, 1.9x production,
# p = 0.11 on two), and two trials a configuration let the check pass a 64% answer (run 1).
CONFIRM = 3
# The search's budget counts production's re-runs and the leader's (TPE re-runs the leader as
# it goes: optimize_confirm.leader_again): production takes CONFIRM, a pick that leads CONFIRM
# more. Eight leaves at least two picks when the first leads; on the sampler's order at seed 0
# (4/off, 1/off, 256/off, ...: random picks until startup_trials) 1/off cannot lead, so the
# eighth trial is at the latest 256's first (tests/test_real_engine_search.py drives it).
SEARCH_TRIALS = 8


def optimize(venv: Path, model: Path, port: int, workdir: str, kind: str) -> dict[str, Any]:
    grid = kind == "grid"
    return {
        "name": f"real engine: vLLM CPU, the fastest clean flags ({kind})",
        **pools(venv, model, port, workdir, scripted=True),
        "factors": FACTORS,
        "workload": WORKLOAD,
        "known_good": PRODUCTION,
        "strategy": {
            "kind": "optimize", "objectives": ["output_throughput"],
            "sampler": "grid" if grid else "tpe", "seed": 0,
            # the grid: each configuration once, then re-run until each has CONFIRM trials;
            # the search: SEARCH_TRIALS, the top two re-run, production beside the answer
            "trials": SPACE if grid else SEARCH_TRIALS,
            "confirm_top": SPACE if grid else 2, "confirm_trials": CONFIRM,
            "max_corruption": 0.05, "max_wedging": 0.05,
            "production": PRODUCTION,
        },
        "cost": {"restart_s": 90, "workload_s": 60, "gpus": 0},
    }


def measured(verdict: dict[str, Any]) -> dict[str, list[float]]:
    """Output tokens/s of each configuration's trials, by its levels (as `a=x,b=y`)."""
    section = verdict["optimize"]
    rows = [*section["ranked"], *section["rejected"], *section["unproven"]]
    return {_key(row["levels"]): row["objectives"][0]["values"] for row in rows
            if row["objectives"][0]["values"]}


def _key(levels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(levels.items()))


def check(search: dict[str, Any], grid: dict[str, Any], alpha: float = 0.05
          ) -> tuple[bool, list[str]]:
    """Whether the grid leaves the search's answer beside its best: not shown slower than the
    grid's fastest configuration on the grid's own trials (one-sided Welch t at ``alpha``);
    and the lines that say so."""
    from scipy.stats import ttest_ind

    answer = search["optimize"]["best"]
    if answer is None:
        return False, ["the search named no configuration"]
    key = _key(answer)
    on_grid = measured(grid)
    means = {k: mean(v) for k, v in on_grid.items()}
    best = max(means, key=means.__getitem__)
    lines = [f"{k:<32} {means[k]:>8.1f} tok/s  trials {', '.join(f'{x:.1f}' for x in v)}"
             f"{'  <- the search' if k == key else ''}{'  <- the grid best' if k == best else ''}"
             for k, v in sorted(on_grid.items(), key=lambda kv: -means[kv[0]])]
    if key not in means:
        return False, [*lines, f"the search's answer {key} was not measured on the grid"]
    if key == best:
        return True, [*lines, f"the answer {key} is the grid's fastest"]
    if min(len(on_grid[key]), len(on_grid[best])) < 2:
        return False, [*lines, "too few trials on the grid to compare the answer with its best"]
    p = float(ttest_ind(on_grid[best], on_grid[key], equal_var=False,
                        alternative="greater").pvalue)
    slower = p < alpha
    lines.append(f"the answer {key}: {means[key] / means[best]:.0%} of the grid's fastest "
                 f"({best}), {'shown' if slower else 'not shown'} slower on the grid's trials "
                 f"(one-sided Welch t p = {p:.3g}, alpha {alpha:g})")
    return not slower, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["search", "grid", "check"])
    parser.add_argument("verdicts", nargs="*", type=Path,
                        help="check: the search's and the grid's verdict JSON")
    parser.add_argument("--venv", type=Path, default=Path(".venv-vllm"))
    parser.add_argument("--model", type=Path)
    parser.add_argument("--port", type=int, default=39130)
    parser.add_argument("--workdir", default="bisect-real-engine/services")
    args = parser.parse_args()
    if args.kind == "check":
        if len(args.verdicts) != 2:
            parser.error("check takes the search's and the grid's verdict JSON")
        search, grid = (json.loads(p.read_text(encoding="utf-8")) for p in args.verdicts)
        ok, lines = check(search, grid)
        print("\n".join(lines))
        raise SystemExit(0 if ok else 1)
    if args.model is None:
        parser.error("--model is required")
    json.dump(optimize(args.venv, args.model, args.port, args.workdir, args.kind),
              sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
