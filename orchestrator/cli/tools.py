"""Commands that stand alone: stress a server, run a twin, check a file, print the schema."""

from __future__ import annotations

import re
from importlib import import_module
from pathlib import Path
from typing import Annotated

import typer

from experiments.workload.arrival import Arrival
from orchestrator.cli.common import (
    JsonOption,
    ParserOption,
    app,
    emit_json,
    err,
    error,
    out,
    progress,
    tool_call_parser_of,
    user_errors,
)


def _option_error(loc: tuple[int | str, ...], message: str) -> str:
    """A spec validation error in the words of the `stress` options that set the field."""
    message = message.removeprefix("Value error, ")
    if not loc:
        return message
    field = str(loc[0])
    option = {"timeout_s": "--timeout", "context": "--context-start/--context-end"}.get(
        field, "--" + field.replace("_", "-"))
    return f"{option}: {message}"


def _api_key(url: str, name: str | None, given: str | None = None) -> str | None:
    """The key in ``$name``, else ``given`` (``--api-key`` or $OPENAI_API_KEY), checked before
    any request and remembered for redaction (never printed); a URL with credentials is
    refused."""
    from experiments.secrets import (
        ENV_NAME,
        SecretMissing,
        SecretRef,
        SecretValues,
        check_url,
        remember,
    )
    from experiments.workload.http_client import bearer, header_lines

    try:
        check_url(url)
    except ValueError as exc:
        raise typer.BadParameter(str(exc).replace("`api_key_env: ENV_NAME`", "--api-key-env"),
                                 param_hint="URL") from None
    if name is None:
        if not given:
            return None
        remember(given, "<secret --api-key>")
        try:
            header_lines(bearer(given))
        except ValueError as exc:
            raise typer.BadParameter(str(exc).split(": ", 1)[-1],
                                     param_hint="--api-key / $OPENAI_API_KEY") from None
        return given
    if not re.fullmatch(ENV_NAME, name):
        raise typer.BadParameter(f"{name!r} is not an environment variable name",
                                 param_hint="--api-key-env")
    try:
        key = SecretValues.read_one(SecretRef(secret=name), "--api-key-env")
        header_lines(bearer(key))
    except (SecretMissing, ValueError) as exc:
        raise typer.BadParameter(str(exc).split(": ", 1)[-1], param_hint="--api-key-env") \
            from None
    return key


def _request_rate(text: str | None, arrival: Arrival | None) -> float | None:
    """``--request-rate`` as the spec takes it: None for inf (all at once, bench_serving's
    default), else a positive finite number of requests per second."""
    if text is None:
        return None
    try:
        rate = float(text)
    except ValueError:
        rate = float("nan")
    if rate == float("inf"):
        if arrival is Arrival.POISSON:
            raise typer.BadParameter("inf sends every session at once: --arrival poisson "
                                     "needs a finite rate", param_hint="--request-rate")
        return None
    if not rate > 0:  # NaN too: it fails every comparison
        raise typer.BadParameter(f"{text!r} is not a rate: give requests per second (a number "
                                 "above 0), or inf for all at once", param_hint="--request-rate")
    return rate


def _streaming(disable: bool, stream: bool | None) -> bool:
    """Streaming unless --disable-stream (or the earlier --no-stream) says not."""
    if disable and stream:
        raise typer.BadParameter("--stream and --disable-stream contradict each other",
                                 param_hint="--disable-stream")
    return not disable and stream is not False


@app.command()
def stress(
    url: Annotated[str, typer.Argument(help="Base URL of an OpenAI-compatible server.")],
    sessions: Annotated[int, typer.Option(
        min=1, help="Agent sessions (multi-turn conversations), all at once unless "
        "--request-rate or --max-concurrency says otherwise.")] = 80,
    rounds: Annotated[int, typer.Option(
        min=1, help="Assistant turns (requests) per session.")] = 4,
    timeout: Annotated[float, typer.Option("--timeout", min=0.001, help="Per request, s.")] = 60.0,
    seed: Annotated[int, typer.Option(
        help="Seeds session keys, canaries, filler and arrivals: the same seed, the same "
        "requests.")]
    = 0,
    disable_stream: Annotated[bool, typer.Option(
        "--disable-stream", help="Plain JSON replies instead of SSE streams (as "
        "bench_serving's flag): TTFT is then E2E, and ITL and TPOT are not measured.")]
    = False,
    stream: Annotated[bool | None, typer.Option(
        "--stream/--no-stream", hidden=True,
        help="Earlier spellings: --stream is the default now, --no-stream is "
        "--disable-stream.")] = None,
    arrival: Annotated[Arrival | None, typer.Option(
        help="burst: all sessions at once (--request-rate inf); poisson: at a finite "
        "--request-rate (the default when one is given).")] = None,
    request_rate: Annotated[str | None, typer.Option(
        metavar="R", help="Requests per second, as bench_serving's; inf (the default): all at "
        "once. Sessions start as a Poisson process at R / --rounds per second and each sends "
        "its next request when the last is answered, so requests come at R per second while "
        "the server keeps up. (bench_serving's multi-turn datasets pace conversations at R: "
        "to match one, give R × rounds.)")] = None,
    max_concurrency: Annotated[int | None, typer.Option(
        min=1, help="At most this many sessions in flight, each with one request in flight "
        "at a time, as bench_serving bounds its multi-turn conversations. The JSON's "
        "max_concurrent_requests is another figure: requests that overlap the busiest second, "
        "more than this when they follow each other within it.")] = None,
    context_start: Annotated[int | None, typer.Option(
        min=0, help="Context tokens of a session's first request (default 0).")] = None,
    context_end: Annotated[int | None, typer.Option(
        min=0, help="Context tokens of a session's last request: grow the context.")] = None,
    slo: Annotated[str | None, typer.Option(
        "--slo", "--goodput", metavar="KEY=MS,...",
        help="Goodput objectives in ms, from ttft_ms, tpot_ms, itl_ms (longest gap) and "
        "e2e_ms, e.g. ttft_ms=500,tpot_ms=40,e2e_ms=8000; bench_serving's --goodput form "
        "works too: 'ttft:500 tpot:40 e2el:8000'.")] = None,
    jsonl: Annotated[Path | None, typer.Option(
        "--jsonl", help="Write one JSON line per session to this file.")] = None,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", metavar="NAME",
        help="Send the API key in this environment variable as `Authorization: Bearer`.")]
    = None,
    api_key_given: Annotated[str | None, typer.Option(
        "--api-key", envvar="OPENAI_API_KEY", show_default=False, metavar="KEY",
        help="API key sent as `Authorization: Bearer` (never printed); --api-key-env wins.")]
    = None,
    model: Annotated[str | None, typer.Option(
        help="Model name sent; default: the server's first /v1/models entry.")] = None,
    warmup: Annotated[int, typer.Option(
        min=0, help="Warm-up requests (one-turn sessions) before the run, not counted; the "
        "run stops if none succeeds.")] = 0,
    fail_on: Annotated[list[str] | None, typer.Option(
        "--fail-on", metavar="NAME>X",
        help="Exit 1 when a figure passes a limit, e.g. corruption>0.01, error>5%, "
        "p99_ttft_ms>2000 (comma-separated or repeated).")] = None,
    tools_file: Annotated[Path | None, typer.Option(
        "--tools", metavar="FILE", help="Your agent's tools (a JSON list, or a request body "
        "with \"tools\"); each call must carry the canary in a string argument.")] = None,
    system_prompt_file: Annotated[Path | None, typer.Option(
        "--system-prompt", metavar="FILE",
        help="Your agent's system prompt (the canary rule is appended).")] = None,
    tool_call_parser: ParserOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stress a server with concurrent multi-turn tool-calling sessions and count corruption.

    URL is the server's root or its OpenAI base URL (http://host:8000 or http://host:8000/v1).
    The JSON (--json) has every key of SGLang bench_serving's result. Ctrl-C prints what the
    finished sessions measured and exits 130."""
    from pydantic import ValidationError
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    from experiments.secrets import redact_any
    from experiments.workload import report
    from experiments.workload.agent_tools import ToolsError, load_agent
    from experiments.workload.results import Progress, StressResult
    from experiments.workload.spec import WorkloadSpec, parse_slo
    from experiments.workload.stress import (
        StressInterrupted,
        WarmupFailed,
        api_base,
        run_stress_sync,
        summary_table,
        write_jsonl,
    )

    try:  # every input is checked before a single request goes out
        objectives = parse_slo(slo) if slo is not None else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--slo/--goodput") from None
    try:
        names = report.known_names(StressResult((), 0.0, False).summary())
        conditions = report.parse_fail_on(",".join(fail_on), names) if fail_on else []
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fail-on") from None
    if context_start is not None and context_end is None:
        raise typer.BadParameter("needs --context-end as well", param_hint="--context-start")
    api_key = _api_key(url, api_key_env, api_key_given)
    tool_call_parser = tool_call_parser_of(tool_call_parser)
    if jsonl is not None and not jsonl.parent.is_dir():
        raise typer.BadParameter(f"no directory {jsonl.parent}", param_hint="--jsonl")
    try:
        agent = load_agent(tools_file, system_prompt_file)
    except ToolsError as exc:
        hint = "--system-prompt" if str(exc).startswith(f"{system_prompt_file}:") else "--tools"
        raise typer.BadParameter(str(exc), param_hint=hint) from None
    for name in sorted(agent.unchecked):
        progress(f"tool {name!r} has no string argument to carry the canary: its calls are "
                 "judged without it")
    context = ({"start_tokens": context_start or 0, "end_tokens": context_end}
               if context_end is not None else None)
    rate = _request_rate(request_rate, arrival)
    if arrival is None:
        arrival = Arrival.POISSON if rate is not None else Arrival.BURST
    try:
        spec = WorkloadSpec.model_validate({
            "sessions": sessions, "rounds": rounds, "timeout_s": timeout, "seed": seed,
            "stream": _streaming(disable_stream, stream), "arrival": arrival,
            "request_rate": rate,
            "max_concurrency": max_concurrency, "context": context, "slo": objectives,
            "model": model,
        })
    except ValidationError as exc:
        error("; ".join(_option_error(e["loc"], e["msg"]) for e in exc.errors()))
        raise typer.Exit(2) from None
    base = api_base(url)
    settings = report.Settings(
        url, spec, warmup, str(tools_file) if tools_file else None,
        str(system_prompt_file) if system_prompt_file else None,
        report.server_info(base, api_key) if as_json else None, tool_call_parser)
    bar = Bar(TextColumn("stress"), BarColumn(), MofNCompleteColumn(), TextColumn("turns"),
              TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=err,
              transient=True, disable=not err.is_terminal)
    interrupted = False
    leaks: dict[str, int] = {}  # triage label -> leaks

    def leaked(label: str) -> None:
        leaks[label] = leaks.get(label, 0) + 1

    with bar:
        task = bar.add_task("stress", total=sessions * rounds, status="")

        def show(done: Progress) -> None:
            status = (f"sessions {done.sessions_done}/{done.sessions_total} · corrupt "
                      f"{done.corrupted} · infra {done.infra}")
            bar.update(task, completed=done.turns_done, status=status)

        def failed(reason: str) -> None:  # at once, as bench_serving's warm-up check says it
            shown = " ".join(reason.split())  # one line: a body may be a whole HTML page
            shown = shown if len(shown) <= 300 else shown[:299] + "…"
            error(f"first failed request: {shown}{report.failure_hint(reason)}")

        try:
            result = run_stress_sync(base, spec, progress=show, api_key=api_key, agent=agent,
                                     warmup=warmup, on_failure=failed,
                                     tool_call_parser=tool_call_parser, on_leak=leaked)
        except WarmupFailed:
            error(f"warm-up failed: none of the {warmup} warm-up requests succeeded; the run "
                  "was not started")
            raise typer.Exit(1) from None
        except StressInterrupted as exc:
            result, interrupted = exc.result, True
    summary = result.summary()
    if jsonl is not None:
        progress(f"sessions: {write_jsonl(result, jsonl)}")
    if as_json:
        emit_json(redact_any(report.stress_json(result, settings, summary, leaks)))
    else:
        out.print(summary_table(result, summary))
        for label, count in sorted(leaks.items(), key=lambda item: -item[1]):
            progress(f"leak triage: {count} × {label}")
    if interrupted:
        progress(f"interrupted: {summary['sessions']} of {sessions} sessions had finished; "
                 "the figures above are theirs")
        raise typer.Exit(130)
    if summary["judged"] == 0:
        error("no session could be judged (every one errored or timed out)")
        raise typer.Exit(1)
    exceeded = [c for c in conditions if c.exceeded(summary)]
    for condition in exceeded:
        error(f"--fail-on {condition.text}: {condition.name} is "
              f"{condition.value(summary):.4g}")
    if exceeded:
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
def validate(campaign_file: Annotated[Path, typer.Argument(help="The campaign YAML file.")],
             ) -> None:
    """Check a campaign file without running anything."""
    from experiments.campaign_load import load_campaign
    from experiments.strategy_config import FactorialConfig
    from experiments.urls import contacts

    with user_errors():
        campaign = load_campaign(campaign_file)
    variants = 1
    for factor in campaign.factors:
        variants *= len(factor.levels) if factor.range is None else len(factor.range.grid())
    knobs = [f for f in campaign.factors if f.range is not None]
    shown = f"{variants} variants"
    if knobs:  # a search space: a knob without a step has no count
        shown = ", ".join(f"{f.name} {f.range.describe()}" for f in knobs if f.range) + (
            f" ({variants} variants on the grid)" if all(
                f.range and f.range.grid() for f in knobs) else "")
    plan = campaign.strategy
    if isinstance(plan, FactorialConfig) and plan.design == "fractional":
        from orchestrator.core.strategies.factorial import fraction

        design = fraction(campaign.level_names(), plan.resolution,
                          campaign.known_bad)
        shown = f"{len(design.runs())} of {variants} variants ({design.describe()})"
    out.print(
        f"{campaign_file}: ok — {len(campaign.factors)} factors, {shown}, "
        f"{len(campaign.pools)} pool(s)",
        highlight=False, markup=False,
    )
    out.print("a run sends traffic to:\n  " + "\n  ".join(contacts(campaign)),
              highlight=False, markup=False)


# `bisect classify` has its own module, which `bisect classify` imports alone (a quick start,
# issue 31); registered here, it keeps its place in `bisect --help`, after validate.
import_module("orchestrator.cli.classify_view")


@app.command()
def schema(sweep: Annotated[bool, typer.Option(
        "--sweep", help="The schema of sweep files (`bisect sweep`) instead.")] = False) -> None:
    """Print the JSON Schema of campaign files."""
    from experiments.campaign import campaign_schema
    from experiments.sweep import sweep_schema

    emit_json(sweep_schema() if sweep else campaign_schema())
