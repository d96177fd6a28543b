"""Statements of a Python source found by their first lines and parsed alone.

The narrow import of SGLang's detectors (sglang_narrow.py) needs eight statements of the
2,500-line ``protocol.py``, and triage's parser table (triage_sglang.py) one assignment of
``function_call_parser.py`` and its imports: parsing the two files whole took ~25 ms of the
~35 ms a leaked response's triage adds to `bisect classify`'s start (issue 31). A statement
runs from its first line to the next line that begins at its column or left of it (a closing
bracket there still belongs to it), and the statements asked for must parse as that many of
the kind asked. A string or a bracket that reaches that column cuts one short, and then they
do not: None, and the caller parses the whole file as before.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import TypeVar

Statement = TypeVar("Statement", bound=ast.stmt)


def statements(source: str, starts: Sequence[int], kind: type[Statement]
               ) -> list[Statement] | None:
    """The statements of ``kind`` whose first lines begin at offsets ``starts`` of ``source``
    (line numbers and columns as in ``source``), or None when the lines from there are not
    that many, or one may be decorated (its decorators are part of it)."""
    texts, wrapped = [], []
    for start in starts:
        if _decorated(source, start):
            return None
        text = source[start:end(source, start)].rstrip("\n") + "\n"
        wrapped.append(text[0] in " \t")  # indented: the body of an `if` of its own
        texts.append(f"if 1:\n{text}" if wrapped[-1] else text)
    try:
        tree = ast.parse("".join(texts))  # at once: one parse costs more than its lines
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != len(starts):
        return None
    found: list[Statement] = []
    at = 0  # lines before this statement's text
    for node, text, inner, start in zip(tree.body, texts, wrapped, starts, strict=True):
        if inner:
            if not isinstance(node, ast.If) or len(node.body) != 1:
                return None
            node = node.body[0]
        if not isinstance(node, kind):
            return None
        ast.increment_lineno(node, source.count("\n", 0, start) - at - inner)
        found.append(node)
        at += text.count("\n")
    return found


def end(source: str, start: int) -> int:
    """Where the lines of the statement whose first line begins at ``start`` end: at the next
    line at its column or left of it, not blank, a comment or a closing bracket."""
    first_end = source.find("\n", start)
    if first_end < 0:
        return len(source)
    indent = first_end - start - len(source[start:first_end].lstrip(" "))
    found = re.compile(rf"\n(?=[ ]{{0,{indent}}}[^\s#)\]}}])").search(source, first_end)
    return found.start() + 1 if found else len(source)


def _decorated(source: str, start: int) -> bool:
    """Whether the line above ``start`` (blank lines and comments passed over) is a decorator."""
    end = start - 1  # the newline that ends the line above
    while end > 0:
        begin = source.rfind("\n", 0, end) + 1
        line = source[begin:end].strip()
        if line and not line.startswith("#"):
            return line.startswith("@")
        end = begin - 1
    return False


def line_starts(source: str, pattern: str) -> list[int]:
    """The offsets of the lines of ``source`` that begin with ``pattern`` (a regex)."""
    # A newline, then the pattern: the regex engine looks for its literal start, where `^` in
    # MULTILINE mode tries every offset (~1.5 ms for 100 kB). Offsets in "\n" + source are
    # line starts in source.
    return [match.start() for match in re.finditer(rf"\n{pattern}", "\n" + source)]
