"""The transport protocol: run a command on a node. SSH and local runs share it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from deploy.safe_words import word_error


class TransportError(RuntimeError):
    """The node could not be reached or the command could not be run: infrastructure, not data."""


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def check(self) -> CommandResult:
        if not self.ok:
            detail = (self.stderr or self.stdout).strip()[-500:]
            raise TransportError(f"{self.argv[0]} exited {self.returncode}: {detail}")
        return self


def refuse_unsendable(node: str, argv: Sequence[str]) -> None:
    """A NUL byte would end an argument early (on SSH: silently, on the node), and a lone
    surrogate cannot be encoded: refused before anything runs, naming the node and the word."""
    for arg in argv:
        error = word_error(arg)
        if error:
            raise ValueError(f"{node}: cannot run {argv[0]!r}: an argument {error}")


class Transport(Protocol):
    """Runs an argv (never a shell string) on one node. Values are quoted by the implementation."""

    node: str

    def run(self, argv: Sequence[str], *, timeout_s: float = 60.0) -> CommandResult: ...

    def close(self) -> None: ...
