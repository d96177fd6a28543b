"""Fuzz every parser of server output with >= 10,000 hostile inputs each, and count.

The targets and their properties are tests/support/parser_fuzz.py's (the tests run a hundred
of each): chat-completion JSON (strict decoding, then the classifier), SSE as the live reader
reads it (cut anywhere: the answer must not depend on where), saved responses (``bisect
classify``), Prometheus text, service log lines (wedge signs), ``--help`` output. Per target it
prints the inputs tried, tracebacks (an exception the parser let out), broken promises (a property
that failed), hangs (inputs slower than ``--bound`` seconds) and the slowest input. A watchdog
aborts with a stack dump if one input runs past ``--kill`` seconds (a hang the count cannot see).

    .venv/bin/python -m bench.fuzz_parsers [--inputs 10000] [--bound 1] [--json]

Leak triage runs as ``BISECT_TRIAGE`` says (default: SGLang's detectors when installed).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import time
import traceback
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from experiments.workload import triage
from tests.support.parser_fuzz import TARGETS, Target


def fuzz(target: Target, inputs: int, bound_s: float, kill_s: float) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    slowest = 0.0

    @settings(max_examples=inputs, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(target.inputs)
    def one(case: Any) -> None:
        nonlocal slowest
        faulthandler.dump_traceback_later(kill_s, exit=True)
        started = time.perf_counter()
        try:
            target.check(case)
        except AssertionError:
            counts["broken promises"] += 1
            first.setdefault("broken promise", f"{case!r:.300}\n{traceback.format_exc(-3)}")
        except Exception:  # what the count is for: any exception the parser let out
            counts["tracebacks"] += 1
            first.setdefault("traceback", f"{case!r:.300}\n{traceback.format_exc(-3)}")
        finally:
            faulthandler.cancel_dump_traceback_later()
        took = time.perf_counter() - started
        slowest = max(slowest, took)
        counts["inputs"] += 1
        counts["hangs"] += took > bound_s

    started = time.perf_counter()
    one()
    return {"inputs": counts["inputs"], "tracebacks": counts["tracebacks"],
            "broken_promises": counts["broken promises"], "hangs": counts["hangs"],
            "max_ms": round(slowest * 1000, 1), "wall_s": round(time.perf_counter() - started, 1),
            "first_failures": first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=10_000, help="inputs per parser")
    parser.add_argument("--bound", type=float, default=1.0, help="seconds past which an "
                        "input counts as a hang")
    parser.add_argument("--kill", type=float, default=120.0, help="seconds after which one "
                        "input aborts the run")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()
    triage.warm_up()  # SGLang's detectors import in seconds: not a hang of the first leak
    rows = {}
    if not args.json:
        print(f"{'parser':22} {'inputs':>7} {'tracebacks':>10} {'broken':>7} "
              f"{'hangs>' + format(args.bound, 'g') + 's':>9} {'max ms':>8} {'wall s':>7}")
    for target in TARGETS:
        row = fuzz(target, args.inputs, args.bound, args.kill)
        rows[target.name] = row
        if not args.json:
            print(f"{target.name:22} {row['inputs']:>7} {row['tracebacks']:>10} "
                  f"{row['broken_promises']:>7} {row['hangs']:>9} {row['max_ms']:>8} "
                  f"{row['wall_s']:>7}", flush=True)
            for kind, text in row["first_failures"].items():
                print(f"  first {kind}: {text}", flush=True)
    if args.json:
        print(json.dumps({"inputs_per_parser": args.inputs, "bound_s": args.bound,
                          "parsers": rows}, indent=2))


if __name__ == "__main__":
    main()
