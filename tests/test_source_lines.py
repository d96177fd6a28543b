"""Statements found by their lines (experiments/workload/source_lines.py) are those a parse of
the whole file finds, or none: on SGLang's own protocol module and parser table, and on sources
made to mislead a line scan."""

from __future__ import annotations

import ast

import pytest

from experiments.workload import sglang_narrow, triage_sglang
from experiments.workload.source_lines import line_starts, statements

pytestmark = pytest.mark.pure


def dumped(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=True)


def test_sglangs_protocol_classes_and_table_are_found_by_their_lines() -> None:
    root = triage_sglang._source_root()
    assert root is not None  # `make test` installs sglang
    path = root / "srt" / "entrypoints" / "openai" / "protocol.py"
    source = path.read_text(encoding="utf-8")
    found = sglang_narrow._by_lines(source)
    assert found is not None  # the quick way, not the fallback
    whole = sglang_narrow._by_parse(source, str(path))
    assert [dumped(n) for n in found[0]] == [dumped(n) for n in whole[0]]  # lines and all
    assert found[1].keys() == whole[1].keys() == set(sglang_narrow.PROTOCOL_CLASSES)
    for name, cls in found[1].items():
        assert dumped(cls) == dumped(whole[1][name]), name
    table = (root.parent / triage_sglang.TABLE_MODULE).read_text(encoding="utf-8")
    quick, parsed = triage_sglang._by_lines(table), triage_sglang._by_parse(table)
    assert quick is not None and parsed is not None
    assert quick[0] == parsed[0] and ast.dump(quick[1]) == ast.dump(parsed[1])


MISLEADING = '''\
"""A module.
class Tool(Base):
    pass
"""
from typing import (
    Any,
)
# a comment
from pydantic import BaseModel


class Function(BaseModel):
    """A docstring
at column 0"""
    name: str


@decorated
class Tool(BaseModel):
    x: int


class ToolChoice(BaseModel):
    a: int
# a comment in its body
    b: int = (
        1
)


class Cut:
    c: int = (
1)


class ToolChoiceFuncName(BaseModel):
    name: str

    def f(self) -> None:
        from typing import Any
'''


def whole(source: str, names: tuple[str, ...]) -> dict[str, str]:
    return {node.name: dumped(node) for node in ast.parse(source).body
            if isinstance(node, ast.ClassDef) and node.name in names}


def test_statements_cut_short_or_decorated_are_none_the_rest_as_parsed() -> None:
    def found(name: str) -> list[ast.ClassDef] | None:
        return statements(MISLEADING, line_starts(MISLEADING, rf"class {name}\b"), ast.ClassDef)

    # A docstring or a bracket reaching column 0 cuts the class short; a decorator is part of
    # the class; a class named in a string as well as in code is two lines.
    assert found("Function") is None and found("Cut") is None and found("Tool") is None
    assert len(line_starts(MISLEADING, r"class Tool\b")) == 2
    assert sglang_narrow._by_lines(MISLEADING) is None  # so the whole file is parsed
    parsed = whole(MISLEADING, ("ToolChoice", "ToolChoiceFuncName"))
    for name in parsed:  # a comment at column 0 and a closing bracket there: still the class
        got = found(name)
        assert got is not None and dumped(got[0]) == parsed[name], name
    # imports: a multi-line one whose bracket closes at column 0, and an indented one
    imports = statements(MISLEADING, line_starts(MISLEADING, r"[ \t]*from \w+ import\b"),
                         ast.ImportFrom)
    assert imports is not None
    parsed_imports = [node for node in ast.walk(ast.parse(MISLEADING))
                      if isinstance(node, ast.ImportFrom)]
    assert [dumped(node) for node in imports] == [dumped(node) for node in parsed_imports]
    assert [node.lineno for node in imports] == [5, 9, 40]
    # A statement that is not the kind asked, or more than one
    assert statements(MISLEADING, [0], ast.ClassDef) is None
