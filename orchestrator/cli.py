"""The `bisect` command line: parse, call one function, print. Progress goes to stderr.

Exit codes: 0 verdict reached, 1 the run failed, 2 bad input, 3 inconclusive.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from db.errors import NotFound, StoreError
from db.store import Store
from experiments.campaign import CampaignError, campaign_schema, load_campaign
from experiments.workload.spec import Arrival, WorkloadSpec
from orchestrator.verdict import Status, Verdict

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
def _user_errors() -> Iterator[None]:
    """Known failures become one sentence and an exit code; no traceback reaches a user."""
    from orchestrator.runner import RunFailed

    try:
        yield
    except CampaignError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    except NotFound as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    except (StoreError, RunFailed) as exc:
        _error(str(exc))
        raise typer.Exit(1) from None


def _error(message: str) -> None:
    """Print an error; its text may come from a user's file, so it is never read as markup."""
    err.print(Text("error: ", style="red") + Text(message), highlight=False)


def _progress(message: str) -> None:
    err.print(message, highlight=False, markup=False)


def _exit_code(verdict: Verdict) -> int:
    return 3 if verdict.status is Status.INCONCLUSIVE else 0


def _print_verdict(verdict: Verdict, campaign_id: str, as_json: bool) -> None:
    document = verdict.to_json()
    if as_json:
        print(json.dumps({"campaign": campaign_id, **document}, indent=2))
        return
    out.print(f"[bold]verdict[/bold] {document['status']}: {document['reason']}", highlight=False)
    for culprit in document["culprits"]:
        levels = " AND ".join(f"{f}={lvl}" for f, lvl in culprit["factors"].items())
        out.print(
            f"  culprit {levels}: {culprit['rate_with']:.1%} vs {culprit['rate_without']:.1%} "
            f"(effect {culprit['effect']:+.1%}, 95% CI {culprit['ci95'][0]:+.1%}…"
            f"{culprit['ci95'][1]:+.1%}, p={culprit['p_value']:.2g})",
            highlight=False,
        )
    cost = document["cost"]
    out.print(
        f"  cost: {cost['trials']} trials, {cost['restarts']} restarts, {cost['sessions']} "
        f"sessions, {cost['wall_s']:.0f} s here, {cost['gpu_s_equivalent']:.0f} GPU-s real-world",
        highlight=False,
    )


def _finish_run(store: Store, campaign_id: str, verdict: Verdict, report: Path | None,
                as_json: bool) -> None:
    from orchestrator.report import write_report

    if report is not None:
        write_report(store, campaign_id, report)
    _print_verdict(verdict, campaign_id, as_json)
    if report is not None and not as_json:
        out.print(f"report: {report}", highlight=False)
    raise typer.Exit(_exit_code(verdict))


@app.command()
def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where the demo keeps its files.")] = (
        Path("bisect-demo")
    ),
    as_json: JsonOption = False,
) -> None:
    """Run a complete campaign against twin nodes on this machine (no GPU needed)."""
    from orchestrator.demo import prepare_demo
    from orchestrator.runner import create_campaign, run_campaign

    with _user_errors():
        directory = directory.resolve()
        campaign = prepare_demo(directory)
        with Store.open(str(directory / "bisect.db")) as store:
            campaign_id = create_campaign(store, campaign, "demo")
            _progress(f"campaign {campaign_id}: {campaign.name}")
            verdict = run_campaign(store, campaign_id, progress=_progress)
            _finish_run(store, campaign_id, verdict, directory / "report.html", as_json)


@app.command()
def run(
    campaign_file: Annotated[Path, typer.Argument(help="The campaign YAML file.")],
    store: StoreOption = "bisect.db",
    report: Annotated[Path | None, typer.Option("--report", "-o", help="Write the HTML report.")]
    = None,
    as_json: JsonOption = False,
) -> None:
    """Run a campaign to its verdict."""
    from orchestrator.runner import create_campaign, run_campaign

    with _user_errors():
        campaign = load_campaign(campaign_file)
        with Store.open(store) as db:
            campaign_id = create_campaign(db, campaign, str(campaign_file))
            _progress(f"campaign {campaign_id}: {campaign.name}")
            verdict = run_campaign(db, campaign_id, progress=_progress)
            _finish_run(db, campaign_id, verdict, report, as_json)


@app.command()
def resume(
    campaign_id: str, store: StoreOption = "bisect.db", as_json: JsonOption = False,
    report: Annotated[Path | None, typer.Option("--report", "-o", help="Write the HTML report.")]
    = None,
) -> None:
    """Continue an interrupted campaign from what the store holds."""
    from orchestrator.runner import run_campaign

    with _user_errors(), Store.open(store) as db:
        db.get_campaign(campaign_id)
        verdict = run_campaign(db, campaign_id, progress=_progress)
        _finish_run(db, campaign_id, verdict, report, as_json)


@app.command()
def verdict(
    campaign_id: str, store: StoreOption = "bisect.db", as_json: JsonOption = False
) -> None:
    """Recompute and print a campaign's verdict from its stored trials."""
    from orchestrator.runner import verdict_of

    with _user_errors(), Store.open(store) as db:
        result = verdict_of(db, campaign_id)
        _print_verdict(result, campaign_id, as_json)
        raise typer.Exit(_exit_code(result))


@app.command()
def report(
    campaign_id: str,
    output: Annotated[Path, typer.Option("--output", "-o")] = Path("bisect-report.html"),
    store: StoreOption = "bisect.db",
) -> None:
    """Write a campaign's HTML report."""
    from orchestrator.report import write_report

    with _user_errors(), Store.open(store) as db:
        path = write_report(db, campaign_id, output)
    out.print(f"report: {path}", highlight=False)


@app.command("ls")
def list_campaigns(store: StoreOption = "bisect.db", as_json: JsonOption = False) -> None:
    """List the campaigns in the store."""
    with _user_errors(), Store.open(store) as db:
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
        table.add_row(row["id"], row["name"], row["status"], row["trials"], row["created_at"])
    out.print(table)


def _option_error(loc: tuple[int | str, ...], message: str) -> str:
    """A spec validation error in the words of the `stress` options that set the field."""
    message = message.removeprefix("Value error, ")
    if not loc:
        return message
    field = str(loc[0])
    option = {"timeout_s": "--timeout", "context": "--context-start/--context-end"}.get(
        field, "--" + field.replace("_", "-"))
    return f"{option}: {message}"


@app.command()
def stress(
    url: Annotated[str, typer.Argument(help="Base URL of an OpenAI-compatible server.")],
    sessions: Annotated[int, typer.Option(min=1)] = 80,
    rounds: Annotated[int, typer.Option(min=1)] = 4,
    timeout: Annotated[float, typer.Option("--timeout", min=0.001, help="Per request, s.")] = 60.0,
    seed: int = 0,
    stream: Annotated[bool, typer.Option("--stream/--no-stream", help="SSE streaming.")] = False,
    arrival: Annotated[Arrival | None, typer.Option(
        help="burst: all sessions at once; poisson: at --request-rate (default when given).")]
    = None,
    request_rate: Annotated[float | None, typer.Option(
        help="Sessions started per second (Poisson arrivals).")] = None,
    max_concurrency: Annotated[int | None, typer.Option(
        min=1, help="At most this many sessions in flight.")] = None,
    context_start: Annotated[int | None, typer.Option(
        min=0, help="Context tokens of a session's first request (default 0).")] = None,
    context_end: Annotated[int | None, typer.Option(
        min=0, help="Context tokens of a session's last request: grow the context.")] = None,
    slo: Annotated[str | None, typer.Option(
        help="Goodput objectives, e.g. ttft_ms=500,itl_ms=50,e2e_ms=8000.")] = None,
    jsonl: Annotated[Path | None, typer.Option(
        "--jsonl", help="Write one JSON line per session to this file.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Stress a server with concurrent multi-turn tool-calling sessions and count corruption."""
    from pydantic import ValidationError
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    from experiments.workload.results import Progress
    from experiments.workload.spec import parse_slo
    from experiments.workload.stress import run_stress, summary_table, write_jsonl

    try:  # every input is checked before a single request goes out
        objectives = parse_slo(slo) if slo is not None else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--slo") from None
    if context_start is not None and context_end is None:
        raise typer.BadParameter("needs --context-end as well", param_hint="--context-start")
    if jsonl is not None and not jsonl.parent.is_dir():
        raise typer.BadParameter(f"no directory {jsonl.parent}", param_hint="--jsonl")
    context = ({"start_tokens": context_start or 0, "end_tokens": context_end}
               if context_end is not None else None)
    if arrival is None:
        arrival = Arrival.POISSON if request_rate is not None else Arrival.BURST
    try:
        spec = WorkloadSpec.model_validate({
            "sessions": sessions, "rounds": rounds, "timeout_s": timeout, "seed": seed,
            "stream": stream, "arrival": arrival, "request_rate": request_rate,
            "max_concurrency": max_concurrency, "context": context, "slo": objectives,
        })
    except ValidationError as exc:
        _error("; ".join(_option_error(e["loc"], e["msg"]) for e in exc.errors()))
        raise typer.Exit(2) from None
    bar = Bar(TextColumn("stress"), BarColumn(), MofNCompleteColumn(), TextColumn("turns"),
              TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=err,
              transient=True, disable=not err.is_terminal)
    with bar:
        task = bar.add_task("stress", total=sessions * rounds, status="")

        def show(done: Progress) -> None:
            status = (f"sessions {done.sessions_done}/{done.sessions_total} · corrupt "
                      f"{done.corrupted} · infra {done.infra}")
            bar.update(task, completed=done.turns_done, status=status)

        result = asyncio.run(run_stress(url.rstrip("/"), spec, progress=show))
    summary = result.summary()
    if jsonl is not None:
        _progress(f"sessions: {write_jsonl(result, jsonl)}")
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        out.print(summary_table(result))
    if summary["judged"] == 0:
        _error("no session could be judged (every one errored or timed out)")
        raise typer.Exit(1)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                      "help_option_names": []},
    add_help_option=False,
)
def twin(ctx: typer.Context) -> None:
    """Run a twin: a simulated SGLang server (see `bisect twin --help`)."""
    from experiments.twin.cli import main as twin_main

    raise typer.Exit(twin_main(list(ctx.args)))


@app.command()
def validate(campaign_file: Path) -> None:
    """Check a campaign file without running anything."""
    with _user_errors():
        campaign = load_campaign(campaign_file)
    variants = 1
    for factor in campaign.factors:
        variants *= len(factor.levels)
    out.print(
        f"{campaign_file}: ok — {len(campaign.factors)} factors, {variants} variants, "
        f"{len(campaign.pools)} pool(s)",
        highlight=False,
    )


@app.command("classify")
def classify_cmd(
    source: Annotated[
        str, typer.Argument(help="A chat-completion JSON or a saved SSE stream; - reads stdin.")
    ],
    canary: Annotated[
        str | None, typer.Option(help="The canary the call must echo; without it, not checked.")
    ] = None,
) -> None:
    """Judge one saved response like the stress workload does; print one JSON document."""
    from experiments.workload.saved import SavedResponseError, classify_saved

    name = "<stdin>" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        report = classify_saved(text, canary)
    except (OSError, UnicodeDecodeError, SavedResponseError) as exc:
        _error(f"{name}: {exc}")
        raise typer.Exit(2) from None
    print(json.dumps({"file": name, **report}, ensure_ascii=False, indent=2))


@app.command()
def schema() -> None:
    """Print the JSON Schema of campaign files."""
    print(json.dumps(campaign_schema(), indent=2))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted: `bisect resume ID` continues the campaign", highlight=False)
        sys.exit(130)
    except Exception as exc:  # the last line of defence: one sentence, no traceback
        if os.environ.get("BISECT_DEBUG"):
            raise
        _error(f"{type(exc).__name__}: {exc}")
        sys.exit(1)


