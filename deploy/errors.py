"""Failures of what a node is set up with: bad input, never retried."""

from __future__ import annotations


class SetupError(RuntimeError):
    """What the node is set up with stops the campaign, whatever the variant: the unit is not
    installed, ``systemctl start`` fails before the variant's command runs (an ``ExecStartPre=``,
    a ``User=``, a ``WorkingDirectory=``), the command cannot be executed there, or another
    process holds the port the server is to listen on (deploy/listeners.py). Not the way to
    the node (a retry cannot help: never a TransportError) and not the variant (every variant
    would fail the same way): the run stops at once, as bad input, naming node and unit."""

    def __init__(self, message: str, node: str | None = None, unit: str | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.unit = unit
