"""Typer's coercion of parameter values, with pydantic only where a value needs it.

Typer 0.29 builds a pydantic ``TypeAdapter`` for every parameter it processes, given or not
(``typer._coercion.build_runtime_param``, even for an absent ``--help``): importing pydantic
and building the adapters is a third of a quick command's start (`bisect classify` of a clean
response, issue 31). For most values the adapter's answer is known without it: an absent one
(typer's ``coerce`` answers None before asking), a string, a list of strings, a path given as a
string (``Path(value)``, once typer's own path checks pass). ``install`` puts ``Coercion`` in
typer's place: those answered here, any other value by typer's own coercion, built at that
moment. tests/test_cli_coercion.py compares the two on every parameter of every command. A
typer without that hook is left as it is.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from typer._click import Context
    from typer._coercion import RuntimeParam, TypeDescriptor
    from typer.core import _TyperParameter


def plain(descriptor: TypeDescriptor) -> bool:
    """Whether ``descriptor``'s values may be answered here: no parser, no file to open, no
    path type of its own."""
    info = descriptor.parameter_info
    return (descriptor.file_annotation is None and info.parser is None
            and info.path_type in (None, Path))


def install() -> bool:
    """Coerce through ``Coercion`` from now on; False when this typer has no such hook."""
    try:
        from typer import _coercion, core
        from typer._click.exceptions import BadParameter
        from typer._param_types import coerce_cli_path
    except ImportError:
        return False
    found = getattr(core, "build_runtime_param", None)
    if found is None or getattr(found, "deferred", False):
        return found is not None
    typer_own: Callable[[TypeDescriptor], RuntimeParam] = found

    class Coercion(_coercion.RuntimeParam):  # not a dataclass of its own: ~4M instructions
        """A plain value answered as typer's adapter would; any other by typer's own."""

        descriptor: TypeDescriptor

        def __init__(self, descriptor: TypeDescriptor) -> None:
            super().__init__(descriptor.parameter_info, descriptor.annotation)
            object.__setattr__(self, "descriptor", descriptor)  # frozen, as typer's are

        @functools.cached_property
        def own(self) -> RuntimeParam:
            return typer_own(self.descriptor)

        def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
            kind, info = self.descriptor.annotation, self.parameter_info
            if not plain(self.descriptor):
                pass
            elif kind is str and type(value) is str:
                return value
            elif kind == list[str] and isinstance(value, list | tuple) \
                    and all(type(item) is str for item in value):
                return list(value)
            elif kind is Path and (type(value) is str or isinstance(value, Path)):
                # pydantic's answer is Path(value), which typer then checks (exists, a file,
                # readable). A check that fails is worded with the value as given, and a NUL
                # by pydantic: typer's own answer then.
                try:
                    return coerce_cli_path(Path(value), info, path_type=Path, param=param,
                                           ctx=ctx)
                except (BadParameter, ValueError):
                    pass
            return self.own._coerce_value(value, param=param, ctx=ctx)

    def runtime_param(descriptor: TypeDescriptor) -> RuntimeParam:
        return Coercion(descriptor)

    runtime_param.deferred = True  # type: ignore[attr-defined]  # installed once
    core.build_runtime_param = runtime_param
    return True
