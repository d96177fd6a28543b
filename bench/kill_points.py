"""The driver killed with SIGKILL at random points of a campaign on twins, then resumed.

Like SQLite's crash tests: loop k of K runs k seeds, each killing the driver after a random
delay drawn from the first k/K of an uninterrupted run's duration, so each loop has more
points and reaches later into the campaign (store creation, locks and preflight, Ray start,
deploy, restart, proof, mid-stress, the store write between trials, the verdict). A point is
a delay, not a named hook: nothing in the driver knows it is being tested, and where each kill
landed is read from outside (the store, the lock file, the service's log) and printed.

After each kill: nothing of the driver runs on (its reaper stopped the twin and Ray's agents),
then `bisect resume` (or `bisect run` again when the kill came before the campaign was
stored) must give the uninterrupted run's verdict, no trial duplicated or lost, the node
restored and unlocked, nothing left running, and `PRAGMA integrity_check` ok.

    .venv/bin/python -m bench.kill_points [--loops 6] [--seed 1]   # 21 points, ~15 min

It prints one line per point and a table for RELIABILITY.md; exit 1 if any point failed.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.support.kill_points import (
    Bench,
    kill,
    no_leftovers,
    problems_after_resume,
    wait_until,
)


def reference(root: Path) -> tuple[float, list[dict[str, str]]]:
    """An uninterrupted run: its duration and its culprits."""
    bench = Bench.make(root / "reference")
    try:
        began = time.monotonic()
        driver = bench.run()
        out, err = driver.communicate(timeout=600)
        wall = time.monotonic() - began
        if driver.returncode != 0:
            raise SystemExit(f"the uninterrupted run failed: {err.decode()[-2000:]}")
        verdict = json.loads(out)
        return wall, [c["factors"] for c in verdict["culprits"]]
    finally:
        bench.close()


def one_point(root: Path, name: str, delay_s: float,
              expected: list[dict[str, str]]) -> tuple[str, int, list[str]]:
    """Kill after ``delay_s``, resume, check: where it landed, trials done then, problems."""
    bench = Bench.make(root / name)
    try:
        driver = bench.run()
        wait_until(lambda: False, driver, delay_s)  # the driver may end first: then no kill
        phase = bench.phase() if driver.poll() is None else "after exit"
        killed_at = bench.trials()
        kill(driver)
        problems = [f"left after the kill: {p}" for p in no_leftovers(bench.marker, driver.pid)]
        ids = bench.campaign_ids()
        # Killed before the campaign was stored: run it again, on the same store.
        resumed, pid = bench.resume(ids[0]) if ids else bench.run_to_the_end()
        problems += problems_after_resume(bench, killed_at, resumed, expected)
        problems += [f"left after the resume: {p}" for p in no_leftovers(bench.marker, pid)]
        done = sum(status == "done" for _, status in killed_at)
        return phase, done, problems
    finally:
        bench.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kill-points-") as tmp:
        root = Path(tmp)
        wall, expected = reference(root)
        print(f"uninterrupted: {wall:.1f} s, culprits {expected}", flush=True)
        rows, phases, failed = [], Counter[str](), 0
        for loop in range(1, args.loops + 1):
            for index in range(loop):
                rng = random.Random(args.seed * 1_000_003 + loop * 1_000 + index)
                delay = rng.uniform(0, wall * loop / args.loops)
                name = f"l{loop}-s{index}"
                began = time.monotonic()
                phase, done, problems = one_point(root, name, delay, expected)
                phases[phase] += 1
                failed += bool(problems)
                result = "ok" if not problems else "FAIL: " + "; ".join(problems)
                rows.append((name, delay, phase, done, result))
                print(f"{name:7} kill at {delay:5.1f} s ({phase}, {done} trials done): "
                      f"{result} [{time.monotonic() - began:.0f} s]", flush=True)
    print("\n| point | kill at (s) | where it landed | trials done | after resume |")
    print("|---|---|---|---|---|")
    for name, delay, phase, done, result in rows:
        print(f"| {name} | {delay:.1f} | {phase} | {done} | {result} |")
    covered = ", ".join(f"{phase} {n}" for phase, n in phases.most_common())
    print(f"\n{len(rows)} kills ({covered}); {len(rows) - failed} resumed to the same verdict "
          f"with every check passed, {failed} failed.")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
