"""Start-up of the read commands' help (issue 28 asks `bisect verdict/log/show --help` in at
most 3× a bare `python -c 'import typer'`): each command run in a fresh interpreter, in turns
(one run of each per round, so that a burst of load falls on all of them alike), medians
reported with each command's ratio to the bare import.

    .venv/bin/python -m bench.cli_start [--runs 30] [--json out.json]

The console script is run as its interpreter runs it (``python .venv/bin/bisect``): the same
interpreter and site-packages as the baseline, so the ratio is the CLI's own cost.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET = 3.0  # the issue: at most 3× the bare import
BASELINE = "python -c 'import typer'"
COMMANDS = ("verdict", "log", "show")


def runs() -> dict[str, list[str]]:
    """What is timed, by name: the baseline, then each command's --help."""
    bisect = str(Path(sys.executable).parent / "bisect")
    return {BASELINE: [sys.executable, "-c", "import typer"],
            **{f"bisect {c} --help": [sys.executable, bisect, c, "--help"] for c in COMMANDS}}


# Bytecode written, as an installed package has it: a shell with PYTHONDONTWRITEBYTECODE would
# otherwise time the compiling of every module of the CLI at every run.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env=ENV)
    return time.perf_counter() - start


def measure(rounds: int) -> dict[str, list[float]]:
    timed = runs()
    for argv in timed.values():  # warm the page cache and the bytecode caches first
        once(argv)
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(rounds):
        for name, argv in timed.items():
            seconds[name].append(once(argv))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="Rounds (each command once each).")
    parser.add_argument("--json", type=Path, help="Write the figures to this file.")
    args = parser.parse_args()
    load = os.getloadavg()
    seconds = measure(args.runs)
    base = statistics.median(seconds[BASELINE])
    rows = {name: {"median_ms": round(statistics.median(xs) * 1000, 1),
                   "ratio": round(statistics.median(xs) / base, 2)}
            for name, xs in seconds.items()}
    print(f"{args.runs} runs each, Python {platform.python_version()}, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start")
    for name, row in rows.items():
        print(f"{name:<32} {row['median_ms']:7.1f} ms  {row['ratio']:.2f}×")
    worst = max(row["ratio"] for name, row in rows.items() if name != BASELINE)
    print(f"worst ratio {worst:.2f}× (target ≤ {TARGET:g}×): "
          f"{'met' if worst <= TARGET else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps({"runs": args.runs, "load_average": load,
                                         "commands": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
