"""What every command shares, through the real console script: --version, help that shows flags
as flags and says what each option does, read-only commands that never create a store, and
campaign ids by prefix or `last`."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer

from db.store import Store
from orchestrator.cli import COMMANDS, app

BISECT = str(Path(sys.executable).parent / "bisect")
READERS = ("verdict", "log", "show", "report", "doctor", "resume")


def bisect(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BISECT, *args], capture_output=True, text=True, cwd=cwd, timeout=120,
                          check=False)


@pytest.mark.real
def test_version_comes_from_the_package_metadata() -> None:
    done = bisect("--version")
    assert done.returncode == 0 and done.stdout == f"bisect {version('bisect-serving')}\n"


def _commands(group: Any, ctx: typer.Context) -> list[tuple[str, Any]]:
    """Every command under ``group`` (typer's own click), sub-commands by their full name."""
    found: list[tuple[str, Any]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if hasattr(command, "list_commands"):
            found += [(f"{name} {sub}", c) for sub, c in _commands(command, ctx)]
        else:
            found.append((name, command))
    return found


@pytest.mark.pure
def test_every_option_and_argument_says_what_it_does() -> None:
    root = typer.main.get_command(app)
    commands = _commands(root, typer.Context(root))
    assert len(commands) > 15
    missing = [f"{name} {param.name}" for name, command in commands for param in command.params
               if not getattr(param, "help", None) and name != "twin"]  # twin: argparse's help
    assert not missing, missing


@pytest.mark.pure
def test_each_command_is_found_in_the_module_the_map_names() -> None:
    # `bisect CMD` imports only COMMANDS[CMD]'s module: a command missing from the map, or
    # mapped to another module, would be "No such command" for its user.
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)  # a group of commands, not one command
    registered = {group.name: group.typer_instance.registered_commands[0].callback
                  for group in app.registered_groups if group.typer_instance}
    for name in root.list_commands(typer.Context(root)):
        command = root.get_command(typer.Context(root), name)
        callback = registered.get(name) or getattr(command, "callback", None)
        assert callback is not None, name
        assert callback.__module__ == f"orchestrator.cli.{COMMANDS[name]}", name
    assert set(COMMANDS) == set(root.list_commands(typer.Context(root)))


@pytest.mark.real
@pytest.mark.parametrize("command", ["verdict", "run", "demo", "ls", "show", "stress"])
def test_help_shows_a_flag_as_a_flag(command: str) -> None:
    done = bisect(command, "--help")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.split()[:1] == ["--json"]]
    assert line.split()[1] == "Print", line  # its help, no metavar between
    assert "<bool>" not in done.stdout, done.stdout


@pytest.mark.real
def test_sessions_rounds_and_seed_have_help() -> None:
    shown = " ".join(bisect("stress", "--help").stdout.split())
    for option in ("--sessions", "--rounds", "--seed"):
        assert f"{option} <int" in shown
        after = shown.split(f"{option} <int", 1)[1].split("--", 1)[0]
        assert len(after.split()) > 3, after  # a sentence, not just its type and default


@pytest.mark.real
@pytest.mark.parametrize("command", [*READERS, "ls"])
def test_a_read_only_command_never_creates_a_store(command: str, tmp_path: Path) -> None:
    store = tmp_path / "no" / "such" / "bisect.db"
    args = [command, "--store", str(store)] if command == "ls" else \
        [command, "last", "--store", str(store)]
    done = bisect(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"error: no store at {store}\n"
    assert not (tmp_path / "no").exists()
    assert list(tmp_path.iterdir()) == []  # not even a report


@pytest.mark.real
def test_ids_by_unique_prefix_and_last_and_an_ambiguous_prefix_names_its_candidates(
        tmp_path: Path) -> None:
    store = tmp_path / "bisect.db"
    with Store.open(str(store)) as db:
        for campaign_id in ("20260101-120000-aaaa", "20260101-120000-abcd", "20260202-090000-ffff"):
            db.create_campaign(campaign_id, campaign_id, {}, "test")
    ambiguous = bisect("doctor", "20260101", "--store", str(store), "--json")
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.startswith("error: campaign id '20260101' is ambiguous: it begins ")
    assert "20260101-120000-abcd" in ambiguous.stderr and "20260101-120000-aaaa" in \
        ambiguous.stderr and "ffff" not in ambiguous.stderr
    unknown = bisect("doctor", "2027", "--store", str(store), "--json")
    assert unknown.returncode == 2 and "no campaign '2027' in " in unknown.stderr
    # doctor reads a campaign whatever its spec: an id, whole or in part, reaches it
    for given, meant in (("20260101-120000-ab", "20260101-120000-abcd"),
                         ("20260101-120000-aaaa", "20260101-120000-aaaa"),
                         ("last", "20260202-090000-ffff")):
        done = bisect("doctor", given, "--store", str(store), "--json")
        assert f'"campaign": "{meant}"' in done.stdout, (given, done.stdout, done.stderr)
    with Store.open(str(tmp_path / "empty.db")) as _:
        pass
    empty = bisect("verdict", "last", "--store", str(tmp_path / "empty.db"))
    assert empty.returncode == 2 and "no campaign in " in empty.stderr
