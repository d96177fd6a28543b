"""orchestrator/cli/coercion.py answers every parameter value as typer's own pydantic coercion
does: the same value of the same type, or the same error. Every parameter of every `bisect`
command, and a few of the path checks typer offers, against values a command line, a default
or an environment variable can give."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
import typer.main
from typer import _coercion, core

from orchestrator.cli import app, coercion

pytestmark = pytest.mark.pure

VALUES: tuple[Any, ...] = (
    None, "", "x", "3", "-", "true", "no", "a\udcff", "a\x00b", "./a//b/", "~/x", b"bytes",
    ["a", "b"], ("a",), (), [1], 3, 2.5, True, Path("p"),
)


def outcome(runtime: _coercion.RuntimeParam, value: Any, param: Any, ctx: typer.Context
            ) -> tuple[str, Any]:
    try:
        result = runtime.coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # the error is part of the answer: its kind and its words
        return "raised", (type(exc), str(exc))
    return "value", (type(result), result)


def params() -> list[tuple[str, Any, typer.Context]]:
    """(name, parameter, context) of every parameter of every command, and of a test app's."""
    test_app = typer.Typer()

    @test_app.command()
    def checked(
        existing: Annotated[Path, typer.Option(exists=True, dir_okay=False)] = Path("."),
        resolved: Annotated[Path, typer.Option(resolve_path=True, readable=True)] = Path("."),
        dash: Annotated[Path, typer.Option(allow_dash=True)] = Path("."),
        given: Annotated[list[str] | None, typer.Option(envvar="X")] = None,
    ) -> None:
        pass

    found = []
    for root in (typer.main.get_command(app), typer.main.get_command(test_app)):
        commands = getattr(root, "commands", {None: root})
        groups = [(name, c) for name, c in commands.items()]
        while groups:
            name, command = groups.pop()
            groups += [(f"{name} {sub}", c) for sub, c in getattr(command, "commands", {}).items()]
            ctx = typer.Context(command)
            found += [(f"{name} {param.name}", param, ctx) for param in command.params]
    return found


def test_every_parameter_coerces_as_typer_does(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    values = (*VALUES, str(tmp_path / "file"), str(tmp_path / "dir"), str(tmp_path / "none"))
    assert getattr(core.build_runtime_param, "deferred", False)  # installed by the CLI
    checked = plain = 0
    cwd = os.getcwd()
    os.chdir(tmp_path)  # relative paths resolve in here
    try:
        for name, param, ctx in params():
            ours = core.build_runtime_param(param.type_descriptor)
            theirs = _coercion.build_runtime_param(param.type_descriptor)
            plain += coercion.plain(param.type_descriptor)
            for value in values:
                got = outcome(ours, value, param, ctx)
                assert got == outcome(theirs, value, param, ctx), (name, value)
                checked += 1
    finally:
        os.chdir(cwd)
    assert plain > 50 and checked > 2000  # every command's str, list and Path parameters
