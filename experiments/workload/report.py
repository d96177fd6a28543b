"""``bisect stress --json``: bench_serving's result, every key of it, plus bisect's own; and the
``--fail-on`` thresholds read against it.

bench_serving (SGLang's ``python -m sglang.bench_serving``) writes one JSON object per run:
its arguments (``backend``, ``dataset_name``, ``request_rate``, ``max_concurrency``...), then
its results (``duration``, ``completed``, token totals and throughputs, mean / median / std /
p90 / p95 / p99 of TTFT, TPOT, ITL and E2E, ``concurrency``, the peaks). The stress document
has each of those keys with the same meaning (``metrics.py`` says where a figure is defined
differently), the arguments that do not apply (its datasets' lengths) as null, and then the
corruption counts, the failures by reason and the run's settings. ``request_rate`` is null for a
burst where bench_serving writes ``inf``: a strict JSON document has no infinity. The goodput
keys its ``--goodput`` adds (``goodput_slos_ms``, ``request_goodput``, ``slo_attainment``,
``slo_attainment_by_metric``) are always there, null without ``--slo``; ``total_token_throughput``
is vLLM's name of ``total_throughput``.
"""

from __future__ import annotations

import datetime
import http.client
import json
import math
import operator
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deploy.direct_http import open_direct
from experiments.workload.results import StressResult
from experiments.workload.spec import WorkloadSpec

# bench_serving's arguments that describe its own datasets: null here (the same keys, so a
# consumer of its files reads ours).
_DATASET_ARGUMENTS = ("sharegpt_output_len", "random_input_len", "random_output_len",
                      "random_range_ratio")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("bisect-serving")
    except PackageNotFoundError:
        return "unknown"


# bench_serving asks /server_info; older SGLang releases and the twin answer /get_server_info
# (today's SGLang answers both).
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


def server_info(base: str, api_key: str | None, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """SGLang's server arguments and state as bench_serving records them: ``GET /server_info``,
    or ``/get_server_info`` where that path is not found (404); None from a server with
    neither, or when it does not answer a JSON object in time: a redirect (not followed), a
    reply that is not HTTP, JSON too deep. A number JSON cannot carry (Python's json writes NaN
    for a 0/0 statistic) is recorded as null: the result stays strict JSON."""
    for path in SERVER_INFO_PATHS:
        request = urllib.request.Request(f"{base}{path}")
        if api_key:
            request.add_header("Authorization", f"Bearer {api_key}")
        try:
            with open_direct(request, timeout_s) as response:  # as the load goes
                data = json.loads(response.read(1 << 20), parse_constant=_no_number,
                                  parse_float=_finite)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # the other path, once; a server that hangs is asked once
                continue
            return None
        except (OSError, ValueError, RecursionError, http.client.HTTPException):
            return None
        return data if isinstance(data, dict) else None
    return None


def _no_number(_: str) -> None:
    """NaN, Infinity, -Infinity: null."""


def _finite(text: str) -> float | None:
    """A float, or null for one past a double's range (1e400)."""
    number = float(text)
    return number if math.isfinite(number) else None


_HINTS = (
    ("HTTP 404", " (no such endpoint: give the server's root or its /v1 base URL)"),
    ("HTTP 401", " (the server wants an API key: --api-key or $OPENAI_API_KEY)"),
    ("HTTP 403", " (the key was refused: check --api-key or $OPENAI_API_KEY)"),
    ("connection refused", " (is the server up and listening there?)"),
    (" not followed", " (bisect sends requests only to the URL given: give the one the "
                      "redirect names, if it is the server's)"),
)


def failure_hint(reason: str) -> str:
    """What to check for a failed request's common reasons ("" for the others)."""
    return next((hint for needle, hint in _HINTS if needle in reason), "")


@dataclass(frozen=True)
class Settings:
    """How the run was asked for: what the JSON records beside the figures."""

    url: str
    spec: WorkloadSpec
    warmup: int = 0
    tools: str | None = None  # the --tools file; None: the built-in tools
    system_prompt: str | None = None  # the --system-prompt file; None: the built-in one
    server_info: dict[str, Any] | None = None
    tool_call_parser: str | None = None  # the server's, as --tool-call-parser said; None: unknown


def stress_json(result: StressResult, settings: Settings,
                summary: dict[str, Any] | None = None,
                leaks: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The ``--json`` document: bench_serving's keys first, in its order, then bisect's.
    ``leaks``: how many leaks had each triage label (experiments/workload/triage.py)."""
    summary = result.summary() if summary is None else summary
    spec = settings.spec
    document: dict[str, Any] = {
        "tag": None,
        "backend": "bisect",
        "dataset_name": "bisect-agent",
        "request_rate": spec.request_rate,
        "max_concurrency": spec.max_concurrency,
        **dict.fromkeys(_DATASET_ARGUMENTS),
        "server_info": settings.server_info,
        "duration": summary["duration"],
        "completed": summary["completed"],
        "total_input_tokens": summary["total_input_tokens"],
        # No images: all input is text. Output is the server's own count, not retokenized.
        "total_input_text_tokens": summary["total_input_tokens"],
        "total_input_vision_tokens": 0,
        "total_output_tokens": summary["total_output_tokens"],
        "total_output_tokens_retokenized": summary["total_output_tokens"],
        "accept_length": None,
    }
    document.update(summary)  # the figures and bisect's counts, under their own names
    document.update({
        "url": settings.url,
        "model": result.model,
        "seed": spec.seed,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "version": version(),
        "rounds": spec.rounds,
        "stream": spec.stream,
        "arrival": spec.arrival.value,
        "max_tokens": spec.max_tokens,
        "timeout_s": spec.timeout_s,
        "warmup": settings.warmup,
        "tools": settings.tools,
        "system_prompt": settings.system_prompt,
        "tool_call_parser": settings.tool_call_parser,
        "leak_triage": dict(leaks or {}),
    })
    return document


# ---------------------------------------------------------------- --fail-on

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
_CONDITION = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(>=|<=|>|<)\s*([0-9.eE+-]+%?)\s*$")


def _shares(summary: Mapping[str, Any]) -> dict[str, float]:
    """The names ``--fail-on`` knows beside the summary's numbers: shares of sessions."""
    sessions = summary["sessions"]
    shares = {"corruption": float(summary["rate"]),  # corrupted / judged
              "error": summary["infra"] / sessions if sessions else 0.0}  # errors and timeouts
    for outcome, count in summary["counts"].items():
        shares.setdefault(outcome, count / sessions if sessions else 0.0)
    return shares


@dataclass(frozen=True)
class Condition:
    """``NAME OP NUMBER``: the run fails when the summary's NAME compares true."""

    name: str
    op: str
    limit: float
    text: str

    def value(self, summary: Mapping[str, Any]) -> float | None:
        shares = _shares(summary)
        if self.name in shares:
            return shares[self.name]
        value = summary.get(self.name)
        return float(value) if isinstance(value, int | float) else None

    def exceeded(self, summary: Mapping[str, Any]) -> bool:
        value = self.value(summary)
        return value is not None and _OPS[self.op](value, self.limit)


# The summary's keys that hold no number even with an SLO (None in a summary without one).
_NOT_NUMBERS = frozenset(("slo", "goodput_slos_ms", "slo_attainment_by_metric"))


def known_names(example: Mapping[str, Any]) -> list[str]:
    """Every name a condition may use: the outcome shares and the summary's numbers (a latency
    is None in a summary that measured none: its name is known all the same)."""
    numbers = [k for k, v in example.items() if k not in _NOT_NUMBERS and (
        v is None or (isinstance(v, int | float) and not isinstance(v, bool)))]
    return [*_shares(example), *numbers]


def parse_fail_on(text: str, names: list[str]) -> list[Condition]:
    """``corruption>0.01,error>5%,p99_ttft_ms>2000`` as conditions; ValueError naming the part
    that is not one (an unknown name, no comparison, no number)."""
    conditions = []
    for part in (p for p in text.split(",") if p.strip()):
        match = _CONDITION.match(part)
        if match is None:
            raise ValueError(f"{part.strip()!r} is not NAME>NUMBER (or >=, <, <=), e.g. "
                             "corruption>0.01")
        name, op, raw = match.groups()
        if name not in names:
            raise ValueError(f"{part.strip()!r}: unknown name {name!r} (known: corruption, "
                             "error, an outcome, or a key of the JSON summary such as "
                             "p99_ttft_ms)")
        try:
            limit = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
        except ValueError:
            raise ValueError(f"{part.strip()!r}: {raw!r} is not a number") from None
        if limit != limit or limit in (float("inf"), float("-inf")):
            raise ValueError(f"{part.strip()!r}: {raw!r} is not a finite number")
        conditions.append(Condition(name, op, limit, part.strip()))
    if not conditions:
        raise ValueError("no condition given, e.g. corruption>0.01")
    return conditions
