"""Collectors: Prometheus samples from each service during a run, events from its log after."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

# The series worth keeping per scrape; the rest of /metrics stays on the server.
KEPT_METRICS = frozenset({
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:num_used_tokens",
    "sglang:gen_throughput",
    "sglang:cache_hit_rate",
    "sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
    "sglang:num_transfer_failed_reqs_total",
})


@dataclass(frozen=True)
class Sample:
    service: str
    t: float  # seconds since the collector started
    name: str
    labels: Mapping[str, str]
    value: float


def parse_metrics(text: str, service: str, t: float) -> list[Sample]:
    """The kept series of one scrape; ValueError when the text is not Prometheus's format.

    A sample that is not a finite number (the format allows NaN and ±Inf: a hit rate of 0/0) is
    a gap, not a value: SQLite stores NaN as NULL, which the store refuses, and JSON has none."""
    samples = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in KEPT_METRICS and math.isfinite(sample.value):
                samples.append(Sample(service, t, sample.name, dict(sample.labels), sample.value))
    return samples


async def poll_metrics(
    urls: Mapping[str, str], stop: asyncio.Event, interval_s: float = 0.5
) -> list[Sample]:
    """Scrape every service's metrics URL each interval until ``stop`` is set (and once more)."""
    samples: list[Sample] = []
    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=max(1.0, interval_s * 4))
    async with aiohttp.ClientSession(timeout=timeout) as http:

        async def scrape(service: str, url: str) -> None:
            try:
                # a 3xx is a gap, not a scrape of where it points (README: where bisect
                # sends traffic); aiohttp would follow it
                async with http.get(url, allow_redirects=False) as response:
                    if response.status == 200:
                        text = await response.text()
                        samples.extend(parse_metrics(text, service, time.monotonic() - started))
            except (aiohttp.ClientError, TimeoutError, ValueError):
                pass  # a missed scrape is a gap in the series, not a failed trial

        while True:
            await asyncio.gather(*(scrape(s, u) for s, u in urls.items()))
            if stop.is_set():
                return samples
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval_s)


@dataclass(frozen=True)
class LogEvent:
    line_no: int
    kind: str
    text: str


Matcher = Callable[[str], object]  # truthy when the line is of the kind


def _then(first: str, second: str) -> Matcher:
    """``first.*second`` in linear time: the regex backtracks once per ``first`` in the line
    (a 144 KB line of "transfer " took 16 s); the first ``first`` leaves the widest window."""
    head, tail = re.compile(first), re.compile(second)

    def match(line: str) -> object:
        found = head.search(line)
        return found is not None and tail.search(line, found.end())

    return match


def _any(*matchers: Matcher) -> Matcher:
    return lambda line: any(matcher(line) for matcher in matchers)


Patterns = tuple[tuple[str, Matcher], ...]  # (kind, matcher), the first that matches wins

_TRANSFER_TIMEOUT = _any(_then(r"(?i)transfer", r"(?i)time(d)?\s*out"),
                         re.compile(r"(?i)bootstrap timeout").search)
_TRACEBACK_OR_ERROR = re.compile(r"Traceback \(most recent call last\)|\bERROR\b").search
SGLANG: Patterns = (
    ("wedge", re.compile(r"WaitingForInput").search),
    ("abort", re.compile(r"Aborted by AbortReq").search),
    ("transfer_timeout", _TRANSFER_TIMEOUT),
    ("error", _TRACEBACK_OR_ERROR),
    ("startup", _any(re.compile(
        r"Load weight end|KV Cache is allocated|max_total_num_tokens="
        r"|Capture cuda graph end|fired up and ready to roll|bytes_per_token_per_layer="
    ).search, _then(r"Allocating ", r" host memory"))),
)
# vLLM's tool and reasoning parsers log every reply they cannot parse at ERROR, traceback and
# all, each line tagged with the parser's file: the model's broken output, which the workload's
# classifier judges, not the server's (a random model broke 238-416 calls a trial, BENCHMARKS.md
# "A real engine"). Its lines that do tell of a server gone: the engine core's fatal error, a
# dead engine or worker, and the requests it aborted.
_MODEL_OUTPUT = re.compile(r"\[\w+_(?:tool|reasoning)_parser\.py:\d+\]").search
VLLM: Patterns = (
    ("wedge", re.compile(r"EngineCore encountered a fatal error|EngineDeadError"
                         r"|died unexpectedly").search),
    ("abort", re.compile(r"Aborted request").search),
    ("transfer_timeout", _TRANSFER_TIMEOUT),
    ("error", lambda line: not _MODEL_OUTPUT(line) and _TRACEBACK_OR_ERROR(line)),
    ("startup", re.compile(r"Loading weights took|Available KV cache memory|KV cache size"
                           r"|init engine|Application startup complete").search),
)
ENGINES: dict[str, Patterns] = {"sglang": SGLANG, "vllm": VLLM}
MAX_EVENT_TEXT = 500


def log_events(text: str, engine: str = "sglang") -> list[LogEvent]:
    """Lines of interest in one start's log of ``engine`` (a key of ENGINES), numbered from 1."""
    events = []
    patterns = ENGINES[engine]
    for line_no, line in enumerate(text.splitlines(), start=1):
        for kind, matches in patterns:
            if matches(line):
                events.append(LogEvent(line_no, kind, line[:MAX_EVENT_TEXT]))
                break
    return events
