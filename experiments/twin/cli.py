"""``python -m experiments.twin``: parse SGLang-like flags, load the fault model, serve.

Exit codes: 0 after SIGTERM/SIGINT (or --help, --schema), 1 when the server cannot start (port in
use), 2 for bad input (unknown flag, bad fault model file), with one line on stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from experiments.twin import faults, logs
from experiments.twin.args import (
    FAULT_MODEL_ENV,
    build_parser,
    flag_values,
    server_args_repr,
)
from experiments.twin.server import TwinConfig, serve

# Env vars with a meaning on real nodes; reported by /get_server_info, matched by fault rules.
READ_ENV = (
    "BF16_INDEX_K",
    "SGLANG_OPT_USE_TOPK_V2",
    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT",
    "SGLANG_DISAGGREGATION_WAITING_TIMEOUT",
    FAULT_MODEL_ENV,
)


def _read_env(model: faults.FaultModel) -> dict[str, str]:
    names = set(READ_ENV) | faults.env_names(model)
    names |= {name for name in os.environ if name.startswith("SGLANG_")}
    return {name: os.environ[name] for name in sorted(names) if name in os.environ}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad flag (2, message already printed)
        return int(exc.code or 0)
    if ns.schema:
        print(json.dumps(faults.schema(), indent=2))
        return 0
    path = ns.fault_model or os.environ.get(FAULT_MODEL_ENV) or None
    flags = flag_values(parser, ns)
    try:
        model = faults.load(path) if path else faults.FaultModel()
        unknown = faults.unknown_flags(model, set(flags))
        if unknown:
            raise faults.FaultModelError(
                f"fault model {path}, field {unknown[0]}: the twin accepts no such flag"
            )
    except faults.FaultModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = _read_env(model)
    config = TwinConfig(ns=ns, flags=flags, env=env, faults=model, fault_model_path=path,
                        capacity=logs.capacity(ns, env))
    logs.log(f"server_args={server_args_repr(ns)}")
    if ns.disaggregation_mode != "null":
        logs.log(f"twin: disaggregation mode {ns.disaggregation_mode!r} is served as a combined "
                 "server in this version")
    try:
        asyncio.run(serve(config))
    except OSError as exc:  # typically the port is taken
        print(f"error: cannot serve on {ns.host}:{ns.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    return 0
