"""What every `bisect` command shares: the app, the consoles, the options, the error policy.

Exit codes: 0 verdict reached, 1 the run failed, 2 bad input, 3 inconclusive, 130 interrupted
(Ctrl-C or SIGTERM), 141 stdout closed early (a broken pipe, as git).

Importing this module (as `bisect --help` does) loads typer alone: rich when a console first
prints, the store, the campaign models and the statistics in the functions that use them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from orchestrator.cli import coercion

if TYPE_CHECKING:
    from rich.console import Console

    from db.store import Store
    from orchestrator.core.verdict import Verdict

coercion.install()  # plain parameters without pydantic: orchestrator/cli/coercion.py

app = typer.Typer(
    # Plain help, as click writes it: a flag shows as `--json`, never `--json <bool>`.
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Find which switch or commit corrupts an LLM serving deployment under load.",
)


@functools.cache
def _console_class() -> type[Console]:
    from rich.console import Console

    class Closable(Console):
        def on_broken_pipe(self) -> None:  # rich's own answer exits 1
            self.quiet = True
            _pipe_closed(self.file.fileno())

    return Closable


class _Console:
    """A rich Console made at its first use: a command that prints nothing through one
    (`bisect classify` writes its JSON with print) skips importing rich's (~17 ms)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:  # what the proxy lacks: all but the above
        if self._console is None:
            self._console = _console_class()(**self._options)
        return getattr(self._console, name)


out = cast("Console", _Console(soft_wrap=True))
err = cast("Console", _Console(stderr=True, soft_wrap=True))

StoreOption = Annotated[
    str, typer.Option("--store", envvar="BISECT_STORE", help="SQLite file or SQLAlchemy URL.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
CampaignId = Annotated[str, typer.Argument(
    metavar="ID", help="A campaign id, a unique prefix of one, or `last` (the newest).")]

ParserOption = Annotated[str | None, typer.Option(
    "--tool-call-parser", metavar="NAME",
    help="The server's --tool-call-parser (deepseekv31, deepseekv32, deepseekv4, ...): leaks "
    "are triaged against it, and one another parser reads is a parser mismatch. Default: not "
    "known, every detector is asked.")]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def tool_call_parser_of(name: str | None) -> str | None:
    """The --tool-call-parser given, checked against the parsers triage judges against."""
    from experiments.workload.triage import check_parser

    try:
        return None if name is None else check_parser(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--tool-call-parser") from None


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        print(f"bisect {version('bisect-serving')}")
        raise typer.Exit()


def _help(ctx: typer.Context, shown: bool) -> None:
    if shown and not ctx.resilient_parsing:
        typer.echo(ctx.get_help())
        raise typer.Exit()


# Named, as a command's options are: typer reads each string annotation (this module's are
# strings) twice, compiling it, on every run; a name compiles in no time.
_VersionFlag = Annotated[bool, typer.Option(
    "--version", callback=_version, is_eager=True, help="Print the version and exit.")]
# The app's own --help, in place of Typer's: Typer coerces its flag's absent value (None)
# through a pydantic TypeAdapter, which costs `bisect CMD --help` a third of its start; this
# flag is False when absent, and a bool is taken as it is.
_HelpFlag = Annotated[bool, typer.Option(
    "--help", callback=_help, is_eager=True, help="Show this message and exit.")]


@app.callback()
def _options(version: _VersionFlag = False, shown: _HelpFlag = False) -> None:
    pass  # the app's own options


# Known failures by module and name: bad input (exit 2), then a failed run (exit 1). NotFound
# is a StoreError: it is matched first.
_BAD_INPUT = (("experiments.campaign", "CampaignError"), ("experiments.secrets", "SecretMissing"),
              ("orchestrator.executor.nodes", "PreflightFailed"), ("db.errors", "NotFound"),
              ("experiments.sweep", "SweepError"),
              ("deploy.errors", "SetupError"))
_RUN_FAILED = (("db.errors", "StoreError"), ("orchestrator.executor.driver", "RunFailed"))


def _loaded(names: tuple[tuple[str, str], ...]) -> tuple[type[BaseException], ...]:
    """The classes of the modules already imported: one never imported cannot have raised (and
    importing the driver to match its error would load Ray into `bisect ls`)."""
    return tuple(getattr(sys.modules[module], name) for module, name in names
                 if module in sys.modules)


@contextmanager
def user_errors() -> Iterator[None]:
    """Known failures become one sentence and an exit code; no traceback reaches a user."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, _loaded(_BAD_INPUT)):
            code = 2
        elif isinstance(exc, _loaded(_RUN_FAILED)):
            code = 1
        else:
            raise
        error(str(exc))
        raise typer.Exit(code) from None


def error(message: str) -> None:
    """Print an error; its text may come from a user's file, so it is never read as markup."""
    from rich.text import Text

    from experiments.secrets import redact

    err.print(Text("error: ", style="red") + Text(redact(message)), highlight=False)


def progress(message: str) -> None:
    from experiments.secrets import redact

    err.print(redact(message), highlight=False, markup=False)


def emit_json(document: Any) -> None:
    """Every ``--json`` document leaves through here: strict JSON, so a NaN or an infinity
    (which JavaScript, Go and jq cannot read) fails loudly instead of reaching a consumer."""
    print(json.dumps(document, indent=2, allow_nan=False))


def exit_code(verdict: Verdict) -> int:
    from orchestrator.core.verdict import Status

    return 3 if verdict.status is Status.INCONCLUSIVE else 0


# --- stores and campaign ids ---------------------------------------------------------------

def store_json(store: str) -> str:
    """The store as a JSON document names it: a SQLite file by its absolute path, a URL as
    given, its password hidden."""
    if _URL.match(store):
        from sqlalchemy.engine import make_url

        return make_url(store).render_as_string(hide_password=True)
    return str(Path(store).expanduser().resolve())


def shown_path(path: str | Path) -> str:
    """A file as a user types it from here: under this directory by its relative path,
    shell-quoted."""
    from shlex import quote

    absolute = Path(path).expanduser().resolve()
    try:
        return quote(str(absolute.relative_to(Path.cwd())))
    except ValueError:
        return quote(str(absolute))


def store_arg(store: str) -> str:
    """``--store`` as a user types it from here (``shown_path``, or the URL)."""
    from shlex import quote

    return quote(store_json(store)) if _URL.match(store) else shown_path(store)


@contextmanager
def reading(store: str) -> Iterator[Store]:
    """The store of a command that only reads: one that does not exist is "no store at PATH"
    (exit 2), never an empty store created (nor its directory)."""
    from db.errors import NotFound
    from db.store import Store

    with user_errors():
        try:
            db = Store.open(store, create=False)
        except NotFound as exc:
            demo = Path("bisect-demo", "bisect.db")  # `bisect demo`'s, where a newcomer is
            if demo.is_file() and store_json(store) != store_json(str(demo)):
                raise NotFound(f"{exc} (the demo's store is {demo}: add --store {demo})") \
                    from None
            raise
        with db:
            yield db


def resolve_id(db: Store, given: str, store: str) -> str:
    """A campaign id from a whole id, a unique prefix of one, or ``last`` (the newest);
    an ambiguous prefix names its candidates (exit 2)."""
    from db.errors import NotFound

    campaigns = db.list_campaigns()  # newest first
    if given == "last":
        if not campaigns:
            raise NotFound(f"no campaign in {store_arg(store)} yet")
        return campaigns[0].id
    ids = [c.id for c in campaigns]
    if given in ids:
        return given
    matches = [i for i in ids if given and i.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFound(f"no campaign {given!r} in {store_arg(store)} "
                       f"(`bisect ls --store {store_arg(store)}` lists them)")
    shown = ", ".join(matches[:10]) + (f" and {len(matches) - 10} more" if len(matches) > 10
                                        else "")
    error(f"campaign id {given!r} is ambiguous: it begins {shown}; give more of it")
    raise typer.Exit(2)


def program() -> str:
    """``bisect`` as a printed command runs it from here: the name where it finds this program
    on PATH, else the path this program was started by (`make demo` runs .venv/bin/bisect,
    which a fresh shell does not find by name)."""
    invoked = Path(sys.argv[0])
    if invoked.name != "bisect":  # not the console script (a test's runner): the name
        return "bisect"
    found = shutil.which("bisect")
    if found and Path(found).resolve() == invoked.resolve():
        return "bisect"
    return shown_path(invoked)


def resume_command(campaign_id: str, store: str) -> str:
    return f"{program()} resume {campaign_id} --store {store_arg(store)}"


@contextmanager
def resumable(campaign_id: str, store: str) -> Iterator[None]:
    """Ctrl-C while a campaign runs: the driver has stopped it (nodes restored, as on any
    failure) by the time the interrupt reaches here; say how to go on, exit 130. (Typer would
    turn it into a silent exit 130 before ``main`` saw it.)"""
    try:
        yield
    except KeyboardInterrupt:
        err.print(f"interrupted: campaign {campaign_id} stopped; the trials done are stored. "
                  f"Continue it with:\n  {resume_command(campaign_id, store)}",
                  highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(130) from None


# --- the entry point -------------------------------------------------------------------------

def _pipe_closed(fd: int = 1) -> None:
    """The reader of stdout (or stderr) went away (``| head``): nothing more can be said there,
    and the interpreter's last flush must not complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    sys.exit(141)  # 128 + SIGPIPE: what git and a shell report for a closed pipe


def _stop_as_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM (`kill`, `systemctl stop`, a CI job's timeout) stops a command as Ctrl-C does: a
    campaign's driver puts the nodes back and stores the campaign as interrupted. Python's
    default ends the process at once, leaving a variant deployed and the campaign "running".
    A second SIGTERM is let go, so that it cannot cut that clean-up short (by a handler that
    does nothing, not SIG_IGN: an ignored signal would stay ignored in what the clean-up starts)."""
    signal.signal(signal.SIGTERM, _let_go)
    raise KeyboardInterrupt


def _let_go(signum: int, frame: object) -> None:
    """A SIGTERM while the first one's clean-up runs."""


def main() -> None:
    signal.signal(signal.SIGTERM, _stop_as_ctrl_c)
    # Everything bisect creates (store, reports, Ray's files, the demo) is its owner's alone;
    # the store and reports also get explicit modes, for callers that skip main().
    os.umask(0o077)
    stdout = sys.stdout
    try:
        try:
            app()
        finally:
            sys.stdout.flush()  # a broken pipe shows here, not in the interpreter's last flush
    except BrokenPipeError:
        _pipe_closed()
    except SystemExit:
        if sys.stdout is not stdout:  # typer wraps stdout when a write met a broken pipe
            _pipe_closed()
        raise
    except KeyboardInterrupt:  # outside a command (typer answers one inside with exit 130)
        err.print("interrupted", highlight=False)
        sys.exit(130)
    except Exception as exc:  # the last line of defence: one sentence, no traceback
        if os.environ.get("BISECT_DEBUG"):
            raise
        error(f"{type(exc).__name__}: {exc}")
        sys.exit(1)
