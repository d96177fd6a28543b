"""`bisect sweep-report NAME`: the report of one run of a regression sweep (its last, or
``--run N``) in HTML, Markdown, JUnit XML or JSON, as `bisect report` writes a campaign's: the
format from ``--format`` or the output's suffix, ``-o -`` for stdout, bad input a sentence and
exit 2. An HTML report written to a file has its hunt's own report beside it
(``hunt-CAMPAIGN.html``), linked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import StoreOption, app, out, reading
from orchestrator.cli.report_view import STDOUT, bad_input, chosen_format, deliver, destination

if TYPE_CHECKING:
    from rich.console import Console

    from db.store import Store
    from orchestrator.reports.sweep.model import SweepReport


@app.command("sweep-report")
def sweep_report(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The sweep's name.")],
    run: Annotated[int | None, typer.Option(
        "--run", metavar="N", min=1, help="The run's number within the sweep (`bisect sweep` "
        "prints it). Default: the sweep's last run.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="The file to write, `-` for stdout. Default: "
        "bisect-sweep-report.html for html, stdout for md, junit and json.")] = None,
    fmt: Annotated[str | None, typer.Option(
        "--format", metavar="html|md|junit|json", help="html (one self-contained page), md (a "
        "pull request or issue comment), junit (a test case per variant and watched metric, "
        "failing on a confirmed regression), json (the report model). Default: from the "
        "output's suffix (.md, .xml, .json), else html.")] = None,
    store: StoreOption = "bisect.db",
) -> None:
    """Write the report of a sweep's run: its answer, each variant against the baseline, what
    changed, the hunt, the decision trail and the sweep's history."""
    with reading(store) as db:
        write_sweep_report(db, name, run, output, fmt)


def write_sweep_report(db: Store, name: str, run: int | None, output: Path | None,
                       fmt: str | None, console: Console = out) -> None:
    """Render and write the report of run ``run`` (None: the last) of sweep ``name``, and say
    where (`bisect sweep -o` after its run, `bisect sweep-report`)."""
    from orchestrator.reports.renderer import render
    from orchestrator.reports.sweep.build import build_sweep_report

    kind = chosen_format(fmt, output)
    target = destination(output, kind, "bisect-sweep-report")
    report = build_sweep_report(db, name, run)
    links: dict[str, str] = {}
    if kind == "html" and target != STDOUT:
        links = _hunt_reports(db, report, target)
    text = render(report, kind, **({"hunt_links": links} if kind == "html" else {}))
    path = deliver(text, target)
    if path is not None:
        console.print(f"report: {path}", highlight=False, markup=False)
        for written in links.values():
            console.print(f"hunt report: {path.with_name(written)}", highlight=False,
                          markup=False)


def _hunt_reports(db: Store, report: SweepReport, page: Path) -> dict[str, str]:
    """The hunt campaign's own report (``reports.campaign.html.write_report``) beside the
    sweep's page; its file name by campaign id. A hunt whose report cannot be made is named,
    unlinked, rather than failing the sweep's."""
    from orchestrator.cli.common import error
    from orchestrator.reports.campaign.html import write_report
    from orchestrator.reports.sweep.html import hunt_file_name

    hunt = report.hunt
    if hunt is None or hunt.campaign_id is None:
        return {}
    name = hunt_file_name(hunt.campaign_id)
    try:
        write_report(db, hunt.campaign_id, page.with_name(name))
    except OSError as exc:
        raise bad_input(f"cannot write {page.with_name(name)}: {exc.strerror or exc}") from None
    # A hunt campaign this version cannot report (as the index lists one with its reason)
    except Exception as exc:
        error(f"the hunt's report (campaign {hunt.campaign_id}) cannot be made: "
              f"{type(exc).__name__}: {exc}")
        return {}
    return {hunt.campaign_id: name}
