"""The saved responses of one ``bisect classify`` call: files, directories, stdin, JSON Lines.

Each source gives one response, or many when it is JSON Lines (one compact response a line, as
a capture tool appends them). A source that cannot be read is one entry with its error, so one
bad file among many is named and the others are still judged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

STDIN = "-"
STDIN_NAME = "<stdin>"
_SSE_STARTS = ("data:", ":", "event:", "id:", "retry:")


@dataclass(frozen=True)
class SavedInput:
    """One response as read: ``text`` to judge, or the ``error`` that kept it from being read."""

    name: str  # the file, or <stdin>
    line: int | None  # its line in a JSON Lines source; None: the whole source
    text: str | None = None
    error: str | None = None

    @property
    def where(self) -> str:
        return self.name if self.line is None else f"{self.name}:{self.line}"


def _json_lines(text: str) -> list[tuple[int, str]] | None:
    """The non-blank lines of ``text`` by number when it is JSON Lines: more than one, and the
    first a JSON document of its own (a pretty-printed document's first line, ``{``, is not)."""
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith(_SSE_STARTS):
        return None
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if len(lines) < 2:
        return None
    try:
        json.loads(lines[0][1].lstrip("\ufeff"))
    except ValueError:
        return None
    return lines


def split_source(name: str, text: str) -> list[SavedInput]:
    """One source's responses: its lines when it is JSON Lines, else the whole text."""
    lines = _json_lines(text)
    if lines is None:
        return [SavedInput(name, None, text)]
    return [SavedInput(name, number, line) for number, line in lines]


def _files(source: str) -> list[Path] | str:
    """The files a path names (a directory: its visible files, sorted), or why there are none."""
    path = Path(source)
    if not path.is_dir():
        return [path]  # a missing file is an error when it is read, naming it
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    return files or "a directory without files"


def read_sources(sources: Sequence[str], stdin: TextIO) -> Iterator[SavedInput]:
    """Every response of ``sources`` (``-``: ``stdin``), in order, one entry each."""
    for source in sources:
        if source == STDIN:
            try:
                yield from split_source(STDIN_NAME, stdin.read())
            except (OSError, UnicodeDecodeError) as exc:
                yield SavedInput(STDIN_NAME, None, error=str(exc))
            continue
        files = _files(source)
        if isinstance(files, str):
            yield SavedInput(source, None, error=files)
            continue
        for path in files:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                yield SavedInput(str(path), None, error=str(exc))
                continue
            yield from split_source(str(path), text)
