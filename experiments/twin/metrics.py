"""Prometheus metrics under SGLang's names, in the twin's own registry.

An own CollectorRegistry (not the global one) keeps several twins in one process, and the tests
that import this module, from colliding.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LABELS = ("model_name",)


class Metrics:
    def __init__(self, model_name: str, max_total_num_tokens: int) -> None:
        self.registry = CollectorRegistry()
        self._capacity = max(1, max_total_num_tokens)
        reg = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=reg).labels(model_name)

        self.running = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.queued = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.prompt_tokens = Counter(
            "sglang:prompt_tokens", "Number of prefill tokens processed.", LABELS, registry=reg
        ).labels(model_name)
        self.generation_tokens = Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", LABELS,
            registry=reg,
        ).labels(model_name)
        self.e2e_latency = Histogram(
            "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency.",
            LABELS, registry=reg,
            buckets=(0.01, 0.05, 0.1, 0.3, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
        ).labels(model_name)
        self._used = 0

    def hold_tokens(self, tokens: int) -> None:
        """Tokens of a running request occupy the KV pool until ``release_tokens``."""
        self._used += tokens
        self._sync_usage()

    def release_tokens(self, tokens: int) -> None:
        self._used = max(0, self._used - tokens)
        self._sync_usage()

    def _sync_usage(self) -> None:
        self.used_tokens.set(self._used)
        self.token_usage.set(min(1.0, self._used / self._capacity))

    def render(self) -> bytes:
        return generate_latest(self.registry)
