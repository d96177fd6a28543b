"""Triage of a leak: would SGLang have parsed this, and with which ``--tool-call-parser``?

A leak is *well-formed* when an SGLang detector recovers every call the text opens (the server
should have returned structured ``tool_calls``: a parser or serving bug, e.g. a race),
*parser_mismatch* when the server's own parser does not but another detector does (a wrong
``--tool-call-parser`` flag: a deployment bug), and *malformed* when none does (the model
emitted broken markup: a model-side or KV-cache corruption). The three point at different
culprits, so the report keeps them apart.

When the server's parser is known (``parser=``, or ``serving(parser)`` around a run: a campaign
reads it from the services' flags), the text is judged against that detector first; when it is
not (``bisect classify`` or ``stress`` against a bare URL), against every detector, and the
label says which parsed it. The detectors are SGLang's when the optional ``sglang`` package
imports (``make test`` installs it; see the Makefile), else a built-in parser that follows the
same rules (``triage_builtin.py``); ``Triage.source`` says which one decided. ``BISECT_TRIAGE``
= ``auto`` (default) | ``sglang`` (require it) | ``builtin`` forces a path.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from experiments.agent import TOOLS
from experiments.markup import find_markup, markup_family
from experiments.workload import triage_builtin, triage_sglang

Form = Literal["well_formed", "malformed", "parser_mismatch"]
Source = Literal["sglang", "builtin"]
Calls = list[dict[str, Any]]

ENV = "BISECT_TRIAGE"
FLAG = "--tool-call-parser"

# The detectors that read each markup family: tried first, and theirs is the reason told when
# none parses. V3 and V3.1 share their tokens and differ in the argument block (V3 fences it).
FAMILY_PARSERS: dict[str, tuple[str, ...]] = {
    "v31": ("deepseekv31", "deepseekv3"),
    "dsml": ("deepseekv32",),
    "v4": ("deepseekv4",),
    "v41": ("deepseekv41",),
    "tool_call": ("hermes",),
}

# The server's --tool-call-parser for what runs in this context (``serving``): a stress run sets
# it once and every session's triage (inside agent.judge) reads it. A context variable, not a
# global: the tasks of one run inherit it, a concurrent run elsewhere keeps its own.
SERVER_PARSER: ContextVar[str | None] = ContextVar("bisect_server_parser", default=None)


@dataclass(frozen=True)
class Triage:
    form: Form
    family: str | None  # v31 | dsml | v4 | v41 | tool_call | think; None: no markup at all
    calls: Calls = field(default_factory=list)  # {"name", "arguments": dict}
    source: Source = "builtin"
    reason: str | None = None  # why the server's parser (or, unknown, the family's) failed
    parser: str | None = None  # the server's --tool-call-parser; None: not known
    parsed_as: tuple[str, ...] = ()  # the parsers whose detectors recover every call

    @property
    def label(self) -> str:
        """One line for a person: which parser parses it, or why none does."""
        if self.family is None:
            return "no tool-call markup"
        if self.family == "think":
            return ("a reasoning block the reasoning parser did not split off"
                    if self.form == "well_formed" else f"malformed: {self.reason}")
        shown = " or ".join(self.parsed_as)  # any of them would have returned the calls
        if self.form == "parser_mismatch":
            return f"parser mismatch: parses as {shown}, the server runs {self.parser}"
        if self.form == "well_formed":
            return f"parses as {shown}" + (", the server's parser" if self.parser else "")
        if self.parser is not None:
            return f"malformed: {self.parser}: {self.reason}; no other detector parses it"
        return f"malformed: no detector parses it ({self.reason})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "form": self.form,
            "family": self.family,
            "source": self.source,
            "calls": self.calls,
            "reason": self.reason,
            "parser": self.parser,
            "parsed_as": list(self.parsed_as),
            "label": self.label,
        }


def sglang_status() -> str | None:
    """None when SGLang's detectors import, else why not."""
    return triage_sglang.load().error


@functools.cache
def parsers() -> tuple[str, ...]:
    """The ``--tool-call-parser`` names triage judges against: SGLang's DeepSeek detectors and
    hermes, as its own table names them (the built-in parser's names without sglang)."""
    return triage_sglang.triage_parsers(triage_sglang.parser_table()) or tuple(
        triage_builtin.PARSERS)


def check_parser(name: str) -> str:
    """``name`` when triage can judge against it, else ValueError saying which it can."""
    known = parsers()
    if name not in known:
        other = name in triage_sglang.parser_table()
        why = "a parser triage does not judge against" if other else "not a parser sglang knows"
        raise ValueError(f"{name!r} is {why}; known: {', '.join(known)}")
    return name


def parser_of(argv: Sequence[str]) -> str | None:
    """The ``--tool-call-parser`` a service's command line runs (the last one given wins, as in
    argparse); None when it sets none or one that triage does not judge against."""
    found = None
    for i, arg in enumerate(argv):
        if arg == FLAG and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(f"{FLAG}="):
            found = arg.split("=", 1)[1]
    return found if found in parsers() else None


def pool_parser(argvs: Iterable[Sequence[str]]) -> str | None:
    """The parser of a pool's services (their command lines): the one they set, None when none
    does or they disagree (which of them parses the replies is the deployment's business)."""
    found = {parser_of(argv) for argv in argvs} - {None}
    return found.pop() if len(found) == 1 else None


@contextlib.contextmanager
def serving(parser: str | None) -> Iterator[None]:
    """Triage inside this block as against a server that runs ``parser`` (None: unknown)."""
    token = SERVER_PARSER.set(None if parser is None else check_parser(parser))
    try:
        yield
    finally:
        SERVER_PARSER.reset(token)


def warm_up() -> Source:
    """Import SGLang's detectors now (~0.4 s, without torch: sglang_narrow.py), not inside the
    first leak of a running stress."""
    if os.environ.get(ENV) == "builtin":
        return "builtin"
    source: Source = "sglang" if triage_sglang.load().detectors is not None else "builtin"
    # The imports leave many long-lived objects (~400,000 when they pulled torch) that every
    # full collection would walk
    # again during the load (bench/harness.py: half the client CPU per request at 1,000
    # sessions): out of the collector's sight while a run lasts (run_stress unfreezes after).
    gc.freeze()
    return source


def _backend(backend: str | None) -> Source:
    choice = backend or os.environ.get(ENV, "auto") or "auto"
    if choice == "builtin":
        return "builtin"
    if choice not in ("auto", "sglang"):
        raise ValueError(f"{ENV} must be auto, sglang or builtin, not {choice!r}")
    loaded = triage_sglang.load()
    if loaded.detectors is not None:
        return "sglang"
    if choice == "sglang":
        raise RuntimeError(f"SGLang's tool-call detectors do not import: {loaded.error}")
    return "builtin"


def _judge(source: Source, names: list[str], text: str, tools: list[dict[str, Any]],
           openings: int) -> dict[str, tuple[Calls, str | None]]:
    """Each parser's calls and why they fall short (None: every call the text opens parses)."""
    parsed: dict[str, tuple[Calls, str | None]]
    if source == "sglang":
        found = triage_sglang.load().parse(names, text, tools)
        parsed = {name: (calls, None) for name, calls in found.items()}
    else:
        parsed = {name: triage_builtin.parse_as(name, text, tools) for name in names}
    judged: dict[str, tuple[Calls, str | None]] = {}
    for name, (calls, reason) in parsed.items():
        # Every call the text opens must come out (one bad invoke among good ones is still the
        # model's fault). A JSON list in one <tool_call> may give more calls than openings.
        if calls and len(calls) >= openings:
            # The detectors' regexes are lenient: an unclosed parameter tag is swallowed into
            # the value of the previous one. Markup inside recovered arguments is broken markup.
            args = json.dumps([call["arguments"] for call in calls], ensure_ascii=False)
            inner = find_markup(args)
            reason = None if inner is None else f"markup {inner!r} inside arguments"
        elif reason is None:
            reason = f"{len(calls)} of {openings} calls parse" if calls else "no call parses"
        judged[name] = (calls, reason)
    return judged


def triage_leak(
    text: str, tools: list[dict[str, Any]] | None = None, *, backend: str | None = None,
    parser: str | None = None,
) -> Triage:
    """Judge leaked ``text``. ``parser``: the server's ``--tool-call-parser`` (default: the one
    ``serving`` set, else unknown: every detector is asked). ``backend``: auto | sglang |
    builtin, default from ``BISECT_TRIAGE``; the tools default to the agent's."""
    tools = TOOLS if tools is None else tools
    source = _backend(backend)
    server = parser or SERVER_PARSER.get()
    if server is not None:
        check_parser(server)
    family = markup_family(text)
    if family is None:
        return Triage("malformed", None, [], source, "no tool-call markup", server)
    if family == "think":
        # No tool-call detector reads reasoning, and SGLang's reasoning parser needs
        # transformers: this verdict is always the built-in one.
        form, reason = triage_builtin.think_form(text)
        return Triage(form, family, [], "builtin", reason, server)
    openings = triage_builtin.count_openings(family, text)
    natural = [name for name in FAMILY_PARSERS[family] if name in parsers()]
    order = list(dict.fromkeys([*([server] if server else []), *natural, *parsers()]))
    judged = _judge(source, order[:1], text, tools, openings) if server else {}
    if server and judged[server][1] is None:  # the common case: one detector asked
        return Triage("well_formed", family, judged[server][0], source, None, server, (server,))
    judged.update(_judge(source, [n for n in order if n not in judged], text, tools, openings))
    parsed_as = tuple(name for name in order if judged[name][1] is None)
    told = judged[server or natural[0]]
    if not parsed_as:
        return Triage("malformed", family, told[0], source, told[1], server)
    calls = judged[parsed_as[0]][0]
    if server:
        return Triage("parser_mismatch", family, calls, source, told[1], server, parsed_as)
    return Triage("well_formed", family, calls, source, None, None, parsed_as)
