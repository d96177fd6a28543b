"""Commands that read a store and change nothing: verdict, report, ls, log, show.

Each opens the store with ``reading`` (a missing one is "no store at PATH", never created) and
takes a campaign id whole, as a unique prefix, or as ``last``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from orchestrator.cli.common import (
    CampaignId,
    JsonOption,
    StoreOption,
    app,
    emit_json,
    exit_code,
    out,
    reading,
    resolve_id,
    store_arg,
    store_json,
)
from orchestrator.cli.verdict_view import print_verdict

if TYPE_CHECKING:
    from db.records import GeneratorRecord, TrialRecord


def _table_or_lines(table: Table, lines: list[str]) -> None:
    """The table where it fits the terminal at its natural width, else one line a row (as the
    terminal wraps it): an id, a variant or an address is never cut short."""
    from rich.measure import Measurement

    unbounded = out.options.update_width(1_000_000)  # the table's own width, not the screen's
    if Measurement.get(out, unbounded, table).maximum <= out.width:
        out.print(table)
        return
    for line in lines:
        out.print(line, highlight=False, markup=False)


@app.command()
def verdict(campaign_id: CampaignId, store: StoreOption = "bisect.db",
            as_json: JsonOption = False) -> None:
    """Recompute and print a campaign's verdict from its stored trials."""
    from orchestrator.stored import campaign_seed, verdict_of

    with reading(store) as db:
        campaign_id = resolve_id(db, campaign_id, store)
        result = verdict_of(db, campaign_id)
        print_verdict(result, campaign_id, as_json, {"store": store_json(store)},
                      seed=campaign_seed(db, campaign_id))
        raise typer.Exit(exit_code(result))


@app.command()
def report(
    campaign_id: Annotated[str | None, typer.Argument(
        metavar="[ID]", help="A campaign id, a unique prefix of one, or `last` (the newest); "
        "none with --index.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="The file to write, `-` for stdout (with --index: the "
        "directory). Default: bisect-report.html for html, stdout for md, junit and json.")]
    = None,
    fmt: Annotated[str | None, typer.Option(
        "--format", metavar="html|md|junit|json", help="The report's format: html (one "
        "self-contained page), md (a summary for a pull request or an issue), junit (one test "
        "case per variant, for CI), json (the report model). Default: from the output's "
        "suffix (.md, .xml, .json), else html.")] = None,
    compare_with: Annotated[str | None, typer.Option(
        "--compare", metavar="B", help="Compare campaign B (an id, a prefix, `last`, or a "
        "report saved with --format json) with ID, variant by variant: the change in rate, "
        "its interval and what changed between them.")] = None,
    index: Annotated[bool, typer.Option(
        "--index", help="Write every campaign's HTML report into the directory -o DIR, and "
        "an index page linking them (DIR/index.html).")] = False,
    store: StoreOption = "bisect.db",
    as_json: JsonOption = False,
) -> None:
    """Write a campaign's report (HTML, Markdown, JUnit XML or JSON), two campaigns compared,
    or an index of every campaign."""
    from orchestrator.cli.report_view import (
        STDOUT,
        bad_input,
        chosen_format,
        compared,
        deliver,
        destination,
        other_report,
        rendered,
        write_index,
    )

    if index and (campaign_id is not None or compare_with is not None):
        raise bad_input("--index reports every campaign: give no ID and no --compare")
    if not index and campaign_id is None:
        raise bad_input("give a campaign ID (or `last`), or --index -o DIR")
    kind = chosen_format(fmt, output)
    with reading(store) as db:
        if index:
            path: Path | None = write_index(db, output, fmt, store_arg(store))
            shown: dict[str, str] = {}
        else:
            from orchestrator.reports.campaign.build import build_report

            assert campaign_id is not None
            campaign_id = resolve_id(db, campaign_id, store)
            target = destination(output, kind, "bisect-compare" if compare_with else
                                 "bisect-report")
            if as_json and target == STDOUT:
                raise bad_input("--json names the file written: give -o FILE")
            this = build_report(db, campaign_id)
            if compare_with is not None:
                other = other_report(db, compare_with, store)
                text = compared(this, other, kind)
                shown = {"compare": other.campaign.id}
            else:
                text, shown = rendered(this, kind), {}
            path = deliver(text, target)
    if path is None:  # on stdout: the report is all stdout holds
        return
    if as_json:
        key = "index" if index else "report"
        emit_json({**({"campaign": campaign_id} if not index else {}), **shown,
                   "store": store_json(store), key: str(path.resolve())})
        return
    out.print(f"{'index' if index else 'report'}: {path}", highlight=False, markup=False)


@app.command("ls")
def list_campaigns(store: StoreOption = "bisect.db", as_json: JsonOption = False) -> None:
    """List the campaigns in the store, newest first."""
    with reading(store) as db:
        rows: list[dict[str, str | int]] = [
            {"id": c.id, "name": c.name, "status": c.status, "created_at": c.created_at.isoformat(),
             "trials": len(db.trials(c.id))}  # the done trials, as a number
            for c in db.list_campaigns()
        ]
    if as_json:
        emit_json(rows)
        return
    table = Table("id", "name", "status", "trials", "created")
    for row in rows:
        table.add_row(*(Text(str(row[k])) for k in ("id", "name", "status", "trials",
                                                     "created_at")))
    _table_or_lines(table, [f"{row['id']}  {row['status']}  {row['trials']} trials  "
                            f"{row['created_at']}  {row['name']}" for row in rows])


@app.command("log")
def decision_log(campaign_id: CampaignId, store: StoreOption = "bisect.db",
                 as_json: JsonOption = False) -> None:
    """The decision trail: every comparison the strategy made, its counts and its answer
    (p is – where no test was made: a reference variant, or a first look's other side)."""
    from orchestrator.stored import verdict_of

    with reading(store) as db:
        campaign_id = resolve_id(db, campaign_id, store)
        trail = verdict_of(db, campaign_id).log
    if as_json:
        emit_json([entry.to_json() for entry in trail])
        return
    if not trail:
        out.print("no decision trail: this strategy runs a fixed design (see `bisect show`)",
                  highlight=False, markup=False)
    for index, entry in enumerate(trail, start=1):
        out.print(f"{index:3} {entry.line()}", highlight=False, markup=False)


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
def show(campaign_id: CampaignId, store: StoreOption = "bisect.db", as_json: JsonOption = False,
         with_steps: Annotated[bool, typer.Option(
             "--steps", help="Every step of every trial: its duration, outcome and what it "
             "observed (the proof of load's checks).")] = False,
         with_output: Annotated[bool, typer.Option(
             "--output", help="Every run of the campaign's own probe (`workload: {command: "
             "...}`): its exit status and output (the last 64 KiB).")] = False) -> None:
    """Every trial of a campaign: variant, pool, status, counts, timings, where its load ran;
    and the variants skipped because they cannot be deployed or the probe skipped them (exit
    125; `git bisect skip`), with their reasons. `--json` has each trial's steps and
    performance figures (and, for a campaign's own probe, its runs with their output)."""
    from experiments.outcomes import WEDGE_LOG_KINDS, is_corrupt, is_infra
    from orchestrator.cli.probe_view import is_probe, probe_runs, run_lines
    from orchestrator.cli.steps_view import step_json, step_lines
    from orchestrator.core.evidence import variant_key
    from orchestrator.core.trail import variant_words
    from orchestrator.stored import unresolvable

    with reading(store) as db:
        campaign_id = resolve_id(db, campaign_id, store)
        spec = db.get_campaign(campaign_id).spec
        spread, probing = bool(spec.get("generators")), is_probe(spec)
        seed = (spec.get("workload") or {}).get("seed", 0)  # its run seed (the schema's default)
        trials = db.trials(campaign_id, status=None)
        generators = {t.id: db.generators(t.id) for t in trials}
        steps = db.campaign_steps(campaign_id)
        runs = {t.id: probe_runs(steps.get(t.id, []), db.sessions(t.id)) for t in trials
                if probing}
    skipped = {variant_key(u.levels): u for u in unresolvable(trials)}
    rows = [
        {"seq": t.seq, "pool": t.pool, "status": t.status, "levels": t.levels,
         "seed": t.seed,  # its sessions' seed: the campaign's run seed's (stored.trial_seed)
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
         "performance": t.performance,
         # the campaign's own probe: each run's exit status and output
         **({"probe": runs[t.id]} if probing else {})}
        for t in trials
    ]
    if as_json:
        emit_json(rows)
        return
    out.print(f"campaign {campaign_id}, seed {seed} (`--seed {seed}` replays its trials' "
              "sessions)", highlight=False, markup=False)
    table = Table("seq", "pool", "status", "variant", "sessions", "corrupt/infra",
                  "wedge signs in logs", "wall s", "load")
    lines = []
    for t in trials:
        corrupt = sum(n for o, n in t.counts.items() if is_corrupt(o))
        infra = sum(n for o, n in t.counts.items() if is_infra(o))
        signs = ", ".join(f"{kind} {t.events[kind]}" for kind in WEDGE_LOG_KINDS
                          if t.events.get(kind))
        cells = [str(t.seq), t.pool, t.status + (" (early)" if t.stopped_early else ""),
                 variant_words(t.levels),
                 str(t.sessions), f"{corrupt}/{infra}", signs,
                 f"{t.wall_s:.1f}" if t.wall_s is not None else "",
                 _load(t, generators[t.id], spread)]
        table.add_row(*map(Text, cells))  # names, levels, addresses: never markup
        seq, pool, status, variant, sessions, counts, signs, wall, load = cells
        lines.append(f"trial {seq} on {pool} ({variant}): {status}, {sessions} sessions, "
                     f"{counts} corrupt/infra" + (f", {wall} s" if wall else "")
                     + (f", load {load}" if load else "") + (f", wedge signs {signs}"
                                                             if signs else ""))
    _table_or_lines(table, lines)
    for t in trials if with_steps else ():
        variant = variant_words(t.levels)
        lines = [line for step in steps.get(t.id, []) for line in step_lines(step)]
        out.print("\n".join([f"trial {t.seq} on {t.pool} ({variant}): {t.status}",
                             *(lines or ["  no steps stored"])]), highlight=False, markup=False)
    for t in trials if with_output else ():
        variant = variant_words(t.levels)
        lines = run_lines(f"trial {t.seq} ({variant})", runs[t.id]) if probing \
            else [f"trial {t.seq} ({variant}): no probe (the campaign runs the stress workload)"]
        out.print("\n".join(lines), highlight=False, markup=False)
    for u in skipped.values():
        variant = variant_words(u.levels)
        out.print(f"skipped {variant} ({u.attempts} attempts): {u.why()}",
                  highlight=False, markup=False)
