"""Typer's ``CliRunner.invoke`` builds the app's whole click tree at every call (each command
from its signature: 27 ms for `bisect`'s 21 commands and their groups, some 100 calls in the
pure tier alone). The tree is a function of the commands registered, which a test run never
changes once the command modules are imported: here it is built once for each set of them
and reused (as test_schedule_hostile.py did for itself), the invocation itself unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer.main
import typer.testing
from typer import Typer

if TYPE_CHECKING:
    from typer._click import Command  # typer's own click, which it builds the tree of

Shape = tuple[object, ...]
_built: dict[tuple[int, Shape], tuple[Typer, Command]] = {}


def _shape(app: Typer) -> Shape:
    """What the tree is built from: the commands and groups registered, down the groups (a
    command module imported since makes a new tree)."""
    return (tuple(id(command.callback) for command in app.registered_commands),
            tuple((id(group.typer_instance), group.name,
                   _shape(group.typer_instance) if group.typer_instance else ())
                  for group in app.registered_groups))


def command_of(app: Typer) -> Command:
    """``typer.main.get_command(app)``, built once for each shape of ``app``."""
    key = (id(app), _shape(app))
    if key not in _built:
        _built[key] = (app, typer.main.get_command(app))  # the app kept: its id stays its own
    return _built[key][1]


def install() -> None:
    """Every ``CliRunner.invoke`` from here on reuses the tree (typer.testing calls the
    ``_get_command`` it imported: fail loudly if a new typer calls it otherwise)."""
    assert typer.testing._get_command is typer.main.get_command, \
        "typer.testing builds the tree otherwise now: see tests/support/cli_tree.py"
    typer.testing._get_command = command_of  # type: ignore[assignment]
