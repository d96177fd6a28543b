"""`bisect doctor ID`: check a campaign's store (and, with --nodes, its nodes' locks)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.text import Text

from db.store import Store
from orchestrator.cli.common import JsonOption, StoreOption, app, out, user_errors

_MARK = {"error": ("ERROR", "red"), "warning": ("fix", "yellow"), "info": ("note", "cyan")}


@app.command()
def doctor(
    campaign_id: str, store: StoreOption = "bisect.db", as_json: JsonOption = False,
    nodes: Annotated[bool, typer.Option(
        "--nodes", help="Also read each node's lock file (connects to the campaign's nodes).")]
    = False,
) -> None:
    """Check a campaign's store: no damage, orphan or half-written trial, no stale lock; and say
    what to do. Exit 0 when nothing needs a hand, 1 otherwise."""
    from orchestrator.doctor import diagnose

    with user_errors(), Store.open(store) as db:
        diagnosis = diagnose(db, campaign_id, nodes=nodes, store_arg=store)
    if as_json:
        print(json.dumps(diagnosis.as_dict(), indent=2))
    else:
        out.print(Text(f"campaign {diagnosis.campaign_id}: {diagnosis.status}, "
                       f"{diagnosis.trials} done trials"))
        for finding in diagnosis.findings:
            label, style = _MARK[finding.severity]
            line = Text(f"  {label}: ", style=style) + Text(finding.message)
            if finding.advice:
                line += Text(f"\n        {finding.advice}")
            out.print(line, highlight=False)
        out.print("healthy: nothing to do" if diagnosis.healthy else "needs a hand (above)",
                  highlight=False, markup=False)
    if not diagnosis.healthy:
        raise typer.Exit(1)
