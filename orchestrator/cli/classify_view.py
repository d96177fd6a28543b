"""`bisect classify`: judge saved responses as the stress workload judges live ones.

Its own module, so that `bisect classify` builds no other command (orchestrator/cli/__init__.py)
and starts quickly (issue 31: a user triaging captured responses, a pool actor's start). Its
annotations are objects, not strings (no ``from __future__ import annotations``): typer would
compile each string twice to read the command's parameters.
"""

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import (
    ParserOption,
    app,
    emit_json,
    error,
    out,
    progress,
    tool_call_parser_of,
)


@app.command("classify")
def classify_cmd(
    sources: Annotated[list[str], typer.Argument(
        metavar="SOURCE...",
        help="Chat-completion JSON files, saved SSE streams, directories of them, or - for "
        "stdin; a source of JSON Lines holds one response a line.")],
    canary: Annotated[str | None, typer.Option(
        help="The canary the call must echo (default: the latest one in --request's messages; "
        "without either, not checked).")] = None,
    request: Annotated[Path | None, typer.Option(
        "--request", metavar="FILE",
        help="The request the responses answered: they are judged against that request's own "
        "tools (and canary), not the built-in ones.")] = None,
    tool_call_parser: ParserOption = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="One compact JSON report a line, one line a response.")] = False,
) -> None:
    """Judge saved responses like the stress workload does. One response: its JSON report;
    several: a line each (--json: a JSON report each). Exit 0 when every one is clean, 1 when
    any is corrupt, 2 when any input cannot be read (the others are still judged)."""
    from experiments.workload.agent_tools import BUILT_IN
    from experiments.workload.saved import SavedResponseError, classify_saved, request_context
    from experiments.workload.saved_inputs import read_sources
    from experiments.workload.triage import serving

    tool_call_parser = tool_call_parser_of(tool_call_parser)
    agent, asked = BUILT_IN, None
    try:
        if request is not None:
            agent, asked = request_context(request.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SavedResponseError) as exc:
        error(f"{request}: {exc}")
        raise typer.Exit(2) from None
    inputs = list(read_sources(sources, sys.stdin))
    judged = corrupt = unreadable = 0
    for saved in inputs:
        try:
            if saved.error is not None:
                raise SavedResponseError(saved.error)
            assert saved.text is not None
            with serving(tool_call_parser):  # every triage of this response is against it
                report = classify_saved(saved.text, canary if canary is not None else asked,
                                        agent)
        except SavedResponseError as exc:
            error(f"{saved.where}: {exc}")
            unreadable += 1
            continue
        judged, corrupt = judged + 1, corrupt + bool(report["corrupt"])
        document = {"file": saved.name, "line": saved.line,
                    "request": None if request is None else str(request),
                    "tool_call_parser": tool_call_parser, **report}
        if as_json:
            print(json.dumps(document, allow_nan=False), flush=True)
        elif len(inputs) == 1:
            emit_json(document)
        else:
            shown = " ".join(str(report["leak_label"] or report["evidence"] or "").split())
            shown = shown if len(shown) <= 100 else shown[:99] + "…"  # one line a response
            out.print(f"{saved.where}: {report['outcome']}" + (f": {shown}" if shown else ""),
                      markup=False, highlight=False)
    if len(inputs) > 1:
        progress(f"{judged} judged, {corrupt} corrupt, {unreadable} unreadable")
    if unreadable:
        raise typer.Exit(2)
    if corrupt:
        raise typer.Exit(1)
