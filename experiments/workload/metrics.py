"""Per-request latency and token metrics, and their aggregate over one run.

Names and meanings follow SGLang's ``bench_serving`` (its result file's keys: ``mean_ttft_ms``,
``p99_e2e_latency_ms``, ``input_throughput``, ``concurrency``...) so numbers can be put side by
side: TTFT (time to the first output chunk; = E2E without streaming), ITL (gaps between
successive output chunks), TPOT ((E2E - TTFT) / (output tokens - 1)), E2E, throughputs over the
run's duration, ``concurrency`` (the sum of E2E over the duration: requests in flight on
average), the peaks of output chunks per second and of requests in flight in any one second
(``max_concurrent_requests``: requests that overlap the busiest one-second bucket, so more than
``--max-concurrency`` when requests follow each other within a second, there as here), and the
goodput of bench_serving's ``--goodput`` (requests per second meeting every SLO, the share that
did, and the share that met each objective). Only completed requests (a whole response arrived)
enter the latency statistics, as there.

Where they differ from bench_serving, on purpose: an output chunk is any delta that carries
output, tool-call deltas included (bench_serving times only ``content`` and
``reasoning_content``, so a reply that is only a tool call has no TTFT or ITL there); a latency
nobody measured is None, not 0 (TPOT and ITL need a stream); tokens come from the server's
``usage`` (bench_serving takes input tokens from its dataset, and none for a multi-turn one);
``max_*`` is given for every latency (bench_serving computes only ``max_itl_ms`` and does not
write it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from experiments.workload.spec import SLO

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2e")
# bench_serving's name of each latency in its keys: ``mean_e2e_latency_ms`` (bisect's summary said
# ``mean_e2e_ms`` before issue 14; TTFT, TPOT and ITL had bench_serving's names already)
KEY_NAMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2e_latency"}
STATS = ("mean", "median", "std", "p90", "p95", "p99", "max")


@dataclass(frozen=True)
class RequestMetrics:
    """One chat request. Times in seconds from the moment the request was sent."""

    turn: int
    completed: bool  # a whole response arrived; False for HTTP errors, disconnects, timeouts
    e2e_s: float
    ttft_s: float | None = None  # None when nothing arrived
    itl_s: tuple[float, ...] = ()
    prompt_tokens: int | None = None  # from the server's usage, when it sent one
    completion_tokens: int | None = None
    streamed: bool = False  # TTFT and ITL were measured on a stream
    sent_at: float = 0.0  # time.perf_counter() when it was sent: the per-second peaks

    @property
    def tpot_s(self) -> float | None:
        # As bench_serving: only defined for a stream with more than one output token.
        if not self.streamed or self.ttft_s is None or not self.completion_tokens:
            return None
        if self.completion_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)

    def meets(self, slo: SLO) -> bool:
        """Completed and within every SLO given. ITL: no gap longer than the objective."""
        return self.completed and all(self.met(slo).values())

    def met(self, slo: SLO) -> dict[str, bool]:
        """Each objective ``slo`` gives (bench_serving's names: ttft, tpot, itl, e2el): met or
        not, as bench_serving counts them: a figure the request has no value for (TPOT of one
        token, ITL without a stream) meets it. A request that did not complete meets none."""
        observed = {"ttft": self.ttft_s, "tpot": self.tpot_s,
                    "itl": max(self.itl_s, default=None), "e2el": self.e2e_s}
        return {name: self.completed and ((value := observed[name]) is None
                                           or value * 1000 <= limit)
                for name, limit in slo.limits().items() if limit is not None}

    def to_json(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "completed": self.completed,
            "ttft_ms": _ms(self.ttft_s),
            "e2e_ms": _ms(self.e2e_s),
            "itl_ms": [_ms(gap) for gap in self.itl_s],
            "tpot_ms": _ms(self.tpot_s),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def latency_key(stat: str, name: str) -> str:
    """The summary's key of one statistic of one latency: ``p95_e2e_latency_ms``."""
    return f"{stat}_{KEY_NAMES[name]}_ms"


def _stats(name: str, values_s: Sequence[float]) -> dict[str, float | None]:
    keys = [latency_key(stat, name) for stat in STATS]
    if not values_s:
        return dict.fromkeys(keys)
    values = np.asarray(values_s, dtype=float) * 1000
    numbers = [float(np.mean(values)), float(np.median(values)), float(np.std(values)),
               *(float(v) for v in np.percentile(values, (90, 95, 99))), float(np.max(values))]
    return dict(zip(keys, numbers, strict=True))


def peaks(done: Sequence[RequestMetrics]) -> tuple[float, int]:
    """bench_serving's ``max_output_tokens_per_s`` (output chunks in the busiest second; one per
    request without streaming) and ``max_concurrent_requests`` (requests in flight during the
    busiest second), in one-second buckets from the first request sent."""
    if not done:
        return 0.0, 0
    start = min(r.sent_at for r in done)
    seconds = int(np.ceil(max(r.sent_at + r.e2e_s for r in done) - start)) + 1
    chunks = [0] * seconds
    in_flight = [0] * seconds
    for request in done:
        at = request.sent_at - start
        if request.ttft_s is not None:
            at += request.ttft_s
            chunks[int(at)] += 1
            for gap in request.itl_s:
                at += gap
                if at < seconds:
                    chunks[int(at)] += 1
        first = int(request.sent_at - start)
        for second in range(first, min(int(request.sent_at - start + request.e2e_s) + 1,
                                       seconds)):
            in_flight[second] += 1
    return float(max(chunks)), max(in_flight)


def latency_samples(requests: Iterable[RequestMetrics]) -> dict[str, list[float]]:
    """Each latency's samples in seconds (``LATENCIES``), over the completed requests."""
    done = [r for r in requests if r.completed]
    return {
        "ttft": [r.ttft_s for r in done if r.ttft_s is not None],
        "tpot": [t for r in done if (t := r.tpot_s) is not None],
        "itl": [gap for r in done for gap in r.itl_s],
        "e2e": [r.e2e_s for r in done],
    }


def percentiles_ms(values_s: Sequence[float]) -> dict[str, float] | None:
    """``p50_ms``, ``p90_ms`` and ``p99_ms`` of ``values_s``; None when there are none."""
    if not values_s:
        return None
    found = np.percentile(np.asarray(values_s, dtype=float) * 1000, PERCENTILES)
    return {f"p{p}_ms": float(v) for p, v in zip(PERCENTILES, found, strict=True)}


def goodput(every: Sequence[RequestMetrics], per_s: float, slo: SLO | None) -> dict[str, Any]:
    """bisect's goodput keys (``slo``, ``good_requests``, ``goodput``) and bench_serving's
    (``goodput_slos_ms``, ``request_goodput``, ``slo_attainment``, ``slo_attainment_by_metric``:
    shares of the requests sent, failed ones included); all None without an SLO."""
    if slo is None:
        return dict.fromkeys(("slo", "good_requests", "goodput", "goodput_slos_ms",
                              "request_goodput", "slo_attainment", "slo_attainment_by_metric"))
    limits = {name: limit for name, limit in slo.limits().items() if limit is not None}
    met = [r.met(slo) for r in every]  # a request that did not complete met nothing
    good = sum(all(m.values()) for m in met)
    share = 1 / len(every) if every else 0.0
    return {
        "slo": slo.model_dump(exclude_none=True),
        "good_requests": good,
        "goodput": good * per_s,
        "goodput_slos_ms": limits,
        "request_goodput": good * per_s,
        "slo_attainment": good * share,
        "slo_attainment_by_metric": {name: sum(m[name] for m in met) * share
                                     for name in limits},
    }


def aggregate(
    requests: Iterable[RequestMetrics], duration_s: float, slo: SLO | None = None
) -> dict[str, Any]:
    """The run-level numbers; latency keys are None when no completed request measured them."""
    every = list(requests)
    done = [r for r in every if r.completed]
    per_s = 1 / duration_s if duration_s > 0 else 0.0
    input_tokens = sum(r.prompt_tokens or 0 for r in done)
    output_tokens = sum(r.completion_tokens or 0 for r in done)
    samples = latency_samples(done)
    max_chunks, max_in_flight = peaks(done)
    total = (input_tokens + output_tokens) * per_s
    summary: dict[str, Any] = {
        "requests": len(every),
        "completed": len(done),
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": len(done) * per_s,
        "input_throughput": input_tokens * per_s,
        "output_throughput": output_tokens * per_s,
        "total_throughput": total,
        "total_token_throughput": total,  # vLLM's `bench serve` name (SGLang's has none)
        "concurrency": sum(samples["e2e"]) * per_s,
        "max_output_tokens_per_s": max_chunks,
        "max_concurrent_requests": max_in_flight,
        **goodput(every, per_s, slo),
    }
    for name in LATENCIES:
        summary.update(_stats(name, samples[name]))
    return summary
