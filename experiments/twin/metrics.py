"""Prometheus metrics under SGLang's names, in the twin's own registry.

An own CollectorRegistry (not the global one) keeps several twins in one process, and the tests
that import this module, from colliding. Every role exports every series (SGLang registers them
all whatever the mode); the PD queues simply stay 0 where they do not apply.
"""

from __future__ import annotations

import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LABELS = ("model_name",)
THROUGHPUT_WINDOW_S = 5.0
# SGLang's buckets, with finer ones below: twins run time-compressed.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20,
                40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025,
               0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8)
E2E_BUCKETS = (0.01, 0.05, 0.1, 0.3, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self, model_name: str, max_total_num_tokens: int) -> None:
        self.registry = CollectorRegistry()
        self._capacity = max(1, max_total_num_tokens)
        reg = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=reg).labels(model_name)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=reg).labels(model_name)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, registry=reg, buckets=buckets).labels(model_name)

        self.running = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.queued = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.gen_throughput.set_function(self.throughput)
        self.bootstrap_queue = gauge("sglang:num_prefill_bootstrap_queue_reqs",
                                     "The number of requests in the prefill bootstrap queue.")
        self.transfer_queue = gauge("sglang:num_decode_transfer_queue_reqs",
                                    "The number of requests in the decode transfer queue.")
        self.transfer_failed = counter("sglang:num_transfer_failed_reqs",
                                       "The number of requests whose KV transfer failed.")
        self.prompt_tokens = counter("sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("sglang:generation_tokens",
                                         "Number of generation tokens processed.")
        self.cached_tokens = counter("sglang:cached_tokens",
                                     "Number of cached prompt tokens.")
        self.ttft = histogram("sglang:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.itl = histogram("sglang:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.e2e_latency = histogram("sglang:e2e_request_latency_seconds",
                                     "Histogram of End-to-end request latency.", E2E_BUCKETS)
        self._used = 0
        self._generated: deque[tuple[float, int]] = deque()
        self._started = time.monotonic()

    def hold_tokens(self, tokens: int) -> None:
        """Tokens of a running request occupy the KV pool until ``release_tokens``."""
        self._used += tokens
        self._sync_usage()

    def release_tokens(self, tokens: int) -> None:
        self._used = max(0, self._used - tokens)
        self._sync_usage()

    def generated(self, tokens: int) -> None:
        """Output tokens just produced: the counter and the throughput window."""
        self.generation_tokens.inc(tokens)
        now = time.monotonic()
        self._generated.append((now, tokens))
        self._forget_before(now - THROUGHPUT_WINDOW_S)  # bounded even if nobody scrapes

    def _forget_before(self, t: float) -> None:
        while self._generated and self._generated[0][0] < t:
            self._generated.popleft()

    @property
    def used(self) -> int:
        return self._used

    @property
    def usage(self) -> float:
        return min(1.0, self._used / self._capacity)

    def throughput(self) -> float:
        """Output tokens per second over the last few seconds."""
        now = time.monotonic()
        self._forget_before(now - THROUGHPUT_WINDOW_S)
        window = min(THROUGHPUT_WINDOW_S, max(1e-3, now - self._started))
        return sum(tokens for _, tokens in self._generated) / window

    def _sync_usage(self) -> None:
        self.used_tokens.set(self._used)
        self.token_usage.set(self.usage)

    def render(self) -> bytes:
        return generate_latest(self.registry)
