"""`bisect optimize CAMPAIGN.yaml`: the fastest configuration that stays clean, and how a
search's answer is printed (the ranked safe configurations, the rejected fast ones)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli.campaigns import JsonOption, RayAddress, ReportOption, SeedOption, run_new
from orchestrator.cli.common import StoreOption, app, error, out, user_errors

SHOWN = 5  # rows of each table printed; the report and --json hold them all


@app.command()
def optimize(
    campaign_file: Annotated[Path, typer.Argument(
        help="The campaign YAML file (strategy kind optimize).")],
    store: StoreOption = "bisect.db",
    report: ReportOption = None,
    as_json: JsonOption = False,
    ray_address: RayAddress = None,
    seed: SeedOption = None,
) -> None:
    """Search the factors and knobs for the fastest configuration proven clean (Optuna; the
    study is next to the store: `optuna-dashboard` opens it)."""
    from experiments.campaign_load import load_campaign

    with user_errors():
        campaign = load_campaign(campaign_file)
        if campaign.strategy.kind != "optimize":
            error(f"{campaign_file}: strategy.kind: `bisect optimize` searches with the optimize "
                  f"strategy (this campaign's is {campaign.strategy.kind}: `bisect run` it)")
            raise typer.Exit(2)
        run_new(campaign, str(campaign_file), store, report, as_json, ray_address, seed)


def _objectives(row: dict[str, Any]) -> str:
    shown = []
    for e in row["objectives"]:
        if e["mean"] is None:
            shown.append(f"{e['metric']} –")
            continue
        ci = "" if e["ci"] is None else f" [{e['ci'][0]:.4g}, {e['ci'][1]:.4g}]"
        shown.append(f"{e['metric']} {e['mean']:.4g}{ci} {e['unit']}")
    return "; ".join(shown)


def print_search(document: dict[str, Any]) -> None:
    """The search's answer under the verdict line: best first, then what was rejected."""
    ranked, rejected = document["ranked"], document["rejected"]
    if ranked:
        out.print("  safe configurations, best first:", highlight=False)
    for row in ranked[:SHOWN]:
        mark = "" if row["confirmed"] else " (unconfirmed)"
        corruption = row["corruption"]
        out.print(f"    {row['key']}: {_objectives(row)}; corruption "
                  f"{corruption['failed']}/{corruption['judged']} (upper "
                  f"{corruption['upper']:.1%} < {corruption['limit']:.1%}); "
                  f"{row['trials']} trials{mark}", highlight=False, markup=False)
    if rejected:
        out.print("  rejected (not proven safe), fastest first:", highlight=False)
    for row in rejected[:SHOWN]:
        out.print(f"    {row['key']}: {_objectives(row)}; {'; '.join(row['why'])}",
                  highlight=False, markup=False)
    versus = document.get("versus_production")
    if versus is not None:  # the answer against production measured in the same run
        from orchestrator.reports.search.model import versus_from_json
        from orchestrator.reports.search.text import labelled, versus_text

        compared = versus_from_json(versus)
        assert compared is not None
        standing = "shown better" if compared.shown_better else "no better"
        out.print(f"  against production ({standing}): {labelled(compared.production or {})}: "
                  f"{versus_text(compared, document['limits']['alpha'])}",
                  highlight=False, markup=False)
    trials = document["trials"]
    out.print(f"  search: {trials['search']} trials, confirmation {trials['confirmation']}, "
              f"final pairs with production {trials.get('final', 0)}, "
              f"{trials['stopped_early']} stopped early ({document['sampler']})",
              highlight=False, markup=False)
