"""The local transport: commands on this machine, through the interface SSH uses."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from deploy.transports.base import CommandResult, TransportError, refuse_unsendable


class LocalTransport:
    def __init__(self, node: str = "local") -> None:
        self.node = node

    def run(self, argv: Sequence[str], *, timeout_s: float = 60.0) -> CommandResult:
        args = tuple(argv)
        refuse_unsendable(self.node, args)
        try:
            done = subprocess.run(
                args, capture_output=True, text=True, errors="replace", timeout=timeout_s,
                stdin=subprocess.DEVNULL, check=False,
            )
        except subprocess.TimeoutExpired:
            raise TransportError(f"{self.node}: {args[0]} timed out after {timeout_s:g}s") from None
        except OSError as exc:
            raise TransportError(f"{self.node}: cannot run {args[0]}: {exc.strerror}") from None
        return CommandResult(args, done.returncode, done.stdout, done.stderr)

    def close(self) -> None:
        """Nothing to release: every command is its own process."""
