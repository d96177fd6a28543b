"""`bisect sweep SWEEP.yaml`: one run of a regression sweep, its answer printed; exit 0 clean,
1 regression, 3 inconclusive, 4 skipped (another run holds the sweep), 2 bad input."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.cli.common import (
    JsonOption,
    StoreOption,
    app,
    emit_json,
    err,
    out,
    progress,
    store_json,
    user_errors,
)

if TYPE_CHECKING:
    from orchestrator.sweeps.run import SweepOutcome



@app.command()
def sweep(
    sweep_file: Annotated[Path, typer.Argument(help="The sweep YAML file.")],
    store: StoreOption = "bisect.db",
    accept: Annotated[bool, typer.Option(
        "--accept", help="Make this run the sweep's baseline (a run without a regression).")]
    = False,
    force: Annotated[bool, typer.Option(
        "--force", help="With --accept: accept a run that found a regression.")] = False,
    schedule: Annotated[str | None, typer.Option(
        "--schedule", hidden=True, help="The schedule that started this run.")] = None,
    report: Annotated[Path | None, typer.Option(
        "--report", "-o", help="Write this run's report (html, or .md/.xml/.json by the "
        "suffix; `bisect sweep-report` writes it again).")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Only validate the sweep file: nothing runs, nothing is stored.")]
    = False,
    as_json: JsonOption = False,
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", envvar="RAY_ADDRESS", help="Join this Ray cluster.")] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", min=-(2**63), max=2**63 - 1,
        help="Replay a run's draw (the seed its JSON and `bisect show` print). Default: a "
        "fresh draw per run (from the sweep file's workload.seed and the run's number, where "
        "it sets one).")] = None,
) -> None:
    """Run a regression sweep once: each variant against the baseline (the last accepted run),
    a difference confirmed on fresh trials before it is a regression."""
    from db.store import Store
    from experiments.sweep import load_sweep
    from orchestrator.sweeps.hunt import hunt_commits
    from orchestrator.sweeps.run import run_sweep

    if as_json and report is not None and str(report) == "-":
        raise typer.BadParameter("stdout holds the --json document: write the report to a file",
                                 param_hint="'-o'")
    with user_errors():
        spec = load_sweep(sweep_file)
        if check:
            out.print(f"{sweep_file}: ok — sweep {spec.name}, {len(spec.variants)} variant(s), "
                      f"{len(spec.pools)} pool(s)", highlight=False, markup=False)
            return
        with Store.open(store) as db:
            try:
                outcome = run_sweep(db, spec, str(sweep_file), accept=accept, force=force,
                                    trigger="manual" if schedule is None else "schedule",
                                    schedule=schedule, progress=progress,
                                    ray_address=ray_address,
                                    hunt=hunt_commits if spec.hunt is not None else None,
                                    seed=seed)
            except KeyboardInterrupt:
                progress("interrupted: the run is stored as interrupted; its trials are kept")
                raise typer.Exit(130) from None
            document = outcome_json(outcome, store)
            if as_json:
                emit_json(document)
            else:
                print_outcome(document)
            if report is not None and outcome.run.campaign_id is not None:
                from orchestrator.cli.sweep_report_view import write_sweep_report

                write_sweep_report(db, spec.name, outcome.run.seq, report, None,
                                   err if as_json else out)
    raise typer.Exit(outcome.exit_code)


def outcome_json(outcome: SweepOutcome, store: str) -> dict[str, Any]:
    run = outcome.run
    return {"sweep": run.sweep, "run": run.seq, "run_id": run.id, "status": outcome.status,
            "accepted": outcome.accepted, "baseline_run_id": run.baseline_run_id,
            "campaign": run.campaign_id, "store": store_json(store), **outcome.result}


def print_outcome(document: dict[str, Any]) -> None:
    from orchestrator.core.strategies.sweep_judged import STATES

    say = lambda text: out.print(text, highlight=False, markup=False)  # noqa: E731
    say(f"sweep {document['sweep']} run {document['run']}: {document['status']}"
        + (f": {document['reason']}" if document.get("reason") else ""))
    for variant in document.get("variants", []):
        say(f"  {variant['name']}: {STATES.get(variant['state'], variant['state'])} "
            f"({variant['trials']} trial(s))")
        for c in variant["confirmation"] or variant["comparisons"]:
            say(f"    {c['metric']}: {c['answer']} {_change(c)}")
    for fact in document.get("changed_facts", []):
        say(f"  changed on {fact['node']}: {fact['fact']} {fact['baseline']} -> {fact['now']}")
    for setting in document.get("changed_settings", []):
        say(f"  changed in the sweep file: {setting.get('service') or setting.get('level')}")
    if hunt := document.get("hunt"):
        say(f"  hunt: {hunt.get('reason', '')} (campaign {hunt.get('campaign')})")
    if document.get("campaign"):
        say(f"  trials: bisect show {document['campaign']} --store {document['store']}")


def _change(c: dict[str, Any]) -> str:
    if c["metric"] in ("corruption", "wedging"):
        return f"{c['baseline']:.1%} -> {c['current']:.1%}"
    from orchestrator.core.stats.regression import moved

    return f"{moved(c['metric'], c['change']):+.1%}"  # as it moved: a throughput drop negative
