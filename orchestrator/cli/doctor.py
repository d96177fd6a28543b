"""`bisect doctor ID`: check a campaign's store (and, with --nodes, its nodes' locks)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from orchestrator.cli.common import (
    CampaignId,
    JsonOption,
    StoreOption,
    app,
    emit_json,
    out,
    reading,
    resolve_id,
)

_MARK = {"error": ("ERROR", "red"), "warning": ("fix", "yellow"), "info": ("note", "cyan")}


@app.command()
def doctor(
    campaign_id: CampaignId, store: StoreOption = "bisect.db", as_json: JsonOption = False,
    nodes: Annotated[bool, typer.Option(
        "--nodes", help="Also read each node's lock file (connects to the campaign's nodes).")]
    = False,
) -> None:
    """Check a campaign's store: no damage, orphan or half-written trial, no stale lock; and say
    what to do. Exit 0 when nothing needs a hand, 1 otherwise."""
    from db.errors import NotFound, StoreError
    from orchestrator.doctor import diagnose

    with reading(store) as db:
        try:
            campaign_id = resolve_id(db, campaign_id, store)
        except NotFound:
            raise
        except StoreError:  # a store too damaged to list: the diagnosis says what is wrong
            pass
        diagnosis = diagnose(db, campaign_id, nodes=nodes, store_arg=store)
    if as_json:
        emit_json(diagnosis.as_dict())
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
