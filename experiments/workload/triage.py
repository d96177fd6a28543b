"""Triage of a leak: did the server's parser fail on good markup, or did the model break it?

A leak is *well-formed* when SGLang's own detector for that markup family recovers every call the
text opens (so the server should have returned structured ``tool_calls``: a parser or serving
bug, e.g. a race), and *malformed* when it does not (the model emitted broken markup: a model-side
or KV-cache corruption). The two point at different culprits, so the report keeps them apart.

The judge is SGLang's detector when the optional ``sglang`` package imports (``make test``
installs it; see the Makefile), else a built-in parser that follows the same rules
(``triage_builtin.py``); ``Triage.source`` says which one decided. ``BISECT_TRIAGE`` =
``auto`` (default) | ``sglang`` (require it) | ``builtin`` forces a path.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from experiments.agent import TOOLS
from experiments.markup import find_markup, markup_family
from experiments.workload import triage_builtin

Form = Literal["well_formed", "malformed"]
Source = Literal["sglang", "builtin"]
Parse = Callable[[str, list[dict[str, Any]]], list[dict[str, Any]]]

ENV = "BISECT_TRIAGE"

# Family -> SGLang detectors (module, class) tried in order. V3 and V3.1 share their tokens and
# differ in the argument block (V3 fences it as ```json), so both are tried.
SGLANG_DETECTORS: dict[str, list[tuple[str, str]]] = {
    "v31": [
        ("deepseekv31_detector", "DeepSeekV31Detector"),
        ("deepseekv3_detector", "DeepSeekV3Detector"),
    ],
    "dsml": [("deepseekv32_detector", "DeepSeekV32Detector")],
    "v4": [("deepseekv4_detector", "DeepSeekV4Detector")],
    "v41": [("deepseekv41_detector", "DeepSeekV41Detector")],
    "tool_call": [("hermes_detector", "HermesDetector")],
}


@dataclass(frozen=True)
class Triage:
    form: Form
    family: str | None  # v31 | dsml | v4 | v41 | tool_call | think; None: no markup at all
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments": dict}
    source: Source = "builtin"
    reason: str | None = None  # why malformed, in a few words

    def as_dict(self) -> dict[str, Any]:
        return {
            "form": self.form,
            "family": self.family,
            "source": self.source,
            "calls": self.calls,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class _Sglang:
    """What one import of sglang gave: the parse function, or why there is none."""

    parse: dict[str, Parse] | None
    error: str | None


@functools.cache
def _load_sglang() -> _Sglang:
    """Import SGLang's detectors once. Any failure (absent, partial install, a missing torch or
    triton, a crash at import) means the built-in path, never an exception here."""
    try:
        import importlib

        from sglang.srt.entrypoints.openai.protocol import Tool

        classes = {
            family: [
                getattr(importlib.import_module(f"sglang.srt.function_call.{module}"), name)
                for module, name in detectors
            ]
            for family, detectors in SGLANG_DETECTORS.items()
        }
    except Exception as exc:  # ImportError, or whatever a half-installed sglang raises
        return _Sglang(None, f"{type(exc).__name__}: {exc}")
    # The detectors log every dropped invoke; a leak triage expects those, so keep them quiet.
    logging.getLogger("sglang.srt.function_call").setLevel(logging.CRITICAL)

    def parser(detector_classes: list[type]) -> Parse:
        def parse(text: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
            sgl_tools = [Tool.model_validate(tool) for tool in tools]
            best: list[dict[str, Any]] = []
            for cls in detector_classes:
                # A fresh detector per text: they keep streaming state.
                result = cls().detect_and_parse(text, sgl_tools)
                calls = [
                    {"name": call.name, "arguments": json.loads(call.parameters or "{}")}
                    for call in result.calls
                ]
                best = calls if len(calls) > len(best) else best
            return best

        return parse

    return _Sglang({family: parser(cls) for family, cls in classes.items()}, None)


def sglang_status() -> str | None:
    """None when SGLang's detectors import, else why not."""
    return _load_sglang().error


def warm_up() -> Source:
    """Import sglang now (~3 s with torch), not inside the first leak of a running stress."""
    if os.environ.get(ENV) == "builtin":
        return "builtin"
    source: Source = "sglang" if _load_sglang().parse is not None else "builtin"
    # torch and sglang leave ~400,000 long-lived objects that every full collection would walk
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
    loaded = _load_sglang()
    if loaded.parse is not None:
        return "sglang"
    if choice == "sglang":
        raise RuntimeError(f"SGLang's tool-call detectors do not import: {loaded.error}")
    return "builtin"


def triage_leak(
    text: str, tools: list[dict[str, Any]] | None = None, *, backend: str | None = None
) -> Triage:
    """Judge leaked ``text`` well-formed or malformed. ``backend``: auto | sglang | builtin,
    default from ``BISECT_TRIAGE``; the tools default to the agent's."""
    tools = TOOLS if tools is None else tools
    source = _backend(backend)
    family = markup_family(text)
    if family is None:
        return Triage("malformed", None, [], source, "no tool-call markup")
    if family == "think":
        # No tool-call detector reads reasoning, and SGLang's reasoning parser needs
        # transformers: this verdict is always the built-in one.
        form, reason = triage_builtin.think_form(text)
        return Triage(form, family, [], "builtin", reason)
    openings = triage_builtin.count_openings(family, text)
    if source == "sglang":
        parse = _load_sglang().parse
        assert parse is not None  # _backend said so
        calls = parse[family](text, tools)
        reason = None
    else:
        calls, reason = triage_builtin.parse(family, text, tools)
    # Well-formed: every call the text opens comes out (one bad invoke among good ones is still
    # the model's fault). A JSON list in one <tool_call> may give more calls than openings.
    if calls and len(calls) >= openings:
        # The detectors' regexes are lenient: an unclosed parameter tag is swallowed into the
        # value of the previous one. Markup inside recovered arguments is broken markup.
        inner = find_markup(json.dumps([call["arguments"] for call in calls], ensure_ascii=False))
        if inner is None:
            return Triage("well_formed", family, calls, source, None)
        return Triage("malformed", family, calls, source, f"markup {inner!r} inside arguments")
    if reason is None:
        reason = f"{len(calls)} of {openings} calls parse" if calls else "no call parses"
    return Triage("malformed", family, calls, source, reason)
