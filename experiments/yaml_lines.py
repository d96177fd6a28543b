"""YAML loading that remembers where every value came from, rejects duplicate keys and is
bounded on hostile input.

Bad input must be reported with a file and a line; PyYAML alone forgets lines after
construction, silently keeps the last of two duplicate keys, expands aliases without a bound
(a "billion laughs"), recurses once per nesting level and raises bare Python errors on some
scalars (``!!int 0x``, a 13th month). Here the text is checked first (size, line length,
control characters), composed with caps on depth, nodes and aliases, the composed graph is
measured as it would expand (without expanding it), and only then turned into plain JSON
values (str, int, float, bool, None, list, dict): any other tag is refused with its line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

Path_ = tuple[str | int, ...]

MAX_BYTES = 1 << 20  # a campaign file is a few KiB; its largest part, an inline diff, far less
MAX_LINE_CHARS = 1 << 16
MAX_DEPTH = 64  # a campaign nests about 8 deep
MAX_ALIASES = 1_000
MAX_NODES = 20_000  # values written in the file (a campaign has hundreds; each costs ~20 us)
MAX_EXPANDED = 100_000  # values once aliases expand (an alias counts as what it stands for)
_MAX_INT_BITS = 256  # `1:2:3:...` (base 60) can build an integer too large to print

_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"
_NOT_JSON = {  # tags safe_load knows whose values have no JSON form
    "tag:yaml.org,2002:timestamp": "a date or time", "tag:yaml.org,2002:binary": "binary data",
    "tag:yaml.org,2002:set": "a set", "tag:yaml.org,2002:omap": "an ordered mapping",
    "tag:yaml.org,2002:pairs": "a list of pairs", "tag:yaml.org,2002:value": "a value key",
}
_SCALAR = Callable[[yaml.ScalarNode], Any]
_constructor = SafeConstructor()
# Scalar tags and how their text becomes a value. An application tag (e.g. `!secret NAME`,
# as `{"secret": NAME}`) is one more entry here.
SCALAR_TAGS: dict[str, _SCALAR] = {
    _STR: lambda node: node.value,
    "tag:yaml.org,2002:null": lambda node: None,
    "tag:yaml.org,2002:bool": _constructor.construct_yaml_bool,
    "tag:yaml.org,2002:int": _constructor.construct_yaml_int,
    "tag:yaml.org,2002:float": _constructor.construct_yaml_float,
    # `!secret NAME`: the `{secret: NAME}` reference of experiments/secrets.py, its line kept.
    "!secret": lambda node: {"secret": node.value},
}
# What YAML may not carry in its text, and what a string may not carry once unescaped (a NUL
# cannot reach an argv or an environment; terminal escapes would be printed as they are).
_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")  # a line break as PyYAML counts lines
# Anchored at line starts: unanchored, a long run would be rescanned from each of its characters.
_LONG_LINE = re.compile(
    f"(?:\\A|(?<=[\r\n\x85\u2028\u2029]))[^\r\n\x85\u2028\u2029]{{{MAX_LINE_CHARS + 1}}}")


class YamlInputError(ValueError):
    """A YAML document that cannot be read; the message names the file and line."""


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans (`on`, `off`, `yes`, `no` stay strings: level names)
    and no implicit dates (`2024-01-01` stays a string), composing within the caps above."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self.source = source
        self.depth = self.nodes = self.aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        mark = self.peek_event().start_mark
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise YamlInputError(f"{self.source}:{mark.line + 1}: more than {MAX_ALIASES} "
                                     "aliases (*name) in one file")
            return super().compose_node(parent, index)
        self.nodes += 1
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise YamlInputError(f"{self.source}:{mark.line + 1}: nested more than "
                                 f"{MAX_DEPTH} deep")
        if self.nodes > MAX_NODES:
            raise YamlInputError(f"{self.source}:{mark.line + 1}: more than {MAX_NODES} "
                                 "values in one file")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers
          if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")]
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


def dotted(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return shown(out)


def shown(text: str) -> str:
    """``text`` with every unprintable character escaped: a key or value quoted in an error
    is one line and sends nothing to the terminal."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else f"\\u{ord(char):04x}" for char in text)


def _line_at(text: str, offset: int) -> int:
    return len(_BREAK.findall(text, 0, offset)) + 1


def _check_text(text: str, source: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise YamlInputError(f"{source}: {size} bytes, more than the {MAX_BYTES} a file may have")
    bad = _NON_PRINTABLE.search(text)
    if bad is not None:
        raise YamlInputError(f"{source}:{_line_at(text, bad.start())}: control character "
                             f"U+{ord(bad.group()):04X}: YAML text may not contain it")
    long = _LONG_LINE.search(text)
    if long is not None:
        raise YamlInputError(f"{source}:{_line_at(text, long.start())}: a line of more than "
                             f"{MAX_LINE_CHARS} characters")


def _children(node: yaml.Node, path: Path_) -> list[tuple[yaml.Node, Path_]]:
    if isinstance(node, yaml.MappingNode):
        return [(part, (*path, str(key.value)) if part is value else path)
                for key, value in node.value for part in (key, value)]
    if isinstance(node, yaml.SequenceNode):
        return [(item, (*path, index)) for index, item in enumerate(node.value)]
    return []


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Refuse a graph that would expand past MAX_EXPANDED values or MAX_DEPTH levels, or that
    contains itself: measured on the shared nodes, iteratively (the graph may be deep)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    entered: dict[int, Path_] = {}  # where each node was first reached
    stack: list[tuple[yaml.Node, Path_, bool]] = [(root, (), False)]

    def refuse(node: yaml.Node, path: Path_, problem: str) -> YamlInputError:
        field = dotted(path)
        return YamlInputError(f"{source}:{node.start_mark.line + 1}: "
                              f"{field + ': ' if field else ''}{problem}")

    while stack:
        node, path, finished = stack.pop()
        key = id(node)
        if finished:
            kids = [id(kid) for kid, _ in _children(node, path)]
            size[key] = min(MAX_EXPANDED + 1, 1 + sum(size[kid] for kid in kids))
            depth[key] = 1 + max((depth[kid] for kid in kids), default=0)
            if size[key] > MAX_EXPANDED:
                raise refuse(node, path, f"aliases (*name) here expand to more than "
                                         f"{MAX_EXPANDED} values")
            if depth[key] > MAX_DEPTH:
                raise refuse(node, path, f"aliases (*name) here nest more than {MAX_DEPTH} deep")
            continue
        if key in size:
            continue
        if key in entered:  # entered and not finished: an ancestor of itself
            raise refuse(node, entered[key], "an alias (*name) inside the value it names "
                                     "(a recursive value)")
        entered[key] = path
        stack.append((node, path, True))
        stack.extend((kid, kid_path, False) for kid, kid_path in reversed(_children(node, path))
                     if id(kid) not in size)


class _Builder:
    """Plain values from the checked graph, recording each path's line on the way; aliases
    share one value, as PyYAML's do."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: dict[Path_, int] = {}
        self.built: dict[int, Any] = {}

    def fail(self, node: yaml.Node, path: Path_, problem: str) -> YamlInputError:
        where = dotted(path)
        return YamlInputError(f"{self.source}:{node.start_mark.line + 1}: "
                              f"{where + ': ' if where else ''}{problem}")

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if id(node) in self.built:
            return self.built[id(node)]
        self._check_tag(node, path)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            items: list[Any] = []
            self.built[id(node)] = items
            items.extend(self.build(item, (*path, index)) for index, item in enumerate(node.value))
            return items
        assert isinstance(node, yaml.ScalarNode)  # the composer makes no other kind
        value = self._scalar(node, path)
        self.built[id(node)] = value
        return value

    def _check_tag(self, node: yaml.Node, path: Path_) -> None:
        if isinstance(node, yaml.MappingNode):
            kind, allowed = "a mapping", node.tag == _MAP
        elif isinstance(node, yaml.SequenceNode):
            kind, allowed = "a list", node.tag == _SEQ
        else:
            kind, allowed = "a value", node.tag in SCALAR_TAGS
        if not allowed:
            what = _NOT_JSON.get(node.tag, f"{kind} tagged {_short(node.tag)}")
            raise self.fail(node, path, f"{what} is not allowed here (plain strings, numbers, "
                                        "booleans, lists and mappings only; quote a string)")

    def _scalar(self, node: yaml.ScalarNode, path: Path_) -> Any:
        try:
            value = SCALAR_TAGS[node.tag](node)
        except (ValueError, LookupError, AttributeError, TypeError, yaml.YAMLError):
            name = node.tag.rsplit(":", 1)[-1]
            raise self.fail(node, path, f"'{_short(node.value)}' is not a valid {name}") \
                from None
        if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
            raise self.fail(node, path, f"'{_short(node.value)}' is too large a number")
        if isinstance(value, str):
            control = _CONTROL.search(value)
            if control is not None:
                raise self.fail(node, path, f"control character U+{ord(control.group()):04X} "
                                            "in a string")
        return value

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict[Any, Any]:
        explicit: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE:
                for key, item in self._merged(value_node, path).items():
                    merged.setdefault(key, item)  # as PyYAML: the first merge wins
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(key_node, path, "a key must be a single value, not a "
                                                "mapping or a list")
            self._check_tag(key_node, path)
            key = self._scalar(key_node, path)
            # `1` and `true`, or `1` and `"1"`, would become one key (or one level name)
            seen = first_line.get(key, first_line.get(("raw", key_node.value)))
            if seen is not None:
                where = dotted(path) or "top level"
                raise YamlInputError(f"{self.source}:{line}: duplicate key '{_short(str(key))}' "
                                     f"at {where} (first on line {seen})")
            first_line[key] = first_line[("raw", key_node.value)] = line
            self.lines[(*path, str(key))] = line
            explicit[key] = self.build(value_node, (*path, str(key)))
        # As PyYAML merges: merged keys first, the mapping's own keys win (no cycles remain,
        # so the value is registered only now).
        mapping = {**merged, **explicit}
        self.built[id(node)] = mapping
        return mapping

    def _merged(self, node: yaml.Node, path: Path_) -> dict[Any, Any]:
        """The mapping(s) a merge key (`<<: *base`, `<<: [*a, *b]`) brings in."""
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        merged: dict[Any, Any] = {}
        for source in sources:  # the first named wins
            value = self.build(source, path)
            if not isinstance(value, dict):
                raise self.fail(source, path, "a merge (<<) takes a mapping or a list of them")
            for key, item in value.items():
                merged.setdefault(key, item)
        return merged


def _short(text: str) -> str:
    return shown(text if len(text) <= 40 else text[:37] + "...")


def load_yaml(text: str, source: str) -> LoadedYaml:
    """One YAML document as plain values with their lines; YamlInputError otherwise."""
    _check_text(text, source)
    loader = _Loader(text, source)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise YamlInputError(f"{source}{line}: YAML syntax error: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise YamlInputError(f"{source}: YAML error: {exc}") from None
    finally:
        loader.dispose()
    if root is None:
        return LoadedYaml(data=None, source=source)
    _check_expansion(root, source)
    builder = _Builder(source)
    data = builder.build(root, ())
    return LoadedYaml(data=data, source=source, lines=builder.lines)


def read_yaml_text(path: str | Path) -> str:
    """A YAML file's text, read no further than MAX_BYTES (a device or a huge file is not
    slurped); YamlInputError naming the file otherwise."""
    source = str(path)
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise YamlInputError(f"{source}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise YamlInputError(f"{source}: more than the {MAX_BYTES} bytes a file may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise YamlInputError(f"{source}: not a UTF-8 text file") from None
