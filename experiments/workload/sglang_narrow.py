"""SGLang's tool-call detectors imported without torch: only their modules, SGLang's own code.

An ordinary ``import sglang.srt.function_call.deepseekv4_detector`` runs ``sglang/__init__.py``
first, which patches transformers (``sglang.srt.utils.hf_transformers_patches``: torch and
transformers, ~15 s and 500 MB on a 2-core machine), and the detectors' one heavy import,
``sglang.srt.entrypoints.openai.protocol``, pulls the whole ``openai`` client (~1.5 s) for the
two request models they use. Neither is touched when a detector parses, so for the length of
the import ``sys.modules`` holds two stand-ins:

- ``sglang``: an empty package whose ``__path__`` is the installed one, so its submodules load
  from SGLang's own files but its ``__init__`` never runs;
- ``sglang.srt.entrypoints.openai.protocol``: the classes the detectors import from it
  (``Tool``, ``ToolChoice`` and the models they are made of), compiled from *that module's own
  source* with its own imports of typing and pydantic: the same validation, none of openai.
  They are found by their lines (source_lines.py; the whole file parsed where that is not sure).

Every other module the detectors import (``base_format_detector``, ``core_types``, ``utils``,
``sglang.srt.environ``) is SGLang's, unchanged. torch, transformers and triton are refused for
the length of the import: SGLang's optional imports (xgrammar) fall back as they do without the
package; a module that needs one fails the load, and triage says so and uses its built-in
parser. Afterwards every ``sglang`` module the import added is taken out of ``sys.modules``
again (the classes keep their modules' globals), so a later ordinary ``import sglang`` in the
same process (a test's oracle, a benchmark) loads the whole package as usual.
"""

from __future__ import annotations

import ast
import gc
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import threading
import types
from collections.abc import Sequence
from pathlib import Path

from experiments.workload.source_lines import line_starts, statements

PROTOCOL = "sglang.srt.entrypoints.openai.protocol"
# What the detectors import from the protocol module, and the models those are made of.
PROTOCOL_CLASSES = ("Function", "Tool", "ToolChoiceFuncName", "ToolChoice")
# The protocol module's own imports that those classes need: light, and nothing else is run.
PROTOCOL_IMPORTS = ("__future__", "typing", "typing_extensions", "pydantic")
# Never imported on the way: a detector that needs one is not had without it.
REFUSED = ("torch", "transformers", "triton")
PLUGINS = "PYDANTIC_DISABLE_PLUGINS"

_lock = threading.Lock()  # sys.modules is edited and restored: one narrow import at a time


class NarrowImportError(ImportError):
    """A detector cannot be imported the narrow way (it needs torch, or its source moved)."""


class _Refuse:
    """Refuses the heavy packages, as if they were not installed, to the thread that runs a
    narrow import only. Installed once and left in place: taking a finder out of
    ``sys.meta_path`` while another thread walks it could make that thread skip one. A finder
    is what has ``find_spec``: importlib.abc's base class would import importlib.resources."""

    owner: int | None = None  # the thread whose imports are refused, while it imports

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if self.owner == threading.get_ident() and fullname.split(".", 1)[0] in REFUSED:
            raise ModuleNotFoundError(f"{fullname} is refused by the narrow import of "
                                      "SGLang's detectors", name=fullname)
        return None  # not ours: the next finder looks


_REFUSE = _Refuse()


def _by_lines(source: str) -> tuple[list[ast.ImportFrom], dict[str, ast.ClassDef]] | None:
    """The imports and classes ``_protocol`` takes, found by their lines (source_lines.py), or
    None where that is not sure: a class named on two lines, a statement that does not parse
    alone."""
    modules = "|".join(re.escape(name) for name in PROTOCOL_IMPORTS)
    imports = line_starts(source, rf"from (?:{modules})\b[\w.]* import\b")
    starts = [line_starts(source, rf"class {name}\b") for name in PROTOCOL_CLASSES]
    if any(len(found) != 1 for found in starts):
        return None
    imported = statements(source, imports, ast.ImportFrom)
    classes = statements(source, [found[0] for found in starts], ast.ClassDef)
    if imported is None or classes is None:
        return None
    return imported, {cls.name: cls for cls in classes}


def _by_parse(source: str, path: str) -> tuple[list[ast.ImportFrom], dict[str, ast.ClassDef]]:
    """The same from the whole file parsed (SyntaxError or ValueError where it does not)."""
    tree = ast.parse(source, path)
    return ([node for node in tree.body if isinstance(node, ast.ImportFrom)
             and (node.module or "").split(".", 1)[0] in PROTOCOL_IMPORTS],
            {node.name: node for node in tree.body
             if isinstance(node, ast.ClassDef) and node.name in PROTOCOL_CLASSES})


def _protocol(root: Path) -> types.ModuleType:
    """The protocol stand-in: PROTOCOL_CLASSES as SGLang's source defines them."""
    path = root / "srt" / "entrypoints" / "openai" / "protocol.py"
    try:
        source = path.read_text(encoding="utf-8")
        imports, classes = _by_lines(source) or _by_parse(source, str(path))
    except (OSError, SyntaxError, ValueError) as exc:
        raise NarrowImportError(f"cannot read {path}: {exc}") from None
    missing = [name for name in PROTOCOL_CLASSES if name not in classes]
    if missing:
        raise NarrowImportError(f"{path} defines no {', '.join(missing)}")
    module = types.ModuleType(PROTOCOL, f"The classes {', '.join(PROTOCOL_CLASSES)} of "
                              f"{path}, alone (experiments/workload/sglang_narrow.py).")
    module.__file__ = str(path)
    body = ast.Module([*imports, *(classes[name] for name in PROTOCOL_CLASSES)], [])
    sys.modules[PROTOCOL] = module  # pydantic resolves the annotations in this namespace
    try:
        exec(compile(body, str(path), "exec"), module.__dict__)  # SGLang's own source
    except Exception as exc:  # a newer protocol.py whose classes need more than these imports
        raise NarrowImportError(f"{PROTOCOL}: {type(exc).__name__}: {exc}") from exc
    return module


def _classes(classes: dict[str, tuple[str, str]]) -> tuple[dict[str, type], type]:
    found: dict[str, type] = {}
    for name, (module, cls) in classes.items():
        try:
            found[name] = getattr(importlib.import_module(module), cls)
        except Exception as exc:  # an ImportError, or whatever a broken sglang raises
            raise NarrowImportError(f"{name} ({module}): {type(exc).__name__}: {exc}") from exc
    return found, importlib.import_module(PROTOCOL).Tool


def import_detectors(root: Path, classes: dict[str, tuple[str, str]]
                     ) -> tuple[dict[str, type], type]:
    """``name -> (module, class)`` imported the narrow way from the sglang package at ``root``,
    and the ``Tool`` model they take; NarrowImportError, naming the detector and what its
    import raised, when one cannot be."""
    with _lock:
        if "sglang" in sys.modules:  # already paid for: the ordinary import costs nothing
            return _classes(classes)
        before = set(sys.modules)
        if _REFUSE not in sys.meta_path:
            sys.meta_path.insert(0, _REFUSE)
        stand_in = types.ModuleType("sglang", "A stand-in: sglang's __init__ does not run.")
        stand_in.__path__ = [str(root)]
        # What find_spec("sglang") answers another thread meanwhile: the real package's place.
        stand_in.__spec__ = importlib.machinery.ModuleSpec("sglang", None, is_package=True)
        stand_in.__spec__.submodule_search_locations = [str(root)]
        sys.modules["sglang"] = stand_in
        _REFUSE.owner = threading.get_ident()
        # What the import makes lives as long as the process: a collection meanwhile walks it
        # and frees nothing (~5 ms of a leaked response's triage in `bisect classify`).
        collecting = gc.isenabled()
        gc.disable()
        # SGLang's models, triage's own, are built without pydantic's plugins, as typer builds
        # its adapters: finding plugins reads every installed distribution's entry points.
        plugins = os.environ.get(PLUGINS)
        os.environ[PLUGINS] = "__all__"
        try:
            _protocol(root)
            found = _classes(classes)
        finally:
            if plugins is None:
                del os.environ[PLUGINS]
            else:
                os.environ[PLUGINS] = plugins
            if collecting:
                gc.enable()
            _REFUSE.owner = None
            # SGLang's modules only: a library imported on the way (pydantic, orjson) stays,
            # or a second import would make a second copy of its classes.
            for added in set(sys.modules) - before:
                if added == "sglang" or added.startswith("sglang."):
                    del sys.modules[added]
        return found
