"""The `bisect` command line: each command parses, calls one function, prints.

Commands live by subject (campaigns, tools, lab) and register themselves on the one Typer app.
"""

from orchestrator.cli import campaigns, doctor, lab, tools  # noqa: F401 - registers the commands
from orchestrator.cli.common import app, main

__all__ = ["app", "main"]
