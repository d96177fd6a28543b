"""The `bisect` command line: each command parses, calls one function, prints.

Commands live by subject (running campaigns, reading them, tools, lab) and register themselves
on the one Typer app.
"""

from orchestrator.cli import (  # noqa: F401 - registers the commands
    campaigns,
    doctor,
    lab,
    optimize_view,
    reading,
    schedule_view,
    sweep_report_view,
    sweep_view,
    tools,
)
from orchestrator.cli.common import app, main

__all__ = ["app", "main"]
