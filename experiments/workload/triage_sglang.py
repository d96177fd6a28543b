"""SGLang's side of leak triage: its ``--tool-call-parser`` names, their detectors, one parse.

Which detector class a ``--tool-call-parser`` name runs is SGLang's own table,
``FunctionCallParser.ToolCallParserEnum``. Its module imports xgrammar and transformers (seconds,
and not in the ``sglang`` extra), so the table is read from that module's source, not imported;
the detectors triage uses are then imported one by one, without the torch and openai that their
package and protocol module would pull (``sglang_narrow.py``). Nothing here raises for a missing
or broken sglang: ``load()`` says why instead.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.workload.source_lines import end, line_starts, statements

TABLE_MODULE = "sglang/srt/function_call/function_call_parser.py"
TABLE_CLASS, TABLE_NAME = "FunctionCallParser", "ToolCallParserEnum"
# The detectors triage asks: the DeepSeek ones (what FACTS.md's models emit) and hermes (the
# generic <tool_call>). Any other parser a server runs is not judged against (``known``).
GENERIC = ("hermes",)

Calls = list[dict[str, Any]]


def _source_root() -> Path | None:
    """Where the sglang package lies, found without importing it (a broken one raises)."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _table(item: ast.stmt) -> ast.Dict | None:
    """The dict ``item`` assigns, when it is ``TABLE_NAME = {...}``."""
    target = item.target if isinstance(item, ast.AnnAssign) else (
        item.targets[0] if isinstance(item, ast.Assign) else None)
    value = item.value if isinstance(item, ast.AnnAssign | ast.Assign) else None
    found = isinstance(target, ast.Name) and target.id == TABLE_NAME
    return value if found and isinstance(value, ast.Dict) else None


def _by_lines(source: str) -> tuple[dict[str, str], ast.Dict] | None:
    """The table module's imports (name -> module) and its table, found by their lines
    (source_lines.py); None where that is not sure: the class or the table named twice, a name
    imported from two modules, a statement that does not parse alone."""
    classes = line_starts(source, rf"class {TABLE_CLASS}\b")
    if len(classes) != 1:
        return None
    start = classes[0]
    tables = line_starts(source[start:end(source, start)], rf"    {TABLE_NAME}\b")
    items = statements(source, [start + tables[0]], ast.stmt) if len(tables) == 1 else None
    table = _table(items[0]) if items else None
    imports = statements(source, line_starts(source, r"[ \t]*from [\w.]+ import\b"),
                         ast.ImportFrom) if table else None
    if table is None or imports is None:
        return None
    modules: dict[str, str] = {}
    for node in imports:
        module = node.module or ""  # `from . import x`: no module, nothing mapped
        for alias in node.names if module else ():
            name = alias.asname or alias.name
            if modules.setdefault(name, module) != module:
                return None
    return modules, table


def _by_parse(source: str) -> tuple[dict[str, str], ast.Dict] | None:
    """The same, from the whole file parsed (ValueError or SyntaxError when it does not)."""
    tree = ast.parse(source)
    modules = {alias.asname or alias.name: node.module
               for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
               for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == TABLE_CLASS:
            for item in node.body:
                table = _table(item)
                if table is not None:
                    return modules, table
    return None


@functools.cache
def parser_table() -> dict[str, tuple[str, str]]:
    """``--tool-call-parser`` name -> (module, class), as ToolCallParserEnum maps them; {} when
    sglang is absent or its table cannot be read."""
    root = _source_root()
    try:
        source = (root.parent / TABLE_MODULE).read_text(encoding="utf-8") if root else ""
        found = (_by_lines(source) or _by_parse(source)) if source else None
    except (OSError, SyntaxError, ValueError):
        found = None
    if found is None:
        return {}
    modules, value = found
    return {key.value: (modules[cls.id], cls.id)
            for key, cls in zip(value.keys, value.values, strict=True)
            if isinstance(key, ast.Constant) and isinstance(key.value, str)
            and isinstance(cls, ast.Name) and cls.id in modules}


def triage_parsers(table: dict[str, tuple[str, str]]) -> tuple[str, ...]:
    """The names triage tries, in the table's order: every DeepSeek detector, then hermes."""
    deepseek = [name for name, (module, _) in table.items()
                if module.rsplit(".", 1)[-1].startswith("deepseek")]
    return (*deepseek, *(name for name in GENERIC if name in table))


@dataclass(frozen=True)
class Loaded:
    """One import of SGLang's detectors: their classes by parser name, or why there are none."""

    detectors: dict[str, type] | None
    error: str | None
    tool: type | None = None  # SGLang's request model of a tool, which the detectors take

    def parse(self, names: list[str], text: str, tools: list[dict[str, Any]]
              ) -> dict[str, Calls]:
        """What each named detector's one-shot ``detect_and_parse`` recovers from ``text``."""
        assert self.detectors is not None and self.tool is not None
        tool_model: Any = self.tool
        sgl_tools = [tool_model.model_validate(tool) for tool in tools]  # once for every one
        found: dict[str, Calls] = {}
        for name in names:
            result = self.detectors[name]().detect_and_parse(text, sgl_tools)  # fresh: stateful
            found[name] = [{"name": call.name, "arguments": json.loads(call.parameters or "{}")}
                           for call in result.calls]
        return found


_loading = threading.Lock()


def load() -> Loaded:
    """SGLang's detectors, imported once: a second thread asking meanwhile (a pool actor's
    warm-up beside its first leak) waits for the first import instead of starting its own."""
    with _loading:
        return _load()


@functools.cache
def _load() -> Loaded:
    """Import the detectors of ``triage_parsers`` once, without torch. Any failure (absent,
    partial install, a detector that needs torch, a crash at import) is an error string naming
    the detector, never an exception."""
    table = parser_table()
    names = triage_parsers(table)
    root = _source_root()
    if not names or root is None:
        return Loaded(None, "sglang's parser table (FunctionCallParser.ToolCallParserEnum) "
                      "was not found: is sglang installed?")
    # Here, not at the top: a response without markup is judged without them
    import logging

    from experiments.workload.sglang_narrow import NarrowImportError, import_detectors

    try:
        detectors, tool = import_detectors(root, {name: table[name] for name in names})
    except NarrowImportError as exc:  # it names the detector, and what its import raised
        return Loaded(None, str(exc))
    # The detectors log every dropped invoke; a leak triage expects those, so keep them quiet.
    logging.getLogger("sglang.srt.function_call").setLevel(logging.CRITICAL)
    return Loaded(detectors, None, tool)
