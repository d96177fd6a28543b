"""Per-request latency and token metrics, and their aggregate over one run.

Names and meanings follow sglang ``bench_serving`` and ``vllm bench serve`` so numbers can be put
side by side: TTFT (time to the first output chunk; = E2E without streaming), ITL (gaps between
successive output chunks), TPOT ((E2E - TTFT) / (output tokens - 1)), E2E, request and output
throughput over the run's duration, and vLLM's goodput (requests per second meeting every SLO).
Only completed requests (a whole response arrived) enter the latency statistics, as there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from experiments.workload.spec import SLO

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2e")


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
        if not self.completed:
            return False
        checks = (
            (slo.ttft_ms, self.ttft_s),
            (slo.itl_ms, max(self.itl_s, default=None)),
            (slo.e2e_ms, self.e2e_s),
        )
        return all(
            limit is None or value is None or value * 1000 <= limit for limit, value in checks
        )

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


def _stats(name: str, values_s: Sequence[float]) -> dict[str, float | None]:
    keys = [f"mean_{name}_ms", f"median_{name}_ms", *(f"p{p}_{name}_ms" for p in PERCENTILES[1:])]
    if not values_s:
        return dict.fromkeys(keys)
    values = np.asarray(values_s, dtype=float) * 1000
    numbers = [float(np.mean(values)), *(float(v) for v in np.percentile(values, PERCENTILES))]
    return dict(zip(keys, numbers, strict=True))


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


def aggregate(
    requests: Iterable[RequestMetrics], duration_s: float, slo: SLO | None = None
) -> dict[str, Any]:
    """The run-level numbers; latency keys are None when no completed request measured them."""
    every = list(requests)
    done = [r for r in every if r.completed]
    per_s = 1 / duration_s if duration_s > 0 else 0.0
    output_tokens = sum(r.completion_tokens or 0 for r in done)
    samples = latency_samples(done)
    good = sum(r.meets(slo) for r in done) if slo is not None else None
    summary: dict[str, Any] = {
        "requests": len(every),
        "completed": len(done),
        "total_input_tokens": sum(r.prompt_tokens or 0 for r in done),
        "total_output_tokens": output_tokens,
        "request_throughput": len(done) * per_s,
        "output_throughput": output_tokens * per_s,
        "slo": slo.model_dump(exclude_none=True) if slo is not None else None,
        "good_requests": good,
        "goodput": good * per_s if good is not None else None,
    }
    for name in LATENCIES:
        summary.update(_stats(name, samples[name]))
    return summary
