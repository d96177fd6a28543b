"""The twin's command line: SGLang's ``launch_server`` flags (a subset) plus twin-only flags.

Flag names follow ``python -m sglang.launch_server --help`` so the deploy layer renders one
command line for real nodes and twins alike; unknown flags fail like SGLang's (argparse, exit 2).
"""

from __future__ import annotations

import argparse
from typing import Any

TOOL_CALL_PARSERS = ("deepseekv3", "deepseekv31", "deepseekv32", "deepseekv4")
FAULT_MODEL_ENV = "BISECT_TWIN_FAULT_MODEL"
# Destinations that SGLang's ServerArgs does not have: kept out of the `server_args=` log line.
TWIN_ONLY = frozenset(
    {"fault_model", "twin_seed", "twin_startup_delay", "twin_latency_ms", "twin_wedge_s", "schema"}
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.twin",
        description="A simulated SGLang server (one combined role) for bisect.",
    )
    add = parser.add_argument
    # Model and serving.
    add("--model-path", default="deepseek-ai/DeepSeek-V4-twin")
    add("--served-model-name", default=None)
    add("--tokenizer-path", default=None)
    add("--trust-remote-code", action="store_true")
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--tp-size", "--tp", type=int, default=1, dest="tp_size")
    add("--dp-size", "--dp", type=int, default=1, dest="dp_size")
    add("--ep-size", "--ep", type=int, default=1, dest="ep_size")
    add("--enable-dp-attention", action="store_true")
    add("--tool-call-parser", choices=TOOL_CALL_PARSERS, default="deepseekv32")
    add("--reasoning-parser", default=None)
    add("--attention-backend", default=None)
    add("--kv-cache-dtype", default="auto")
    add("--page-size", type=int, default=None)
    # Memory and scheduling.
    add("--mem-fraction-static", type=float, default=None)
    add("--context-length", type=int, default=None)
    add("--max-running-requests", type=int, default=None)
    add("--chunked-prefill-size", type=int, default=None)
    # HiCache.
    add("--enable-hierarchical-cache", action="store_true")
    add("--hicache-ratio", type=float, default=2.0)
    add("--hicache-size", type=int, default=0, help="host memory for HiCache in GB (0: use ratio)")
    add("--hicache-write-policy", default="write_through",
        choices=("write_back", "write_through", "write_through_selective"))
    add("--hicache-io-backend", default="kernel", choices=("direct", "kernel"))
    add("--hicache-mem-layout", default="layer_first")
    add("--hicache-storage-backend", default=None)
    # CUDA graphs.
    add("--disable-cuda-graph", action="store_true")
    add("--disable-decode-cuda-graph", action="store_true")
    add("--cuda-graph-max-bs", type=int, default=None)
    # Disaggregation (only "null" is simulated in this first cut).
    add("--disaggregation-mode", default="null", choices=("null", "prefill", "decode"))
    add("--disaggregation-transfer-backend", default="mooncake")
    add("--disaggregation-bootstrap-port", type=int, default=8998)
    add("--disaggregation-ib-device", default=None)
    # Observability.
    add("--enable-metrics", action="store_true")
    add("--log-level", default="info")
    add("--log-level-http", default=None)
    # Twin-only.
    twin = parser.add_argument_group("twin-only flags")
    twin.add_argument("--fault-model", default=None, metavar="PATH",
                      help=f"fault model YAML (default: ${FAULT_MODEL_ENV})")
    twin.add_argument("--twin-seed", type=int, default=0,
                      help="combined with the fault model's seed in every draw")
    twin.add_argument("--twin-startup-delay", type=float, default=1.0, metavar="SECONDS",
                      help="/health answers 503 until this has passed")
    twin.add_argument("--twin-latency-ms", type=float, default=20.0,
                      help="service time per chat request (seeded jitter of +-10%%)")
    twin.add_argument("--twin-wedge-s", type=float, default=300.0, metavar="SECONDS",
                      help="how long a wedged request hangs before it is aborted")
    twin.add_argument("--schema", action="store_true",
                      help="print the fault model's JSON Schema and exit")
    return parser


def flag_values(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> dict[str, Any]:
    """Parsed values keyed by long flag name without dashes (``enable-hierarchical-cache``)."""
    values: dict[str, Any] = {}
    for action in parser._actions:
        longs = [opt for opt in action.option_strings if opt.startswith("--")]
        if not longs or action.dest in ("help", "schema"):
            continue
        values[longs[0][2:]] = getattr(ns, action.dest)
    return values


def server_args(ns: argparse.Namespace) -> dict[str, Any]:
    """The SGLang ``ServerArgs`` part of the namespace (twin-only flags left out)."""
    return {key: value for key, value in vars(ns).items() if key not in TWIN_ONLY}


def server_args_repr(ns: argparse.Namespace) -> str:
    inner = ", ".join(f"{key}={value!r}" for key, value in server_args(ns).items())
    return f"ServerArgs({inner})"
