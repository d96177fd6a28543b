"""The twin's time model: what a request costs in prefill and in decode, and the prefix cache.

Real servers are slow where the twin must be slow for the measurements of a campaign (TTFT, ITL,
end-to-end) to move the way they move on GPUs:

- prefill costs a fixed overhead plus time per *new* prompt token; with HiCache a session's
  earlier prompt is a cached prefix whose tokens cost only a fraction (a host-to-device load
  instead of compute);
- decode costs time per output token, more with more requests running (a bigger batch), and
  more again without CUDA graphs (eager launches);
- a seeded +-10% jitter per request keeps medians honest without making runs irreproducible.

The twin keeps no GPU radix cache: under the investigated load the contexts exceed the GPU pool
(FACTS.md, the HiCache race), so only HiCache turns repeated prefixes into hits.
"""

from __future__ import annotations

import argparse
import random
from collections import OrderedDict
from dataclasses import dataclass

from experiments.twin.args import eager_decode

PREFIX_CACHE_SESSIONS = 8192  # LRU bound: the twin must not grow without limit over a campaign


@dataclass(frozen=True)
class LatencyModel:
    base_s: float
    prefill_s_per_token: float
    decode_s_per_token: float
    batch_slowdown: float
    eager_factor: float  # 1.0 with CUDA graphs
    hit_cost: float

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> LatencyModel:
        return cls(
            base_s=max(0.0, ns.twin_latency_ms) / 1000,
            prefill_s_per_token=max(0.0, ns.twin_prefill_us_per_token) / 1e6,
            decode_s_per_token=max(0.0, ns.twin_decode_ms_per_token) / 1000,
            batch_slowdown=max(0.0, ns.twin_decode_batch_slowdown),
            eager_factor=max(1.0, ns.twin_eager_slowdown) if eager_decode(ns) else 1.0,
            hit_cost=min(1.0, max(0.0, ns.twin_hicache_hit_cost)),
        )

    def prefill_s(self, prompt_tokens: int, cached_tokens: int, jitter: float) -> float:
        fresh = max(0, prompt_tokens - cached_tokens)
        tokens = fresh + self.hit_cost * cached_tokens
        return (self.base_s + tokens * self.prefill_s_per_token) * jitter

    def decode_step_s(self, running: int, jitter: float) -> float:
        """One output token while ``running`` requests share the decode batch."""
        batch = 1 + self.batch_slowdown * max(0, running - 1)
        return self.decode_s_per_token * batch * self.eager_factor * jitter


class Jitter:
    """A per-request factor in [0.9, 1.1], from the twin's seed (timing only, never outcomes)."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def draw(self) -> float:
        return 1 + self._rng.uniform(-0.1, 0.1)


class PrefixCache:
    """HiCache as the twin sees it: per session, the prompt tokens already computed once.

    A session's next turn repeats its previous prompt as a prefix, so those tokens are hits.
    """

    def __init__(self, enabled: bool, capacity: int = PREFIX_CACHE_SESSIONS) -> None:
        self.enabled = enabled
        self._capacity = capacity
        self._tokens: OrderedDict[str, int] = OrderedDict()
        self.hit_tokens = 0
        self.prompt_tokens = 0

    def lookup(self, session: str, prompt_tokens: int) -> int:
        """Cached tokens of this prompt (at least one token is always computed)."""
        cached = 0
        if self.enabled and session in self._tokens:
            self._tokens.move_to_end(session)
            cached = min(self._tokens[session], max(0, prompt_tokens - 1))
        self.hit_tokens += cached
        self.prompt_tokens += prompt_tokens
        return cached

    def store(self, session: str, prompt_tokens: int) -> None:
        if not self.enabled:
            return
        self._tokens[session] = max(prompt_tokens, self._tokens.get(session, 0))
        self._tokens.move_to_end(session)
        while len(self._tokens) > self._capacity:
            self._tokens.popitem(last=False)

    def flush(self) -> None:
        self._tokens.clear()

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
