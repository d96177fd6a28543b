"""Commands that run campaigns: the demo, a new campaign, a commit range, a resume; unlock."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import (
    CampaignId,
    StoreOption,
    app,
    err,
    error,
    exit_code,
    out,
    program,
    progress,
    resolve_id,
    resumable,
    shown_path,
    store_arg,
    store_json,
    user_errors,
)
from orchestrator.cli.verdict_view import print_verdict

if TYPE_CHECKING:
    from db.store import Store
    from experiments.campaign import Campaign
    from orchestrator.core.verdict import Verdict

JsonOption = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document on stdout (the verdict, the store and report "
    "paths); progress stays on stderr.")]
RayAddress = Annotated[str | None, typer.Option(
    "--ray-address", envvar="RAY_ADDRESS",
    help="Join this Ray cluster (pool actors and load run there); default: Ray on this machine.")]
ReportOption = Annotated[Path | None, typer.Option(
    "--report", "-o", help="Write the HTML report to this file.")]
SeedOption = Annotated[int | None, typer.Option(
    "--seed", min=-(2**63), max=2**63 - 1,
    help="Replay a run's draw: its trials send the sessions that run's trials sent (the seed "
    "`bisect show` and `verdict --json` print). Default: the file's workload.seed if it sets "
    "one, else a fresh draw per run.")]


def _finish_run(db: Store, campaign_id: str, verdict: Verdict, report: Path | None,
                as_json: bool, store: str, demo: bool = False) -> None:
    from orchestrator.reports.campaign.html import write_report
    from orchestrator.stored import campaign_seed

    beside: dict[str, Path] = {}
    if report is not None and demo:  # and its Markdown and JUnit files beside it
        from orchestrator.cli.report_view import write_beside

        beside = write_beside(db, campaign_id, report)
        report = beside.pop("html")
    elif report is not None:
        report = write_report(db, campaign_id, report)
    paths = {"store": store_json(store),  # and the report, where one was written
             **({"report": str(report.resolve())} if report is not None else {}),
             **{name: str(path.resolve()) for name, path in beside.items()}}
    print_verdict(verdict, campaign_id, as_json, paths, seed=campaign_seed(db, campaign_id))
    if report is not None and not as_json and not demo:  # the demo says it with the rest
        out.print(f"report: {report}", highlight=False, markup=False)
    _run_on(db, campaign_id, verdict, store, as_json)


def _run_on(db: Store, campaign_id: str, verdict: Verdict, store: str, as_json: bool) -> None:
    """Where the verdict is `inconclusive` at its budget: the resume that runs on from here."""
    from orchestrator.budgets import budget_spent

    larger = budget_spent(verdict, campaign_id, db)
    if larger is not None:  # under --json, stdout holds the one document
        (err if as_json else out).print(
            f"next: {program()} resume {campaign_id} --store {store_arg(store)} {larger}    "
            "# the budget is spent: run on from these trials", highlight=False, markup=False)


def _run(db: Store, campaign_id: str, store: str, report: Path | None, as_json: bool,
         ray_address: str | None, demo: bool = False) -> None:
    """Run (or go on with) a stored campaign to its verdict, print it; Ctrl-C stops it."""
    from orchestrator.executor.driver import run_campaign

    with resumable(campaign_id, store):
        verdict = run_campaign(db, campaign_id, progress=progress, ray_address=ray_address)
    _finish_run(db, campaign_id, verdict, report, as_json, store, demo)
    raise typer.Exit(exit_code(verdict))


def run_new(campaign: Campaign, source: str, store: str, report: Path | None, as_json: bool,
            ray_address: str | None, seed: int | None = None) -> None:
    """Store a new campaign, say where, run it to its verdict, print it (and the report).
    ``seed``: its run seed (``--seed``); None: the file's, or a fresh draw."""
    from db.store import Store
    from experiments.secrets import SecretMissing
    from orchestrator.executor.driver import read_secrets
    from orchestrator.stored import campaign_seed, create_campaign

    try:  # a missing secret is bad input: no campaign is created
        read_secrets(campaign)
    except SecretMissing as exc:
        raise SecretMissing(f"{source}: {exc}") from None
    with Store.open(store) as db:
        campaign_id = create_campaign(db, campaign, source, seed=seed)
        progress(f"campaign {campaign_id}: {campaign.name}")
        progress(f"seed: {campaign_seed(db, campaign_id)} (`--seed` replays this draw)")
        progress(f"store: {store_arg(store)}")
        _run(db, campaign_id, store, report, as_json, ray_address)


def _not_started() -> typer.Exit:
    err.print("interrupted before a campaign was stored: nothing to resume", highlight=False)
    return typer.Exit(130)


def _demo_next(campaign_id: str, store: str, report: Path, as_json: bool) -> None:
    """Where the demo left its campaign, and the commands that read it (as printed, they work
    from this directory)."""
    at, bisect = f"{campaign_id} --store {store_arg(store)}", program()
    lines = [f"store: {store_arg(store)}", f"report: {shown_path(report)} (open it in a browser)",
             f"markdown: {shown_path(report.with_suffix('.md'))} (for a pull request or an "
             "issue)", f"junit: {shown_path(report.with_suffix('.xml'))} (for CI)",
             "next:",
             f"  {bisect} log {at}      # every comparison the strategy made",
             f"  {bisect} show {at}     # every trial",
             f"  {bisect} report {at} -o bisect-report.html"]
    for line in lines:  # under --json, stdout holds the one document
        (err if as_json else out).print(line, highlight=False, markup=False)


@app.command()
def demo(
    directory: Annotated[Path, typer.Option(
        "--dir", help="Where the demo keeps its files (its store is DIR/bisect.db).")]
    = Path("bisect-demo"),
    as_json: JsonOption = False,
    ray_address: RayAddress = None,
) -> None:
    """Run a complete campaign against twin nodes on this machine (no GPU needed)."""
    from db.store import Store
    from orchestrator.demo import prepare_demo
    from orchestrator.stored import create_campaign

    with user_errors():
        directory = directory.resolve()
        campaign = prepare_demo(directory)
        store, report = str(directory / "bisect.db"), directory / "report.html"
        with Store.open(store) as db:
            campaign_id = create_campaign(db, campaign, "demo")
            progress(f"campaign {campaign_id}: {campaign.name}")
            progress(f"store: {store_arg(store)}")
            try:
                _run(db, campaign_id, store, report, as_json, ray_address, demo=True)
            except typer.Exit as done:
                if done.exit_code in (0, 3):
                    _demo_next(campaign_id, store, report, as_json)
                raise


@app.command()
def run(
    campaign_file: Annotated[Path, typer.Argument(help="The campaign YAML file.")],
    store: StoreOption = "bisect.db",
    report: ReportOption = None,
    as_json: JsonOption = False,
    ray_address: RayAddress = None,
    seed: SeedOption = None,
) -> None:
    """Run a campaign to its verdict (Ctrl-C stops it; `bisect resume` goes on)."""
    from experiments.campaign_load import load_campaign
    from orchestrator.executor.commit_range import expand_commits  # reaches the nodes (SSH)

    with user_errors():
        campaign = load_campaign(campaign_file)
        if campaign.commits is not None:  # the range becomes the factor `commit`, resolved now
            try:
                campaign = expand_commits(campaign)
            except KeyboardInterrupt:
                raise _not_started() from None
        run_new(campaign, str(campaign_file), store, report, as_json, ray_address, seed)


@app.command()
def commits(
    campaign_file: Annotated[Path, typer.Argument(help="The campaign YAML file.")],
    good: Annotated[str, typer.Option("--good", help="A commit (or ref) known good.")],
    bad: Annotated[str, typer.Option("--bad", help="A later commit (or ref) known bad.")],
    store: StoreOption = "bisect.db",
    report: ReportOption = None,
    as_json: JsonOption = False,
    ray_address: RayAddress = None,
    seed: SeedOption = None,
) -> None:
    """Find the first bad commit between --good and --bad (the campaign's `commits:` section
    names the tree, build and fixed levels)."""
    from experiments.campaign_load import load_campaign
    from orchestrator.executor.commit_range import expand_commits  # reaches the nodes (SSH)

    with user_errors():
        try:
            campaign = expand_commits(load_campaign(campaign_file), good=good, bad=bad)
        except KeyboardInterrupt:
            raise _not_started() from None
        progress(f"{len(campaign.factor('commit').levels)} commits from {good} to {bad}")
        run_new(campaign, str(campaign_file), store, report, as_json, ray_address, seed)


@app.command()
def resume(
    campaign_id: CampaignId, store: StoreOption = "bisect.db", as_json: JsonOption = False,
    report: ReportOption = None,
    ray_address: RayAddress = None,
    max_trials: Annotated[int | None, typer.Option(
        "--max-trials", min=1, help="Raise the campaign's budget of trials "
        "(`strategy.max_trials`) first: an inconclusive verdict at its budget runs on.")] = None,
    per_variant: Annotated[int | None, typer.Option(
        "--max-trials-per-variant", min=1, help="Raise a variant's budget of trials "
        "(`strategy.max_trials_per_variant`, adaptive) first.")] = None,
) -> None:
    """Continue an interrupted campaign from what the store holds (or, with a larger budget, one
    that ended inconclusive at its budget)."""
    from db.store import Store
    from orchestrator.budgets import PER_CAMPAIGN, PER_VARIANT, raise_budget

    wanted = {field: value for field, value in ((PER_CAMPAIGN, max_trials),
                                                (PER_VARIANT, per_variant)) if value is not None}
    with user_errors(), Store.open(store, create=False) as db:
        campaign_id = resolve_id(db, campaign_id, store)
        for raised in raise_budget(db, campaign_id, wanted):
            progress(f"budget raised: {raised.said()}")
        _run(db, campaign_id, store, report, as_json, ray_address)


@app.command()
def unlock(
    campaign_file: Annotated[Path, typer.Argument(help="The campaign file that names the node.")],
    node: Annotated[str, typer.Argument(help="The node to unlock.")],
    holder: Annotated[str, typer.Option("--holder", help="The campaign id holding the lock.")],
    store: Annotated[str | None, typer.Option(
        "--store", envvar="BISECT_STORE", help="Also mark the lock released in this store.")]
    = None,
) -> None:
    """Break a node's lock left by a campaign whose driver is gone (name it: a live campaign's
    lock is never removed by mistake)."""
    from db.store import Store
    from deploy.locks import NodeLocked, break_lock
    from deploy.transports.factory import transport_for
    from experiments.campaign_load import load_campaign

    with user_errors():
        campaign = load_campaign(campaign_file)
        spec = next((n for n in campaign.nodes if n.name == node), None)
        if spec is None:
            error(f"{campaign_file}: no node named {node!r}")
            raise typer.Exit(2)
        transport = transport_for(spec)
        try:
            removed = break_lock(transport, node, spec.workdir, holder)
        except NodeLocked as exc:
            error(str(exc))
            raise typer.Exit(1) from None
        finally:
            transport.close()
    out.print(f"{node}: " + ("lock of " + removed.describe() + " removed" if removed
                             else "was not locked"), highlight=False, markup=False)
    if store is not None:
        with user_errors(), Store.open(store, create=False) as db:
            db.lock_released(holder, node)
