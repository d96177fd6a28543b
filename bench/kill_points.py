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

    .venv/bin/python -m bench.kill_points [--loops 6] [--stored 4] [--seed 1]  # 25 points

Random delays fall mostly early (the gaps between trials are short), so ``--stored`` adds kills
triggered from outside the moment the store holds a given number of finished trials: right after
a trial's store write, and, for the last trial, while the driver restores the nodes and derives
the verdict.

It prints one line per point and a table for RELIABILITY.md; exit 1 if any point failed.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

from tests.support.kill_points import (
    Bench,
    kill,
    no_leftovers,
    problems_after_resume,
    wait_until,
)


def reference(root: Path) -> tuple[float, int, list[dict[str, str]]]:
    """An uninterrupted run: its duration, its trials and its culprits."""
    bench = Bench.make(root / "reference")
    try:
        began = time.monotonic()
        driver = bench.run()
        out, err = driver.communicate(timeout=600)
        wall = time.monotonic() - began
        if driver.returncode != 0:
            raise SystemExit(f"the uninterrupted run failed: {err.decode()[-2000:]}")
        verdict = json.loads(out)
        return wall, verdict["cost"]["trials"], [c["factors"] for c in verdict["culprits"]]
    finally:
        bench.close()


Trigger = Callable[[Bench], bool]


def after(delay_s: float) -> Trigger:
    """A kill after a delay (the random points)."""
    deadline = time.monotonic() + delay_s  # from the driver's start: made just before it
    return lambda _: time.monotonic() >= deadline


def once_stored(done: int) -> Trigger:
    """A kill the moment the store holds ``done`` finished trials: right after a trial's store
    write (the driver is then between trials, or, after the last one, on its verdict)."""
    return lambda bench: sum(status == "done" for _, status in bench.trials()) >= done


def one_point(root: Path, name: str, trigger: Callable[[], Trigger], label: str | None,
              expected: list[dict[str, str]]) -> tuple[str, int, list[str]]:
    """Kill when ``trigger`` says, resume, check: where it landed, trials done then, problems.
    ``label``: where a triggered kill lands by construction (None: read it from outside)."""
    bench = Bench.make(root / name)
    try:
        fires = trigger()
        driver = bench.run()
        wait_until(lambda: fires(bench), driver, 600)  # the driver may end first: then no kill
        phase = (label or bench.phase()) if driver.poll() is None else "after exit"
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


def points(loops: int, seed: int, wall: float, trials: int,
           stored: int) -> list[tuple[str, str, Callable[[], Trigger], str | None]]:
    """(name, when, trigger, label): the random delays of each loop, then ``stored`` kills
    right after a trial's store write (the last of them: on the verdict)."""
    chosen: list[tuple[str, str, Callable[[], Trigger], str | None]] = []
    for loop in range(1, loops + 1):
        for index in range(loop):
            rng = random.Random(seed * 1_000_003 + loop * 1_000 + index)
            delay = rng.uniform(0, wall * loop / loops)
            chosen.append((f"l{loop}-s{index}", f"{delay:.1f} s",
                           partial(after, delay), None))
    rng = random.Random(seed)
    for index in range(stored):
        done = trials if index == stored - 1 else rng.randint(1, max(1, trials - 1))
        label = "verdict" if done == trials else "store write, next trial"
        chosen.append((f"w{index}", f"trial {done} stored",
                       partial(once_stored, done), label))
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=6)
    parser.add_argument("--stored", type=int, default=4,
                        help="kills right after a trial's store write (the last: the verdict)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kill-points-") as tmp:
        root = Path(tmp)
        wall, trials, expected = reference(root)
        print(f"uninterrupted: {wall:.1f} s, {trials} trials, culprits {expected}", flush=True)
        rows, phases, failed = [], Counter[str](), 0
        for name, when, trigger, label in points(args.loops, args.seed, wall, trials,
                                                 args.stored):
            began = time.monotonic()
            phase, done, problems = one_point(root, name, trigger, label, expected)
            phases[phase] += 1
            failed += bool(problems)
            result = "ok" if not problems else "FAIL: " + "; ".join(problems)
            rows.append((name, when, phase, done, result))
            print(f"{name:7} kill at {when} ({phase}, {done} trials done): "
                  f"{result} [{time.monotonic() - began:.0f} s]", flush=True)
    print("\n| point | kill at | where it landed | trials done | after resume |")
    print("|---|---|---|---|---|")
    for name, when, phase, done, result in rows:
        print(f"| {name} | {when} | {phase} | {done} | {result} |")
    covered = ", ".join(f"{phase} {n}" for phase, n in phases.most_common())
    print(f"\n{len(rows)} kills ({covered}); {len(rows) - failed} resumed to the same verdict "
          f"with every check passed, {failed} failed.")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
