"""``python -m experiments.twin``: parse SGLang-like flags, load the fault model, serve.

``python -m experiments.twin --router ...`` runs the PD router instead (same as
``python -m experiments.twin.router ...``; see router.py).

Exit codes: 0 after SIGTERM/SIGINT (or --help, --schema), 1 when the server cannot start (port in
use), 2 for bad input (unknown flag, bad fault model file), with one line on stderr.

Only argparse is imported before the flags are parsed: ``--help`` and a bad flag (the preflight
checks every start command with ``--help``) load no pydantic, asyncio or aiohttp; the start
itself is launch.py.
"""

from __future__ import annotations

import json
import os
import sys

from experiments.twin.args import ForkFlagError, build_parser, fork_flags


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--router"]:
        from experiments.twin.router import main as router_main

        return router_main(args[1:])
    try:
        parser = build_parser(fork_flags(os.environ))
    except ForkFlagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:  # argparse: --help (0) or a bad flag (2, message already printed)
        return int(exc.code or 0)
    if ns.schema:
        from experiments.twin.faults import schema

        print(json.dumps(schema(), indent=2))
        return 0
    from experiments.twin.launch import launch

    return launch(parser, ns)
