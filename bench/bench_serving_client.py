"""SGLang's own ``bench_serving``, offline, as a subprocess of bench/harness.py.

``assets DIR``: writes what it needs to run without the hub: a tiny local tokenizer
(``tokenizers`` WordLevel, saved as ``DIR/tokenizer/tokenizer.json`` with a minimal config and a
chat template) and the agentic-trace dataset ``DIR/trace.json``: ``--sessions`` conversations of
``--rounds`` rounds in the agent contract's words (system prompt and opening with a canary, then
a tool result with a fresh canary each round).

``serve``: a pinned client process (job protocol: bench/worker.py). Each job runs
``python -m sglang.bench_serving ARGS`` in-process, unchanged but for one import shim
(``_without_srt_configs``); its CPU time is taken around the ``benchmark()`` coroutine (warm-up,
load, metrics), so start-up, the torch and transformers imports and dataset loading are left out,
as for the other clients. Requests/s uses bench_serving's own duration (after its warm-up).

``once ARGS... [--- ARGS...]``: one ``bench_serving`` run with ARGS, as its command line runs it
(the shim aside); one run after the other for each group of ARGS, in the one process (its
imports take seconds of CPU). ``metrics``: bench_serving's own ``calculate_metrics`` on the
requests read as JSON from stdin (``{"dur_s", "outputs": [{success, latency, ttft, itl,
output_len, prompt_len, start_time}]}``); prints its ``BenchmarkMetrics`` as JSON
(tests/test_stress_bench_serving.py).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import types
import warnings
from pathlib import Path
from typing import Any

from worker import Job, Meter, serve

from experiments.agent import SYSTEM_PROMPT, first_user_message, new_canary, tool_result_message

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def write_tokenizer(directory: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "[BOS]", "[EOS]", *sorted(set(SYSTEM_PROMPT.lower().split()))]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, "[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "[BOS]",
              "eos_token": "[EOS]", "unk_token": "[UNK]", "model_max_length": 1 << 20,
              "chat_template": CHAT_TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    (directory / "config.json").write_text(json.dumps({"model_type": "llama"}))


def write_trace(path: Path, sessions: int, rounds: int, seed: int = 0) -> None:
    conversations = []
    for index in range(sessions):
        rng = random.Random(f"{seed}:{index}")
        opening = first_user_message(f"s{seed}-{index}", new_canary(rng))
        turns: list[dict[str, Any]] = [{"messages": [
            {"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": opening}],
            "prompt_tokens": 100}]
        turns += [{"messages": [{"role": "tool",
                                 "content": tool_result_message("read_file", new_canary(rng))}]}
                  for _ in range(rounds - 1)]
        conversations.append(turns)
    path.write_text(json.dumps({"metadata": {"source": "bench/harness.py"},
                                "conversations": conversations}))


def _without_srt_configs() -> None:
    """bench_serving imports one constant from ``sglang.srt.disaggregation.utils``, whose import
    chain (model configs) needs torchvision, which has no CPU wheel for this torch here: that one
    module is replaced by the constant, with upstream's value. Nothing on the request path."""
    stub = types.ModuleType("sglang.srt.disaggregation.utils")
    stub.FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # type: ignore[attr-defined]
    sys.modules[stub.__name__] = stub


def run(job: Job) -> dict[str, Any]:
    """One ``bench_serving`` run with ``job["args"]``; CPU and wall time around benchmark()."""
    from sglang.benchmark import serving

    original = serving.benchmark
    figures: dict[str, Any] = {}

    async def timed(*args: Any, **kwargs: Any) -> Any:
        meter = Meter()
        meter.start()
        result = await original(*args, **kwargs)
        figures.update(meter.figures(), requests=result.get("completed"),
                       duration_s=result.get("duration"))
        return result

    serving.benchmark = timed
    sys.argv = ["sglang.bench_serving", *job["args"]]
    try:
        serving.cli_main()
    finally:
        serving.benchmark = original
    return figures


class _Words:
    """What ``calculate_metrics`` asks of a tokenizer (its retokenized output counts only)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[str]:
        return text.split()


def metrics(document: dict[str, Any]) -> dict[str, Any]:
    """bench_serving's ``calculate_metrics`` on the given requests, as a JSON-able dict."""
    from dataclasses import asdict

    from sglang.benchmark import serving

    outputs, rows = [], []
    for given in document["outputs"]:
        output = serving.RequestFuncOutput()
        for name in ("success", "latency", "ttft", "itl", "output_len", "prompt_len",
                     "start_time"):
            setattr(output, name, given[name])
        output.generated_text = ""
        outputs.append(output)
        rows.append(types.SimpleNamespace(prompt_len=given["prompt_len"],
                                          text_prompt_len=given["prompt_len"],
                                          vision_prompt_len=0))
    found, _ = serving.calculate_metrics(rows, outputs, document["dur_s"], _Words(),
                                         "sglang-oai-chat")
    return {k: float(v) for k, v in asdict(found).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    assets = sub.add_parser("assets")
    assets.add_argument("dir", type=Path)
    assets.add_argument("--sessions", type=int, required=True)
    assets.add_argument("--rounds", type=int, required=True)
    sub.add_parser("serve")
    sub.add_parser("metrics")
    sub.add_parser("once", add_help=False)  # the rest of the line is bench_serving's
    args, rest = parser.parse_known_args()
    if args.command != "once" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "assets":
        write_tokenizer(args.dir / "tokenizer")
        write_trace(args.dir / "trace.json", args.sessions, args.rounds)
        return
    warnings.simplefilter("ignore", FutureWarning)
    _without_srt_configs()
    import sglang.benchmark.serving  # imported once, before any job

    if args.command == "metrics":
        print(json.dumps(metrics(json.load(sys.stdin))))
    elif args.command == "once":
        runs: list[list[str]] = [[]]
        for arg in rest:
            if arg == "---":
                runs.append([])
            else:
                runs[-1].append(arg)
        for run_args in runs:
            sys.argv = ["sglang.bench_serving", *run_args]
            sglang.benchmark.serving.cli_main()
    else:
        serve(run)


if __name__ == "__main__":
    main()
