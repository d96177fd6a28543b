"""Commands about campaigns: run them, resume them, read their verdicts, reports and trails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Column, Table
from rich.text import Text

from db.records import GeneratorRecord, TrialRecord
from db.store import Store
from experiments.campaign import Campaign, load_campaign
from experiments.outcomes import WEDGE_LOG_KINDS, is_corrupt, is_infra
from experiments.secrets import SecretMissing
from orchestrator.cli.common import (
    JsonOption,
    StoreOption,
    app,
    error,
    exit_code,
    out,
    progress,
    user_errors,
)
from orchestrator.core.evidence import variant_key
from orchestrator.core.verdict import Verdict

RayAddress = Annotated[str | None, typer.Option(
    "--ray-address", envvar="RAY_ADDRESS",
    help="Join this Ray cluster (pool actors and load run there); default: Ray on this machine.")]


def _print_verdict(verdict: Verdict, campaign_id: str, as_json: bool) -> None:
    document = verdict.to_json()
    if as_json:
        print(json.dumps({"campaign": campaign_id, **document}, indent=2))
        return
    # Level names come from the campaign file and reasons from servers: never rich markup.
    out.print(Text("verdict", style="bold") + Text(f" {document['status']}: {document['reason']}"),
              highlight=False)
    for culprit in document["culprits"]:
        levels = " AND ".join(f"{f}={lvl}" for f, lvl in culprit["factors"].items())
        out.print(
            f"  culprit {levels}: {culprit['rate_with']:.1%} vs {culprit['rate_without']:.1%} "
            f"(effect {culprit['effect']:+.1%}, 95% CI {culprit['ci95'][0]:+.1%}…"
            f"{culprit['ci95'][1]:+.1%}, p={culprit['p_value']:.2g})",
            highlight=False, markup=False,
        )
    cost = document["cost"]
    out.print(
        f"  cost: {cost['trials']} trials, {cost['restarts']} restarts, {cost['sessions']} "
        f"sessions, {cost['wall_s']:.0f} s here, {cost['gpu_s_equivalent']:.0f} GPU-s real-world",
        highlight=False,
    )


def _finish_run(store: Store, campaign_id: str, verdict: Verdict, report: Path | None,
                as_json: bool) -> None:
    from orchestrator.reports.html import write_report

    if report is not None:
        write_report(store, campaign_id, report)
    _print_verdict(verdict, campaign_id, as_json)
    if report is not None and not as_json:
        out.print(f"report: {report}", highlight=False, markup=False)
    raise typer.Exit(exit_code(verdict))


def _run_new(campaign: Campaign, source: str, store: str, report: Path | None, as_json: bool,
             ray_address: str | None) -> None:
    """Store a new campaign, run it to its verdict, print it (and the report)."""
    from orchestrator.executor.driver import read_secrets, run_campaign
    from orchestrator.stored import create_campaign

    try:  # a missing secret is bad input: no campaign is created
        read_secrets(campaign)
    except SecretMissing as exc:
        raise SecretMissing(f"{source}: {exc}") from None
    with Store.open(store) as db:
        campaign_id = create_campaign(db, campaign, source)
        progress(f"campaign {campaign_id}: {campaign.name}")
        verdict = run_campaign(db, campaign_id, progress=progress, ray_address=ray_address)
        _finish_run(db, campaign_id, verdict, report, as_json)


@app.command()
def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where the demo keeps its files.")] = (
        Path("bisect-demo")
    ),
    as_json: JsonOption = False,
    ray_address: RayAddress = None,
) -> None:
    """Run a complete campaign against twin nodes on this machine (no GPU needed)."""
    from orchestrator.demo import prepare_demo
    from orchestrator.executor.driver import run_campaign
    from orchestrator.stored import create_campaign

    with user_errors():
        directory = directory.resolve()
        campaign = prepare_demo(directory)
        with Store.open(str(directory / "bisect.db")) as store:
            campaign_id = create_campaign(store, campaign, "demo")
            progress(f"campaign {campaign_id}: {campaign.name}")
            verdict = run_campaign(store, campaign_id, progress=progress, ray_address=ray_address)
            _finish_run(store, campaign_id, verdict, directory / "report.html", as_json)


@app.command()
def run(
    campaign_file: Annotated[Path, typer.Argument(help="The campaign YAML file.")],
    store: StoreOption = "bisect.db",
    report: Annotated[Path | None, typer.Option("--report", "-o", help="Write the HTML report.")]
    = None,
    as_json: JsonOption = False,
    ray_address: RayAddress = None,
) -> None:
    """Run a campaign to its verdict."""
    from orchestrator.executor.commit_range import expand_commits  # reaches the nodes (SSH)

    with user_errors():
        campaign = load_campaign(campaign_file)
        if campaign.commits is not None:  # the range becomes the factor `commit`, resolved now
            campaign = expand_commits(campaign)
        _run_new(campaign, str(campaign_file), store, report, as_json, ray_address)


@app.command()
def commits(
    campaign_file: Annotated[Path, typer.Argument(help="The campaign YAML file.")],
    good: Annotated[str, typer.Option("--good", help="A commit (or ref) known good.")],
    bad: Annotated[str, typer.Option("--bad", help="A later commit (or ref) known bad.")],
    store: StoreOption = "bisect.db",
    report: Annotated[Path | None, typer.Option("--report", "-o", help="Write the HTML report.")]
    = None,
    as_json: JsonOption = False,
    ray_address: RayAddress = None,
) -> None:
    """Find the first bad commit between --good and --bad (the campaign's `commits:` section
    names the tree, build and fixed levels)."""
    from orchestrator.executor.commit_range import expand_commits  # reaches the nodes (SSH)

    with user_errors():
        campaign = expand_commits(load_campaign(campaign_file), good=good, bad=bad)
        progress(f"{len(campaign.factor('commit').levels)} commits from {good} to {bad}")
        _run_new(campaign, str(campaign_file), store, report, as_json, ray_address)


@app.command()
def resume(
    campaign_id: str, store: StoreOption = "bisect.db", as_json: JsonOption = False,
    report: Annotated[Path | None, typer.Option("--report", "-o", help="Write the HTML report.")]
    = None,
    ray_address: RayAddress = None,
) -> None:
    """Continue an interrupted campaign from what the store holds."""
    from orchestrator.executor.driver import run_campaign

    with user_errors(), Store.open(store) as db:
        db.get_campaign(campaign_id)
        verdict = run_campaign(db, campaign_id, progress=progress, ray_address=ray_address)
        _finish_run(db, campaign_id, verdict, report, as_json)


@app.command()
def verdict(
    campaign_id: str, store: StoreOption = "bisect.db", as_json: JsonOption = False
) -> None:
    """Recompute and print a campaign's verdict from its stored trials."""
    from orchestrator.stored import verdict_of

    with user_errors(), Store.open(store) as db:
        result = verdict_of(db, campaign_id)
        _print_verdict(result, campaign_id, as_json)
        raise typer.Exit(exit_code(result))


@app.command()
def report(
    campaign_id: str,
    output: Annotated[Path, typer.Option("--output", "-o")] = Path("bisect-report.html"),
    store: StoreOption = "bisect.db",
) -> None:
    """Write a campaign's HTML report."""
    from orchestrator.reports.html import write_report

    with user_errors(), Store.open(store) as db:
        path = write_report(db, campaign_id, output)
    out.print(f"report: {path}", highlight=False, markup=False)


@app.command("ls")
def list_campaigns(store: StoreOption = "bisect.db", as_json: JsonOption = False) -> None:
    """List the campaigns in the store."""
    with user_errors(), Store.open(store) as db:
        rows: list[dict[str, str]] = [
            {"id": c.id, "name": c.name, "status": c.status, "created_at": c.created_at.isoformat(),
             "trials": str(len(db.trials(c.id)))}
            for c in db.list_campaigns()
        ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("id", "name", "status", "trials", "created")
    for row in rows:
        table.add_row(*(Text(str(row[k])) for k in ("id", "name", "status", "trials",
                                                     "created_at")))
    out.print(table)


@app.command("log")
def decision_log(campaign_id: str, store: StoreOption = "bisect.db",
                 as_json: JsonOption = False) -> None:
    """The decision trail: every comparison the strategy made, its counts and its answer."""
    from orchestrator.stored import verdict_of

    with user_errors(), Store.open(store) as db:
        trail = verdict_of(db, campaign_id).to_json()["log"]
    if as_json:
        print(json.dumps(trail, indent=2))
        return
    if not trail:
        out.print("no decision trail: this strategy runs a fixed design (see `bisect show`)")
    for index, step in enumerate(trail, start=1):  # one line a step: readable at any width
        variant = ",".join(f"{f}={lvl}" for f, lvl in step["levels"].items())
        unfinished = f" (+{step['unfinished']} unfinished)" if step.get("unfinished") else ""
        out.print(f"{index:3} {step['phase']:<22} {step['answer']:<17} "
                  f"{step['corrupted']}/{step['sessions']}{unfinished} in {step['trials']} "
                  "trial(s)  "
                  f"p(worse than good)={step['p_fail']:.2g} "
                  f"p(better than bad)={step['p_pass']:.2g}  {variant}"
                  + (f"  cannot be deployed: {step['reason']}" if "reason" in step else ""),
                  highlight=False, markup=False)


def _load(trial: TrialRecord, generators: list[GeneratorRecord], spread: bool) -> str:
    """Where a trial's sessions ran: each load generator's address with its sessions finished
    of given, or ``driver`` (the pool's actor, on the driver's machine, ran them)."""
    if generators:
        shares = []
        for g in generators:
            stopped = " stopped" if g.stopped else ""
            shares.append(f"{g.address} {g.finished}/{g.sessions}{stopped}")
        return ", ".join(shares)
    if trial.status != "done":
        return ""  # nothing was stored of it
    # A campaign with generators whose trial has none stored: stored before they were recorded.
    return "not recorded" if spread else "driver"


@app.command()
def show(campaign_id: str, store: StoreOption = "bisect.db", as_json: JsonOption = False,
         with_steps: Annotated[bool, typer.Option(
             "--steps", help="Every step of every trial: its duration, outcome and what it "
             "observed (the proof of load's checks).")] = False) -> None:
    """Every trial of a campaign: variant, pool, status, counts, timings, where its load ran;
    and the variants skipped because they cannot be deployed (`git bisect skip`), with their
    reasons. ``--json`` has each trial's steps and performance figures."""
    from orchestrator.cli.steps_view import step_json, step_lines
    from orchestrator.stored import unresolvable

    with user_errors(), Store.open(store) as db:
        spread = bool(db.get_campaign(campaign_id).spec.get("generators"))
        trials = db.trials(campaign_id, status=None)
        generators = {t.id: db.generators(t.id) for t in trials}
        steps = db.campaign_steps(campaign_id)
    skipped = {variant_key(u.levels): u for u in unresolvable(trials)}
    rows = [
        {"seq": t.seq, "pool": t.pool, "status": t.status, "levels": t.levels,
         "counts": t.counts, "restarts": t.restarts, "wall_s": t.wall_s,
         "stopped_early": t.stopped_early, "error": t.error, "failure": t.failure,
         "log_events": t.events,
         "skipped": t.status == "failed" and variant_key(t.levels) in skipped,
         "generators": [{"node_id": g.node_id, "address": g.address, "sessions": g.sessions,
                         "finished": g.finished, "stopped": g.stopped}
                        for g in generators[t.id]],
         "steps": [step_json(step) for step in steps.get(t.id, [])],
         # what its workload measured (throughput, goodput, latency percentiles); null for a
         # trial not done, or stored before it was measured
         "performance": t.performance}
        for t in trials
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("seq", "pool", "status", "variant", "sessions", "corrupt/infra",
                  "wedge signs in logs", "wall s",
                  Column("load", overflow="fold"))  # an address folds, never cut short
    for t in trials:
        corrupt = sum(n for o, n in t.counts.items() if is_corrupt(o))
        infra = sum(n for o, n in t.counts.items() if is_infra(o))
        signs = ", ".join(f"{kind} {t.events[kind]}" for kind in WEDGE_LOG_KINDS
                          if t.events.get(kind))
        cells = [str(t.seq), t.pool, t.status + (" (early)" if t.stopped_early else ""),
                 ",".join(f"{f}={lvl}" for f, lvl in t.levels.items()),
                 str(t.sessions), f"{corrupt}/{infra}", signs,
                 f"{t.wall_s:.1f}" if t.wall_s is not None else "",
                 _load(t, generators[t.id], spread)]
        table.add_row(*map(Text, cells))  # names, levels, addresses: never markup
    out.print(table)
    for t in trials if with_steps else ():
        variant = ",".join(f"{f}={lvl}" for f, lvl in t.levels.items())
        lines = [line for step in steps.get(t.id, []) for line in step_lines(step)]
        out.print("\n".join([f"trial {t.seq} on {t.pool} ({variant}): {t.status}",
                             *(lines or ["  no steps stored"])]), highlight=False, markup=False)
    for u in skipped.values():
        variant = ",".join(f"{f}={lvl}" for f, lvl in u.levels.items())
        out.print(f"skipped {variant} ({u.attempts} attempts): {u.error.splitlines()[0]}",
                  highlight=False, markup=False)


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
    from deploy.locks import NodeLocked, break_lock
    from deploy.transports.factory import transport_for

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
        with Store.open(store) as db:
            db.lock_released(holder, node)
