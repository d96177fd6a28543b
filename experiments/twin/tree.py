"""The files of a twin's tree its fault rules name, read once at start (``when.files``).

A real server reads its code when it starts; so does the twin: a rule conditioned on a file's
content applies from the start that saw the content on. In a commit campaign the tree is the
node's checkout, so a twin started at each commit shows the fault only from the commit that
introduced the content. The tree is ``--twin-tree``, else the fault model file's directory (in
a commit range the fault model usually lives in the tree it describes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from experiments.twin.conditions import FileFacts
from experiments.twin.faults import FaultModel, FaultModelError, file_conditions

MAX_FILE_BYTES = 64 << 20  # a source file; a substring search holds the whole file in memory


def tree_root(twin_tree: str | None, fault_model_path: str | None) -> Path | None:
    if twin_tree:
        return Path(twin_tree)
    return Path(fault_model_path).resolve().parent if fault_model_path else None


def read_tree(model: FaultModel, root: Path | None, source: str | None) -> dict[str, FileFacts]:
    """Facts of every file the model names; FaultModelError (one line: the fault model, the
    field, the file) when one cannot be read. A missing file is a fact (absent), not an
    error: a commit range may add the file."""
    wanted = file_conditions(model)
    if not wanted:
        return {}
    if root is None or not root.is_dir():
        field = wanted[0][0]
        raise FaultModelError(f"fault model {source}, field {field}: the tree "
                              f"{root or '(none: give --twin-tree)'} is not a directory")
    top = root.resolve()
    facts: dict[str, FileFacts] = {}
    for field, path, _ in wanted:
        if path in facts:
            continue
        facts[path] = _facts(top, path, _substrings(model, path),
                             where=f"fault model {source}, field {field}")
    return facts


def _substrings(model: FaultModel, path: str) -> set[str]:
    return {wanted.contains for _, named, wanted in file_conditions(model)
            if named == path and wanted is not None and wanted.contains is not None}


def _facts(top: Path, path: str, substrings: set[str], where: str) -> FileFacts:
    target = top / path
    if not target.exists() and not target.is_symlink():
        return FileFacts(None)
    resolved = target.resolve()
    if not resolved.is_relative_to(top):  # a symlink out of the tree reads no other file
        raise FaultModelError(f"{where}: {target} leads out of the tree {top}")
    if not resolved.is_file():
        raise FaultModelError(f"{where}: {target} is not a regular file")
    try:
        size = resolved.stat().st_size
        if size > MAX_FILE_BYTES:
            raise FaultModelError(f"{where}: {target} is {size:,} bytes, over the "
                                  f"{MAX_FILE_BYTES:,}-byte limit")
        content = resolved.read_bytes()
    except OSError as exc:
        raise FaultModelError(f"{where}: cannot read {target}: {exc.strerror or exc}") from None
    found = frozenset(s for s in substrings if s.encode() in content)
    return FileFacts(hashlib.sha256(content).hexdigest(), found)


def facts_json(facts: Mapping[str, FileFacts]) -> dict[str, dict[str, object]]:
    return {path: each.as_json() for path, each in sorted(facts.items())}
