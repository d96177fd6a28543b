"""The twin's command line: SGLang's ``launch_server`` flags (a subset) plus twin-only flags.

Flag names follow ``python -m sglang.launch_server --help`` so the deploy layer renders one
command line for real nodes and twins alike; unknown flags fail like SGLang's (argparse, exit 2).

A fork's own flags are declared in ``$BISECT_TWIN_FORK_FLAGS`` (``--name`` for a switch,
``--name=METAVAR`` for a flag with a value; separated by spaces or commas). The campaign sets it
in the twin service's ``env:``, which the preflight's ``--help`` run also gets, so the campaign
file stays the one file to edit: the twin then accepts the flags, lists them in ``--help`` and
reports them (server args, fault conditions) like SGLang's own.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# This module imports nothing of the twin's: `--help` and a bad flag (the preflight checks every
# start command with `--help`) parse without pydantic, aiohttp or the fault model.
TOOL_CALL_PARSERS = ("deepseekv3", "deepseekv31", "deepseekv32", "deepseekv4")
DISAGGREGATION_MODES = ("null", "prefill", "decode")
ENGINES = ("planted", "gpu", "cpu-standin")  # engine.py's engines, the --engine choices
FAULT_MODEL_ENV = "BISECT_TWIN_FAULT_MODEL"
FORK_FLAGS_ENV = "BISECT_TWIN_FORK_FLAGS"
_FORK_FLAG = re.compile(r"^(--[A-Za-z0-9][A-Za-z0-9_-]*)(?:=([A-Za-z][A-Za-z0-9_-]*))?$")
MAX_FORK_FLAGS = 256
# Destinations that SGLang's ServerArgs does not have: kept out of the `server_args=` log line.
TWIN_ONLY = frozenset({
    "fault_model", "twin_seed", "twin_startup_delay", "twin_latency_ms", "twin_wedge_s",
    "twin_prefill_us_per_token", "twin_decode_ms_per_token", "twin_decode_batch_slowdown",
    "twin_eager_slowdown", "twin_hicache_hit_cost", "twin_tree", "schema", "engine",
    "twin_chunk_step_ms", "twin_mixed_us_per_token",
})
# Never logged nor reported by /get_server_info (SGLang 0.5.23 does log them: the twin's log and
# info must not be where a test finds a planted key).
SECRET_ARGS = frozenset({"api_key", "admin_api_key"})


def _add_sglang_flags(add: Any) -> None:
    # Model and serving.
    # Aliases are SGLang's own: every spelling the twin accepts exists in the pinned SGLang's
    # ServerArgs (tests/test_twin_serverargs.py).
    add("--model-path", "--model", default="deepseek-ai/DeepSeek-V4-twin", dest="model_path")
    add("--served-model-name", default=None)
    add("--tokenizer-path", default=None)
    add("--trust-remote-code", action="store_true")
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--api-key", default=None, help="require `Authorization: Bearer KEY` (not on /health*, "
        "/metrics), as SGLang does")
    add("--tp-size", "--tensor-parallel-size", type=int, default=1, dest="tp_size")
    add("--dp-size", "--data-parallel-size", type=int, default=1, dest="dp_size")
    add("--ep-size", "--expert-parallel-size", "--ep", type=int, default=1, dest="ep_size")
    add("--enable-dp-attention", action="store_true")
    add("--nnodes", type=int, default=1)
    add("--node-rank", type=int, default=0)
    add("--dist-init-addr", "--nccl-init-addr", default=None, dest="dist_init_addr")
    add("--tool-call-parser", choices=TOOL_CALL_PARSERS, default="deepseekv32")
    add("--reasoning-parser", default=None)
    add("--attention-backend", default=None)
    add("--kv-cache-dtype", default="auto")
    add("--page-size", type=int, default=None)
    add("--random-seed", type=int, default=None)
    add("--stream-interval", type=int, default=1)
    add("--watchdog-timeout", type=float, default=300.0)
    add("--enable-cache-report", action="store_true")
    # Memory and scheduling.
    add("--mem-fraction-static", type=float, default=None,
        help="GPU memory share for weights and the KV pool (default 0.88): the KV pool's size")
    add("--context-length", type=int, default=None)
    add("--max-running-requests", type=int, default=None,
        help="requests in the running batch at most (default 1024); the rest queue")
    add("--chunked-prefill-size", type=int, default=None,
        help="prefill tokens per scheduler step (-1: whole prompts); unset: the twin models "
        "no chunking")
    add("--load-balance-method", default="round_robin")
    add("--disable-radix-cache", action="store_true")
    # HiCache.
    add("--enable-hierarchical-cache", "--enable-hicache", action="store_true",
        dest="enable_hierarchical_cache")
    add("--hicache-ratio", type=float, default=2.0,
        help="host pool size as a multiple of the KV pool (default 2): sessions' prefixes kept")
    add("--hicache-size", type=int, default=0, help="host memory for HiCache in GB (0: use ratio)")
    add("--hicache-write-policy", default="write_through",
        choices=("write_back", "write_through", "write_through_selective"))
    add("--hicache-io-backend", default="kernel", choices=("direct", "kernel"))
    add("--hicache-mem-layout", default="layer_first")
    add("--hicache-storage-backend", default=None)
    # CUDA graphs.
    add("--disable-cuda-graph", action="store_true")
    add("--disable-decode-cuda-graph", action="store_true")
    add("--cuda-graph-max-bs-decode", type=int, default=None,
        help="largest decode batch run as a CUDA graph; larger ones run eager (default: SGLang's "
        "on an H200, 256, 512 from --tp-size 4, at most --max-running-requests)")
    add("--cuda-graph-max-bs-prefill", type=int, default=None,
        help="largest prefill chunk (tokens) run as a CUDA graph; larger ones run eager (unset: "
        "the twin models no prefill graphs)")
    # Disaggregation: a prefill serves its bootstrap server on the bootstrap port; a decode reaches
    # the prefill's through the bootstrap_host/port/room the router adds to every request.
    add("--disaggregation-mode", default="null", choices=DISAGGREGATION_MODES)
    add("--disaggregation-transfer-backend", default="mooncake")
    add("--disaggregation-bootstrap-port", type=int, default=8998)
    add("--disaggregation-ib-device", default=None)
    # Observability.
    add("--enable-metrics", action="store_true")
    add("--log-level", default="info")
    add("--log-level-http", default=None)


def _add_twin_flags(parser: argparse.ArgumentParser) -> None:
    twin = parser.add_argument_group(
        "twin-only flags",
        "Time model: a request costs --twin-latency-ms (per role it passes) plus prefill "
        "(per new prompt token; HiCache-hit tokens cost --twin-hicache-hit-cost of that; a "
        "scheduler step per further chunk) plus decode (per output token, x(1 + slowdown x "
        "(running - 1)), x eager slowdown without CUDA graphs or above "
        "--cuda-graph-max-bs-decode, x tokens held / KV pool above the pool, plus the prefill "
        "chunk sharing the step); +-10%% seeded jitter (experiments/twin/README.md).",
    )
    add = twin.add_argument
    add("--fault-model", default=None, metavar="PATH",
        help=f"fault model YAML (default: ${FAULT_MODEL_ENV})")
    add("--twin-seed", type=int, default=0,
        help="combined with the fault model's seed in every draw")
    add("--twin-startup-delay", type=float, default=1.0, metavar="SECONDS",
        help="/health answers 503 until this has passed")
    add("--twin-latency-ms", type=float, default=20.0,
        help="fixed service time per chat request and role (scheduling, tokenizing)")
    add("--twin-prefill-us-per-token", type=float, default=5.0, metavar="US",
        help="prefill time per new prompt token, microseconds")
    add("--twin-decode-ms-per-token", type=float, default=0.5, metavar="MS",
        help="decode time per output token with one running request, milliseconds")
    add("--twin-decode-batch-slowdown", type=float, default=0.005, metavar="FRACTION",
        help="extra decode time per token for each further running request")
    add("--twin-eager-slowdown", type=float, default=1.6, metavar="FACTOR",
        help="decode time factor with --disable-cuda-graph or --disable-decode-cuda-graph")
    add("--twin-hicache-hit-cost", type=float, default=0.1, metavar="FRACTION",
        help="cost of a HiCache-hit prompt token relative to a computed one")
    add("--twin-chunk-step-ms", type=float, default=5.0, metavar="MS",
        help="with --chunked-prefill-size: the scheduler step each further chunk of a prompt "
        "waits for")
    add("--twin-mixed-us-per-token", type=float, default=0.05, metavar="US",
        help="with --chunked-prefill-size: extra decode step time per prefill-chunk token "
        "sharing the step, microseconds")
    add("--twin-wedge-s", type=float, default=300.0, metavar="SECONDS",
        help="how long a wedged request hangs before it is aborted")
    add("--twin-tree", default=None, metavar="DIR",
        help="the tree whose files fault rules name (when.files), read at start (default: "
        "the fault model file's directory)")
    add("--engine", choices=ENGINES, default="planted",
        help="what corrupts index-K reads: planted (the fault model, default), gpu (a real "
        "CUDA race; needs torch with CUDA), cpu-standin (tests only); see engine.py")
    add("--schema", action="store_true", help="print the fault model's JSON Schema and exit")


def flag_key(name: str) -> str:
    """A flag's name as fault conditions and server info name it: no dashes in front,
    ``-`` for ``_`` (``--enable_hicache`` -> ``enable-hicache``)."""
    return name.lstrip("-").replace("_", "-")


@dataclass(frozen=True)
class ForkFlag:
    """A flag of the fork the twin plays: a switch, or a flag taking one value."""

    name: str  # with its dashes: --bf16-index-k
    metavar: str | None = None  # None: a switch (store_true)


class ForkFlagError(ValueError):
    """A bad ``$BISECT_TWIN_FORK_FLAGS``; the message is one line for the user."""


def fork_flags(env: Mapping[str, str]) -> list[ForkFlag]:
    """The fork flags ``$BISECT_TWIN_FORK_FLAGS`` declares (none when unset)."""
    entries = re.split(r"[\s,]+", env.get(FORK_FLAGS_ENV, "").strip())
    entries = [entry for entry in entries if entry]
    if len(entries) > MAX_FORK_FLAGS:
        raise ForkFlagError(f"${FORK_FLAGS_ENV}: {len(entries)} flags, at most "
                            f"{MAX_FORK_FLAGS}")
    known = {flag_key(opt) for action in build_parser()._actions
             for opt in action.option_strings} | {"router"}  # `--router` is read before parsing
    declared: list[ForkFlag] = []
    for entry in entries:
        found = _FORK_FLAG.match(entry)
        if not found:
            raise ForkFlagError(
                f"${FORK_FLAGS_ENV}: {entry[:80]!r} is not a flag: write --name for a switch, "
                "--name=METAVAR for a flag with a value, separated by spaces or commas")
        flag = ForkFlag(found[1], found[2])
        if flag_key(flag.name) in known:
            raise ForkFlagError(f"${FORK_FLAGS_ENV}: {flag.name} is already a flag of the twin "
                                "(an SGLang flag or a twin-only one), or declared twice")
        known.add(flag_key(flag.name))
        declared.append(flag)
    return declared


def build_parser(forks: Sequence[ForkFlag] = ()) -> argparse.ArgumentParser:
    # No abbreviations: a prefix unique among the twin's few flags may be ambiguous among
    # SGLang's (`--cuda-graph-max-bs`), so the twin takes only whole flag names.
    parser = argparse.ArgumentParser(
        prog="python -m experiments.twin", allow_abbrev=False,
        description="A simulated SGLang server for bisect: one combined server, or the prefill "
        "or decode role of a disaggregated pool (--disaggregation-mode). The PD router is "
        "`python -m experiments.twin.router` (or `python -m experiments.twin --router ...`).",
    )
    _add_sglang_flags(parser.add_argument)
    _add_twin_flags(parser)
    if forks:
        group = parser.add_argument_group(
            "fork flags", f"The fork's own flags, declared by ${FORK_FLAGS_ENV}; fault rules "
            "name them like SGLang's.")
        for flag in forks:
            dest = "fork_" + flag_key(flag.name).replace("-", "_")  # never an SGLang dest
            if flag.metavar is None:
                group.add_argument(flag.name, action="store_true", dest=dest,
                                   help="a switch of the fork")
            else:
                group.add_argument(flag.name, default=None, metavar=flag.metavar, dest=dest,
                                   help="a flag of the fork")
    return parser


def flag_values(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> dict[str, Any]:
    """Parsed values keyed by long flag name without dashes (``enable-hierarchical-cache``)."""
    values: dict[str, Any] = {}
    for action in parser._actions:
        longs = [opt for opt in action.option_strings if opt.startswith("--")]
        if not longs or action.dest in ("help", "schema"):
            continue
        values[flag_key(longs[0])] = getattr(ns, action.dest)
    return values


def server_args(ns: argparse.Namespace) -> dict[str, Any]:
    """The SGLang ``ServerArgs`` part of the namespace (twin-only flags left out; a fork's
    flags in, under their own names, as a fork's ServerArgs has them)."""
    return {key.removeprefix("fork_"): value for key, value in vars(ns).items()
            if key not in TWIN_ONLY and key not in SECRET_ARGS}


def server_args_repr(ns: argparse.Namespace) -> str:
    inner = ", ".join(f"{key}={value!r}" for key, value in server_args(ns).items())
    return f"ServerArgs({inner})"


def apply_role(ns: argparse.Namespace) -> None:
    """What SGLang's ServerArgs forces for a disaggregation role (and reports in server info)."""
    if ns.disaggregation_mode == "prefill":
        ns.disable_cuda_graph = True
    elif ns.disaggregation_mode == "decode":
        ns.disable_radix_cache = True


def eager_decode(ns: argparse.Namespace) -> bool:
    """Decode runs without CUDA graphs: disabled by flag, or a prefill server (never captures)."""
    return bool(ns.disable_cuda_graph or ns.disable_decode_cuda_graph)
