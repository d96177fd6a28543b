"""How fast `bisect classify` answers (issue 31): its start beside a bare ``import typer``, and
responses per second on the triage corpus in one call.

    PYTHONPATH=. .venv/bin/python -m bench.classify_start --runs 9

Each round runs, one after the other so that they share the machine's load alike: a bare
``python -c 'import typer'``; a two-command typer app running one (the floor of any typer
command line); ``bisect classify`` of one clean response (nothing to triage);
of one leaked one (SGLang's detectors load, without torch); and of the whole triage corpus
(tests/corpus_markup.py, every text a response, ``--repeat`` times over, as JSON Lines) in one
call. Medians of wall and
CPU seconds (the child's user + system, less sensitive to a shared machine than wall), ratios
of medians, and the load average before and after. ``--ordinary`` adds one ordinary import of
SGLang's detectors (its ``__init__``, torch, transformers): what each call paid before.
``--instructions`` adds, for each start, the instructions one run executes under valgrind's
callgrind (the same on a quiet or a loaded machine; ``PYTHONHASHSEED=0``), and their ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.corpus_markup import CORPUS

BISECT = str(Path(sys.executable).parent / "bisect")
ORDINARY = "from sglang.srt.function_call.deepseekv4_detector import DeepSeekV4Detector"
# The floor for any typer command line: what typer costs to parse argv and run a command, beyond
# importing it.
TINY_CLI = """import typer
app = typer.Typer()
@app.command()
def one(name: str) -> None:
    print(name)
@app.command()
def two() -> None:
    pass
app()
"""


def completion(content: str) -> str:
    return json.dumps({"object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": content},
         "finish_reason": "stop"}]})


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` (CPU: the child's user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def instructions(argv: list[str], env: dict[str, str]) -> int:
    """The instructions one run of ``argv`` executes, counted by callgrind."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           *argv], capture_output=True, text=True,
                          env={**env, "PYTHONHASHSEED": "0"}, check=False)
    counted = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode not in (0, 1) or counted is None:
        raise SystemExit(f"valgrind {' '.join(argv)}: exit {done.returncode}\n"
                         f"{done.stderr[-2000:]}")
    return int(counted.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=10,
                        help="the corpus this many times over in the one call")
    parser.add_argument("--ordinary", action="store_true",
                        help="also time one ordinary import of SGLang's detectors")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each start's instructions under callgrind (valgrind)")
    args = parser.parse_args()
    # SGLang's detectors, or fail; bytecode written, as an installed package has it (a shell
    # with PYTHONDONTWRITEBYTECODE would otherwise time the compiling of every module)
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
           "BISECT_TRIAGE": "sglang"}
    with tempfile.TemporaryDirectory() as tmp:
        clean, leak, corpus = (Path(tmp) / name for name in ("clean.json", "leak.json",
                                                              "corpus.jsonl"))
        clean.write_text(json.dumps({"choices": [{"message": {"role": "assistant",
                                                               "content": "done"}}]}))
        leak.write_text(completion(CORPUS["v31"]))
        texts = list(CORPUS.values()) * args.repeat
        corpus.write_text("".join(completion(text) + "\n" for text in texts))
        tiny = Path(tmp) / "tiny_cli.py"
        tiny.write_text(TINY_CLI)
        cases = {
            "python -c 'import typer'": [sys.executable, "-c", "import typer"],
            "a two-command typer app running one": [sys.executable, str(tiny), "one", "x"],
            "bisect classify CLEAN.json": [BISECT, "classify", str(clean)],
            "bisect classify LEAK.json": [BISECT, "classify", str(leak)],
            f"bisect classify CORPUS.jsonl --json ({len(texts)} responses)":
                [BISECT, "classify", str(corpus), "--json"],
        }
        load_before = os.getloadavg()
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, argv in cases.items():
                runs[name].append(timed(argv, env))
        ordinary = timed([sys.executable, "-c", ORDINARY], env) if args.ordinary else None
        load_after = os.getloadavg()
        # the starts only: the console script run by this interpreter, as its first line says
        counts = {name: instructions([sys.executable, *argv] if argv[0] == BISECT
                                     else argv, env)
                  for name, argv in list(cases.items())[:4]} if args.instructions else {}
    wall = {name: statistics.median(w for w, _ in got) for name, got in runs.items()}
    cpu = {name: statistics.median(c for _, c in got) for name, got in runs.items()}
    base = next(iter(cases))
    print(f"{os.cpu_count()} CPUs; load average (1, 5, 15 min) before "
          f"{', '.join(f'{x:.2f}' for x in load_before)}, after "
          f"{', '.join(f'{x:.2f}' for x in load_after)}; {args.runs} runs each, interleaved\n")
    print("| command | wall s, median | × typer | CPU s, median | × typer |")
    print("|---|---|---|---|---|")
    for name in cases:
        print(f"| `{name}` | {wall[name]:.3f} | {wall[name] / wall[base]:.2f} | "
              f"{cpu[name]:.3f} | {cpu[name] / cpu[base]:.2f} |")
    if ordinary is not None:
        print(f"| `python -c '{ORDINARY}'` (ordinary import, 1 run) | {ordinary[0]:.3f} | "
              f"{ordinary[0] / wall[base]:.2f} | {ordinary[1]:.3f} | "
              f"{ordinary[1] / cpu[base]:.2f} |")
    if counts:
        print("\n| command | instructions (callgrind) | × typer |")
        print("|---|---|---|")
        for name, count in counts.items():
            print(f"| `{name}` | {count:,} | {count / counts[base]:.2f} |")
    name = list(cases)[4]
    extra = wall[name] - wall["bisect classify LEAK.json"]
    count = len(CORPUS) * args.repeat
    print(f"\ncorpus in one call: {count / wall[name]:.0f} responses/s including the start; "
          f"{count - 1} more responses than LEAK.json cost {extra:.3f} s more: "
          f"{(count - 1) / extra if extra > 0 else float('inf'):.0f} responses/s after the start")


if __name__ == "__main__":
    main()
