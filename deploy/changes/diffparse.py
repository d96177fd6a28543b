"""Which files a unified diff touches, read the way GNU patch reads its headers.

The patch change needs the list before it runs ``patch``: to checksum and back up every target,
to stage copies, and to refuse paths that would escape the root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["M", "C", "D"]  # modified, created, deleted
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_EPOCH = ("1970-01-01 00:00:00", "Thu Jan  1 00:00:00 1970")
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


class DiffError(ValueError):
    pass


@dataclass(frozen=True)
class Target:
    path: str  # relative to the patch root, after stripping
    kind: Kind


def _unquote(text: str) -> str:
    """A C-quoted name as diff and git write them ("a/with space\\tand\\303\\251")."""
    out, i = bytearray(), 1
    while i < len(text):
        char = text[i]
        if char == '"':
            return out.decode("utf-8", errors="surrogateescape")
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in "01234567":
                out.append(int(text[i + 1:i + 4], 8) & 0xFF)
                i += 4
                continue
            out.append(_ESCAPES.get(nxt, ord(nxt)))
            i += 2
            continue
        out += char.encode()
        i += 1
    raise DiffError(f"unterminated quoted file name: {text!r}")


def _name(rest: str) -> str:
    if rest.startswith('"'):
        return _unquote(rest)
    if "\t" not in rest:
        return rest.rstrip()
    name, stamp = rest.split("\t", 1)
    # `diff -N` marks a created or deleted file by the epoch, not by /dev/null; patch agrees.
    return "/dev/null" if stamp.startswith(_EPOCH) else name


def _strip(name: str, strip: int) -> str:
    parts = name.split("/")
    if len(parts) <= strip:
        raise DiffError(f"cannot strip {strip} components from {name!r}")
    path = "/".join(parts[strip:])
    pieces = path.split("/")
    if (name.startswith("/") and strip == 0) or ".." in pieces or not path:
        raise DiffError(f"{name!r} leaves the patch root")
    if any(c in path for c in "\n\0"):
        raise DiffError(f"unsupported file name {name!r}")
    return "/".join(p for p in pieces if p not in ("", "."))


def targets(diff: str, strip: int = 1) -> list[Target]:
    """Every file the diff touches, in order. Renames and duplicates are refused: the backup and
    checksum bookkeeping is per path, and patch's rename support is partial anyway."""
    lines = diff.splitlines()
    found: list[Target] = []
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines)
                and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        old, new = _name(lines[i][4:]), _name(lines[i + 1][4:])
        if old == "/dev/null" and new == "/dev/null":
            raise DiffError("a file diff from /dev/null to /dev/null")
        if old == "/dev/null":
            target = Target(_strip(new, strip), "C")
        elif new == "/dev/null":
            target = Target(_strip(old, strip), "D")
        else:
            target = Target(_strip(new, strip), "M")
            if _strip(old, strip) != target.path:
                raise DiffError(f"renames are not supported: {old!r} -> {new!r}")
        if any(t.path == target.path for t in found):
            raise DiffError(f"{target.path!r} appears twice in the diff")
        found.append(target)
        i = _skip_hunks(lines, i + 2)
    if not found:
        raise DiffError("no file headers (--- / +++) found: not a unified diff")
    return found


def _skip_hunks(lines: list[str], i: int) -> int:
    """Past the hunks of one file, counting their lines, so a removed line that reads
    ``-- x`` is never taken for the next file's header."""
    while i < len(lines):
        match = _HUNK.match(lines[i])
        if not match:
            return i
        old_left = int(match.group(1) or 1)
        new_left = int(match.group(2) or 1)
        i += 1
        while i < len(lines) and (old_left > 0 or new_left > 0):
            mark = lines[i][:1]
            if mark in (" ", ""):
                old_left, new_left = old_left - 1, new_left - 1
            elif mark == "-":
                old_left -= 1
            elif mark == "+":
                new_left -= 1
            elif mark != "\\":  # "\ No newline at end of file"
                raise DiffError(f"malformed hunk near line {i + 1}: {lines[i][:80]!r}")
            i += 1
        while i < len(lines) and lines[i].startswith("\\"):
            i += 1
    return i
