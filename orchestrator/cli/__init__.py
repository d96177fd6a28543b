"""The `bisect` command line: each command parses, calls one function, prints.

Commands live by subject (running campaigns, reading them, tools, lab) and register themselves
on the one Typer app. `bisect CMD` imports only CMD's module: Typer builds every registered
command from its signature, each parameter through a pydantic adapter, before it reads argv,
and a fast command (`classify`, `show`) would pay for all of them. ``app``, asked for by name,
has every command.
"""

from __future__ import annotations

import gc
import sys
from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

# Each top-level command and the module that registers it (tests/test_cli_basics.py checks
# this against the commands the modules register).
COMMANDS = {
    "demo": "campaigns", "run": "campaigns", "commits": "campaigns", "resume": "campaigns",
    "unlock": "campaigns", "doctor": "doctor", "lab": "lab", "optimize": "optimize_view",
    "verdict": "reading", "report": "reading", "ls": "reading", "log": "reading",
    "show": "reading", "schedule": "schedule_view", "sweep-report": "sweep_report_view",
    "sweep": "sweep_view", "stress": "tools", "validate": "tools", "classify": "classify_view",
    "schema": "tools", "twin": "tools",
}
MODULES = tuple(dict.fromkeys(COMMANDS.values()))


def load(command: str | None = None) -> typer.Typer:
    """The app with ``command``'s module registered (every module where ``command`` is None or
    not one of ``COMMANDS``: `bisect --help`, a misspelt command and its suggestions)."""
    module = COMMANDS.get(command or "")
    for name in MODULES if module is None else (module,):
        import_module(f"orchestrator.cli.{name}")
    from orchestrator.cli.common import app
    return app


def main() -> None:
    # The command's modules live as long as the process: a collection while they are imported
    # walks them and frees nothing (~4 ms of `bisect classify`'s start).
    gc.disable()
    try:
        load(sys.argv[1] if len(sys.argv) > 1 else None)
        from orchestrator.cli.common import main as run
    finally:
        gc.enable()
    run()


def __getattr__(name: str) -> typer.Typer:
    if name == "app":
        return load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]
