"""Fuzz the campaign loader: hostile YAML texts (tests/support/yaml_fuzz.py: random bytes,
mutated valid campaigns, deep nesting, alias bombs, tags, absurd numbers) fed to
``load_campaign``, and the worst inputs the caps allow, timed one by one.

Allowed outcomes: a Campaign, or a CampaignError whose every line starts with the file's name.
Anything else is a traceback; an input still running after ``--bound`` seconds is a hang.

    .venv/bin/python -m bench.fuzz_campaign [--inputs 10000] [--bound 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from experiments.yaml_lines import MAX_BYTES, MAX_DEPTH, MAX_LINE_CHARS, MAX_NODES
from tests.support.yaml_fuzz import VALID, aliased_factors, campaign_texts, load_outcome


class Hang(Exception):
    """Raised in the loader by the interval timer: the input ran past the bound."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang


def worst_cases() -> dict[str, str]:
    """The largest inputs each cap still lets through to the parser (or just past it); they
    are counted with the generated inputs."""
    line = ", ".join(["1"] * (MAX_LINE_CHARS // 3 - 2))
    many = "x: [" + ",\n".join(line for _ in range(MAX_BYTES // MAX_LINE_CHARS - 1)) + "]\n"
    scalar = "x: '" + "\n  ".join("y" * (MAX_LINE_CHARS - 4)
                                  for _ in range(MAX_BYTES // MAX_LINE_CHARS - 1)) + "'\n"
    deep = MAX_BYTES // 8 - 4
    return {
        "values up to the node cap": many,
        "one string of a whole file": scalar,
        # 45 factors of 45 commands of 45 words: ~91,000 values, just under the budget
        "aliases just under the budget": aliased_factors(45),
        "nesting at the depth cap": VALID + "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1),
        "nesting far past it": "x:\n" + "  [\n" * deep + "  ]\n" * deep,
        "keys up to the node cap": "".join(f"k{i}: {i}\n" for i in range(MAX_NODES // 2 - 1)),
        "keys past it": "".join(f"k{i}: {i}\n" for i in range(MAX_BYTES // 16)),
    }


def run(inputs: int, bound: float) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="bisect-fuzz-"))
    path = directory / "fuzzed.yaml"
    counts: dict[str, Any] = {"inputs": 0, "campaigns": 0, "errors": 0, "tracebacks": 0,
                              "hangs": 0, "max_s": 0.0, "examples": []}
    signal.signal(signal.SIGALRM, _alarm)

    def one(content: str | bytes) -> float:
        counts["inputs"] += 1
        started = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, bound)
        try:
            outcome = load_outcome(content, path)
            counts["campaigns" if not isinstance(outcome, Exception) else "errors"] += 1
        except Hang:
            counts["hangs"] += 1
            counts["examples"].append({"hang": repr(content)[:300]})
        except Exception:  # the defect this run counts
            counts["tracebacks"] += 1
            counts["examples"].append({"traceback": traceback.format_exc(limit=-3)[-600:],
                                       "input": repr(content)[:300]})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        elapsed = time.perf_counter() - started
        counts["max_s"] = max(counts["max_s"], elapsed)
        return elapsed

    @settings(max_examples=inputs, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(campaign_texts())
    def generated(content: str | bytes) -> None:
        one(content)

    started = time.perf_counter()
    generated()
    counts["wall_s"] = round(time.perf_counter() - started, 1)
    counts["max_generated_s"] = round(counts["max_s"], 3)
    counts["worst_cases_s"] = {name: round(one(text), 3) for name, text in worst_cases().items()}
    counts["max_s"] = round(counts["max_s"], 3)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--bound", type=float, default=10.0, help="seconds before a hang")
    parser.add_argument("--json", type=Path, help="also write the counts here")
    args = parser.parse_args()
    counts = run(args.inputs, args.bound)
    print(f"inputs {counts['inputs']} (campaigns {counts['campaigns']}, file-named errors "
          f"{counts['errors']}), tracebacks {counts['tracebacks']}, hangs past {args.bound:g} s "
          f"{counts['hangs']}, max {counts['max_s']:.3f} s per input (generated ones: "
          f"{counts['max_generated_s']:.3f} s), {counts['wall_s']} s wall for the generated")
    for name, seconds in counts["worst_cases_s"].items():
        print(f"  worst case, {name}: {seconds:.3f} s")
    for example in counts["examples"][:5]:
        print(json.dumps(example))
    if args.json:
        args.json.write_text(json.dumps(counts, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
