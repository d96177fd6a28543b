"""What every `bisect` command shares: the app, the consoles, the options, the error policy.

Exit codes: 0 verdict reached, 1 the run failed, 2 bad input, 3 inconclusive.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from db.errors import NotFound, StoreError
from experiments.campaign import CampaignError
from experiments.secrets import SecretMissing, redact
from orchestrator.core.verdict import Status, Verdict

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Find which switch or commit corrupts an LLM serving deployment under load.",
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

StoreOption = Annotated[
    str, typer.Option("--store", envvar="BISECT_STORE", help="SQLite file or SQLAlchemy URL.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


@contextmanager
def user_errors() -> Iterator[None]:
    """Known failures become one sentence and an exit code; no traceback reaches a user."""
    from orchestrator.executor.driver import RunFailed
    from orchestrator.executor.nodes import PreflightFailed

    try:
        yield
    except (CampaignError, PreflightFailed, SecretMissing) as exc:
        error(str(exc))
        raise typer.Exit(2) from None
    except NotFound as exc:
        error(str(exc))
        raise typer.Exit(2) from None
    except (StoreError, RunFailed) as exc:
        error(str(exc))
        raise typer.Exit(1) from None


def error(message: str) -> None:
    """Print an error; its text may come from a user's file, so it is never read as markup."""
    err.print(Text("error: ", style="red") + Text(redact(message)), highlight=False)


def progress(message: str) -> None:
    err.print(redact(message), highlight=False, markup=False)


def exit_code(verdict: Verdict) -> int:
    return 3 if verdict.status is Status.INCONCLUSIVE else 0


def main() -> None:
    # Everything bisect creates (store, reports, Ray's files, the demo) is its owner's alone;
    # the store and reports also get explicit modes, for callers that skip main().
    os.umask(0o077)
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted: `bisect resume ID` continues the campaign", highlight=False)
        sys.exit(130)
    except Exception as exc:  # the last line of defence: one sentence, no traceback
        if os.environ.get("BISECT_DEBUG"):
            raise
        error(f"{type(exc).__name__}: {exc}")
        sys.exit(1)


