"""What every change kind shares: the protocol, the record of an application, what it leaves for
the proof of load to check, the error, and running constant ``sh -c`` scripts with every value
passed as a positional parameter.

A change is what a level does to one node that env vars and flags cannot: a file patch, a git
checkout (a *variant*, in this project, is a combination of levels; it may carry several
changes). Its state lives on the node, under ``WORKDIR/bisect-variants/``, so a later process
(``bisect resume`` after a crash) can revert what an earlier one applied.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from deploy.transports.base import CommandResult, Transport

# Under the node's workdir: bisect-owned, never inside a tree. The name predates "change" and
# stays: nodes may carry records from older runs that `bisect resume` must still find and revert.
STATE_DIR = "bisect-variants"
_UPLOAD_CHUNK = 48 * 1024  # raw bytes per command: 64 KiB of base64, well under Linux's 128 KiB
# limit on one argv string (the SSH exec request is one such string on the node)
TAIL_CHARS = 2000


class ChangeError(RuntimeError):
    """A change could not be applied or reverted; the message names node and cause."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(f"{node}: {message}")
        self.node = node


@dataclass(frozen=True)
class Expected:
    """The state on the node that proves a change applied, for the proof of load to check:
    ``files`` path → the sha256 it must have, ``git`` (tree, commit) the tree must be at."""

    files: Mapping[str, str] = field(default_factory=dict)
    git: tuple[str, str] | None = None


def merged(expectations: Iterable[Expected]) -> Expected:
    """Several changes' expectations as one, in the order applied: a later one wins on a file
    (a patch stacked on another's changes) and on the tree."""
    files: dict[str, str] = {}
    git = None
    for expected in expectations:
        files.update(expected.files)
        git = expected.git or git
    return Expected(files, git)


@dataclass(frozen=True)
class Applied:
    """What applying a change did, as evidence for the store (``as_dict``) and, in
    ``expected``, what the proof step must find on the node."""

    kind: str  # patch | git
    node: str
    fingerprint: str
    detail: Mapping[str, Any] = field(default_factory=dict)  # JSON-able
    expected: Expected = field(default_factory=Expected)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "node": self.node, "fingerprint": self.fingerprint,
                "detail": dict(self.detail)}


class Change(Protocol):
    """One change to one node. ``revert`` is a no-op when the node carries no record of it, so
    reverting every change a campaign could have applied is a safe way to restore a node."""

    @property
    def kind(self) -> str: ...  # patch | git: names it in the store, never switched on

    @property
    def fingerprint(self) -> str: ...

    @property
    def stack_order(self) -> int: ...  # lower goes on first (a checkout before the patches)

    # The git tree whose HEAD it moves, or None. One record per tree: a change of a tree applies
    # over another change of the same tree directly, keeping the original to revert to.
    @property
    def tree(self) -> str | None: ...

    def apply(self, transport: Transport) -> Applied: ...

    def revert(self, transport: Transport) -> bool: ...  # True: something was undone


def digest(*parts: str | bytes) -> str:
    """sha256 over the parts, separated so that ("ab", "c") and ("a", "bc") differ."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def state_path(workdir: str, name: str) -> str:
    return f"{workdir.rstrip('/') or '/'}/{STATE_DIR}/{name}"


def run_sh(transport: Transport, script: str, args: Sequence[str] = (),
           timeout_s: float = 60.0) -> CommandResult:
    """Run a constant script; values arrive as "$1"... so no value is ever parsed as shell."""
    return transport.run(["sh", "-c", script, "sh", *args], timeout_s=timeout_s)


def tail(text: str, chars: int = TAIL_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= chars else "…" + text[-chars:]


def upload(transport: Transport, path: str, data: bytes, timeout_s: float = 60.0) -> None:
    """Write ``data`` to ``path`` on the node. Transports have no stdin, so it travels as base64
    in arguments, chunked to fit one argv string."""
    chunks = [data[i:i + _UPLOAD_CHUNK] for i in range(0, len(data), _UPLOAD_CHUNK)] or [b""]
    for index, chunk in enumerate(chunks):
        mode = "new" if index == 0 else "append"
        result = run_sh(
            transport,
            'if [ "$3" = new ]; then (umask 077 && mkdir -p -- "$(dirname -- "$1")" && : > "$1")'
            ' || exit 1; fi; '
            'printf %s "$2" | base64 -d >> "$1"',
            [path, base64.b64encode(chunk).decode(), mode], timeout_s)
        if not result.ok:
            raise ChangeError(transport.node, f"cannot write {path}: {tail(result.stderr, 300)}")


def payload(transport: Transport, path: str, data: bytes) -> str:
    """``data`` as one base64 argument of the script that uses it (no extra round trip), or,
    when too large for one argument, uploaded to ``path`` first and "-" in its place."""
    if len(data) <= _UPLOAD_CHUNK:
        return base64.b64encode(data).decode()
    upload(transport, path, data)
    return "-"
