"""`bisect report`'s formats and destinations: which format a call asks for, where it goes, and
the one-line errors of bad input (exit 2), never a traceback nor a half-written file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from orchestrator.cli.common import error
from orchestrator.reports.renderer import format_of, formats

if TYPE_CHECKING:
    from db.store import Store
    from orchestrator.reports.campaign.model import Report

STDOUT = Path("-")


def bad_input(message: str) -> typer.Exit:
    error(message)
    return typer.Exit(2)


def either(names: list[str]) -> str:
    """``html, md or json``."""
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else "".join(names)


def chosen_format(given: str | None, output: Path | None) -> str:
    """``--format`` where given, else the output's suffix, else html."""
    if given is not None:
        if given not in formats("campaign"):
            raise bad_input(f"unknown report format {given!r}: {either(formats('campaign'))}")
        return given
    if output is not None and output != STDOUT:
        return format_of(output.suffix) or "html"
    return "html"


def destination(output: Path | None, fmt: str, stem: str = "bisect-report") -> Path:
    """Where a report goes: ``-o``; else an HTML report to ``STEM.html`` and the text formats
    to stdout (``-``), for a pipe (``gh pr comment -F -``, ``jq``)."""
    if output is not None:
        return output
    return Path(f"{stem}.html") if fmt == "html" else STDOUT


def deliver(text: str, path: Path) -> Path | None:
    """``text`` to ``path`` (owner-only, replaced whole), or to stdout for ``-``; the path
    written, None for stdout. A path that cannot be written is bad input."""
    from orchestrator.reports.files import write_private

    if path == STDOUT:
        sys.stdout.write(text)
        return None
    try:
        return write_private(path, text)
    except OSError as exc:
        raise bad_input(f"cannot write {path}: {exc.strerror or exc}") from None


def rendered(report: Report, fmt: str) -> str:
    """``report`` in ``fmt``, by the renderer of its family (a campaign's, a search's)."""
    from orchestrator.reports.renderer import render

    return render(report, fmt)


def other_report(db: Store, given: str, store: str) -> Report:
    """``--compare``'s B: a campaign of the store (an id, a prefix, ``last``), or the file of a
    report saved with ``--format json``."""
    from orchestrator.cli.common import resolve_id
    from orchestrator.reports.campaign.build import build_report
    from orchestrator.reports.campaign.model import Report

    saved = Path(given)
    if saved.suffix.lower() == ".json" and saved.is_file():
        try:
            return Report.from_json(json.loads(saved.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise bad_input(f"{given}: not a report saved with --format json ({exc})") from None
    return build_report(db, resolve_id(db, given, store))


def compared(a: Report, b: Report, fmt: str) -> str:
    from orchestrator.reports.campaign.compare import NotComparable, compare
    from orchestrator.reports.renderer import render

    if fmt not in formats("compare"):
        raise bad_input(f"--compare writes {either(formats('compare'))}, not {fmt}")
    try:
        comparison = compare(a, b)
    except NotComparable as exc:
        raise bad_input(str(exc)) from None
    return render(comparison, fmt)


def write_index(db: Store, directory: Path | None, fmt: str | None, shown_store: str) -> Path:
    """Every campaign's HTML report and the index page into ``directory``; the index's path."""
    from orchestrator.reports.campaign.index import write_index as write

    if directory is None or directory == STDOUT:
        raise bad_input("--index writes a directory: give it with -o DIR")
    if fmt not in (None, "html"):
        raise bad_input("--index writes HTML reports and an HTML index: no --format")
    try:
        return write(db, directory, shown_store)[-1]
    except OSError as exc:
        raise bad_input(f"cannot write {directory}: {exc.strerror or exc}") from None


def write_beside(db: Store, campaign_id: str, html: Path) -> dict[str, Path]:
    """The demo's reports from one report model: the HTML page, and beside it the Markdown
    (``.md``) and JUnit (``.xml``) files; their paths by name (html, markdown, junit)."""
    from orchestrator.reports.campaign.build import build_report
    from orchestrator.reports.files import write_private
    from orchestrator.reports.renderer import renderer

    report = build_report(db, campaign_id)
    written = {}
    for name, fmt in (("html", "html"), ("markdown", "md"), ("junit", "junit")):
        made = renderer(fmt, report.family)
        suffix = html.suffix if fmt == "html" else made.suffix
        written[name] = write_private(html.with_suffix(suffix), made.render(report))
    return written
