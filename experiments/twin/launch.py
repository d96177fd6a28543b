"""The twin's start once its flags are parsed (cli.py): the fault model, the files of the tree
its rules name, the env it reads, the engine's settings; then serve until SIGTERM or SIGINT.

Apart from cli.py so that ``--help`` and a bad flag import none of this (asyncio, aiohttp,
pydantic, the fault model).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import time

from experiments.twin import engine, faults, logs, tree, variation
from experiments.twin.args import (
    FAULT_MODEL_ENV,
    FORK_FLAGS_ENV,
    apply_role,
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
    FORK_FLAGS_ENV,
    variation.NODE_ENV,
)


def _read_env(model: faults.FaultModel) -> dict[str, str]:
    names = set(READ_ENV) | faults.env_names(model)
    names |= {name for name in os.environ if name.startswith("SGLANG_")}
    return {name: os.environ[name] for name in sorted(names) if name in os.environ}


def launch(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> int:
    """Start the twin ``parser`` parsed ``ns`` for; the exit code (cli.py's)."""
    path = ns.fault_model or os.environ.get(FAULT_MODEL_ENV) or None
    for line in logs.role_lines(ns.disaggregation_mode):
        print(line, flush=True)  # SGLang warns before logging is configured: a bare line
    apply_role(ns)
    flags = flag_values(parser, ns)
    try:
        model = faults.load(path) if path else faults.FaultModel()
        unknown = faults.unknown_flags(model, set(flags))
        if unknown:
            raise faults.FaultModelError(
                f"fault model {path}, field {unknown[0]}: the twin accepts no such flag (a "
                f"fork's own flag must be declared in ${FORK_FLAGS_ENV})"
            )
        root = tree.tree_root(ns.twin_tree, path)
        files = tree.read_tree(model, root, path)
    except faults.FaultModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = _read_env(model)
    if ns.engine != "planted":  # a bad engine setting is refused at start, not on each request
        try:
            engine.settings(ns.engine, env, root)
        except engine.EngineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if ns.engine == "gpu" and importlib.util.find_spec("torch") is None:
            print("error: --engine gpu needs torch with CUDA (pip install torch)",
                  file=sys.stderr)
            return 2
    # This start's draw of the noise between trials (none without `noise:` restart, node or
    # drift: every start alike, as the twin always was).
    drawn = variation.start(model.noise, twin_seed=ns.twin_seed,
                            node=variation.node_name(os.environ))
    config = TwinConfig(ns=ns, flags=flags, env=env, faults=model, fault_model_path=path,
                        capacity=logs.capacity(ns, env), files=files,
                        tree=str(root) if root and files else None, variation=drawn)
    logs.log(f"server_args={server_args_repr(ns)}")
    if drawn is not None:
        logs.log(drawn.log_line(time.time()))
    for name, facts in files.items():  # what the file conditions will see, for the reader
        logs.log(f"Twin tree {root}: {name} "
                 + (f"sha256={facts.sha256}" if facts.sha256 else "absent"))
    try:
        asyncio.run(serve(config))
    except OSError as exc:  # typically the port is taken
        ports = f"{ns.port}" + (f" (bootstrap {ns.disaggregation_bootstrap_port})"
                                if ns.disaggregation_mode == "prefill" else "")
        print(f"error: cannot serve on {ns.host}:{ports}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    return 0
