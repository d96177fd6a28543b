"""YAML loading that remembers where every value came from and rejects duplicate keys.

Bad input must be reported with a file and a line; PyYAML alone forgets lines after
construction and silently keeps the last of two duplicate keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

Path_ = tuple[str | int, ...]


class YamlInputError(ValueError):
    """A YAML document that cannot be read; the message names the file and line."""


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: `on`, `off`, `yes`, `no` stay strings (level names)."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


@dataclass
class LoadedYaml:
    data: Any
    source: str
    lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int | None:
        """The line of the deepest prefix of ``path`` that the document has."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def where(self, path: Path_) -> str:
        line = self.line_of(path)
        return f"{self.source}:{line}" if line is not None else self.source


def _walk(
    node: yaml.Node, path: Path_, lines: dict[Path_, int], source: str, seen_nodes: set[int]
) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if id(node) in seen_nodes:  # an alias of a node walked already (possibly of itself)
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise YamlInputError(
                    f"{source}:{line}: duplicate key '{key}' at {dotted(path) or 'top level'} "
                    f"(first on line {seen[key]})"
                )
            seen[key] = line
            lines[(*path, key)] = line
            _walk(value_node, (*path, key), lines, source, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, source, seen_nodes)


def dotted(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_yaml(text: str, source: str) -> LoadedYaml:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return LoadedYaml(data=None, source=source)
        lines: dict[Path_, int] = {}
        _walk(node, (), lines, source, set())
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise YamlInputError(f"{source}{line}: YAML syntax error: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise YamlInputError(f"{source}: YAML error: {exc}") from None
    finally:
        loader.dispose()
    return LoadedYaml(data=data, source=source, lines=lines)
