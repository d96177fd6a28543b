"""The twin's time model: what a request costs in prefill and in decode, and the prefix cache.

Real servers are slow where the twin must be slow for the measurements of a campaign (TTFT, ITL,
end-to-end, tokens/s) to move the way they move on GPUs, and for a search over SGLang's numeric
knobs (``bisect optimize``) to meet the trade-offs it meets there:

- prefill costs a fixed overhead plus time per *new* prompt token; with HiCache a session's
  earlier prompt is a cached prefix whose tokens cost only a fraction (a host-to-device load
  instead of compute);
- ``--chunked-prefill-size C`` (modelled only when given): a prompt's new tokens are computed C
  at a time, each further chunk waiting one scheduler step (``--twin-chunk-step-ms``): larger
  chunks, lower TTFT for long prompts. The chunk shares its step with the decode batch: every
  decode step costs ``--twin-mixed-us-per-token`` more per token of the chunk in flight (at
  most C), so larger chunks, higher ITL while prompts are being prefilled. ``-1``: whole prompts;
- ``--cuda-graph-max-bs-prefill N`` (modelled only when given): chunks of more than N tokens (or
  any, with graphs disabled) compute at the eager slowdown;
- decode costs time per output token, more with more requests running (a bigger batch), times
  the eager slowdown without CUDA graphs or when the batch is larger than
  ``--cuda-graph-max-bs-decode`` (default as SGLang on an H200: 256, 512 from tensor parallelism
  4, at most ``--max-running-requests``);
- the KV pool (``max_total_num_tokens``, from ``--mem-fraction-static``) holds the prompts of the
  running requests; beyond it the server over-commits, retracts and recomputes: the compute of
  every step, prefill and decode, costs held/pool times more. So for a fixed load the output
  tokens/s grow with ``--max-running-requests`` until the running prompts fill the pool, then
  fall, while latency climbs: an interior optimum;
- HiCache's host pool (``--hicache-ratio`` x the KV pool, or ``--hicache-size`` GB) bounds the
  prefix cache by tokens: least recently used sessions' prefixes are dropped beyond it, so a
  larger ratio keeps more sessions' prefixes and more repeated prefixes hit;
- a seeded +-10% jitter per request keeps medians honest without making runs irreproducible.

With none of these flags given the model is the one the twin always had (the default pool and
host pool exceed any load of the tests, the default graph bound 256 running requests).
The twin keeps no GPU radix cache: under the investigated load the contexts exceed the GPU pool
(FACTS.md, the HiCache race), so only HiCache turns repeated prefixes into hits.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from experiments.twin.logs import graph_max_bs_decode

PREFIX_CACHE_SESSIONS = 8192  # LRU bound: the twin must not grow without limit over a campaign


@dataclass(frozen=True)
class LatencyModel:
    base_s: float
    prefill_s_per_token: float
    decode_s_per_token: float
    batch_slowdown: float
    eager_slowdown: float  # time factor of a step run eager instead of as a CUDA graph
    hit_cost: float
    graph_max_bs_decode: int  # larger decode batches run eager (0: always)
    graph_max_bs_prefill: int | None = None  # None: prefill graphs not modelled
    prefill_graphs: bool = True  # False with --disable-cuda-graph
    chunk_tokens: int | None = None  # None: chunking not modelled; 0: whole prompts
    chunk_step_s: float = 0.0
    mixed_s_per_token: float = 0.0
    kv_pool_tokens: int | None = None  # None: unbounded

    @classmethod
    def from_args(cls, ns: argparse.Namespace, kv_pool_tokens: int | None = None) -> LatencyModel:
        chunk = ns.chunked_prefill_size
        return cls(
            base_s=max(0.0, ns.twin_latency_ms) / 1000,
            prefill_s_per_token=max(0.0, ns.twin_prefill_us_per_token) / 1e6,
            decode_s_per_token=max(0.0, ns.twin_decode_ms_per_token) / 1000,
            batch_slowdown=max(0.0, ns.twin_decode_batch_slowdown),
            eager_slowdown=max(1.0, ns.twin_eager_slowdown),
            hit_cost=min(1.0, max(0.0, ns.twin_hicache_hit_cost)),
            graph_max_bs_decode=graph_max_bs_decode(ns),
            graph_max_bs_prefill=ns.cuda_graph_max_bs_prefill,
            prefill_graphs=not ns.disable_cuda_graph,
            chunk_tokens=None if chunk is None else max(0, chunk),
            chunk_step_s=max(0.0, ns.twin_chunk_step_ms) / 1000,
            mixed_s_per_token=max(0.0, ns.twin_mixed_us_per_token) / 1e6,
            kv_pool_tokens=kv_pool_tokens,
        )

    def _chunks(self, fresh: int) -> list[tuple[int, int]]:
        """(chunk size, how many) covering ``fresh`` new tokens."""
        size = self.chunk_tokens
        if not size or fresh <= size:
            return [(fresh, 1)]
        return [(size, fresh // size), (fresh % size, 1 if fresh % size else 0)]

    def _retract(self, held_tokens: int) -> float:
        pool = self.kv_pool_tokens
        return max(1.0, held_tokens / pool) if pool else 1.0

    def prefill_s(self, prompt_tokens: int, cached_tokens: int, jitter: float, *,
                  held_tokens: int = 0) -> float:
        """The prefill of a prompt with ``cached_tokens`` HiCache hits while the running
        requests hold ``held_tokens`` of the KV pool."""
        fresh = max(0, prompt_tokens - cached_tokens)
        compute = 0.0
        for size, count in self._chunks(fresh):
            eager = self.graph_max_bs_prefill is not None and (
                not self.prefill_graphs or size > self.graph_max_bs_prefill)
            compute += count * size * (self.eager_slowdown if eager else 1.0)
        steps = max(0, sum(count for _, count in self._chunks(fresh)) - 1)
        tokens = compute + self.hit_cost * cached_tokens
        work = tokens * self.prefill_s_per_token + steps * self.chunk_step_s
        return (self.base_s + work * self._retract(held_tokens)) * jitter

    def decode_step_s(self, running: int, jitter: float, *, held_tokens: int = 0,
                      prefilling_tokens: int = 0) -> float:
        """One output token while ``running`` requests share the decode batch, their prompts
        hold ``held_tokens`` of the KV pool and prompts of ``prefilling_tokens`` new tokens are
        being prefilled (one chunk of them joins the step)."""
        batch = 1 + self.batch_slowdown * max(0, running - 1)
        eager = self.eager_slowdown if running > self.graph_max_bs_decode else 1.0
        retract = self._retract(held_tokens)
        mixed = 0.0
        if self.chunk_tokens is not None:
            chunk = min(prefilling_tokens, self.chunk_tokens or prefilling_tokens)
            mixed = max(0, chunk) * self.mixed_s_per_token
        return (self.decode_s_per_token * batch * eager * retract + mixed) * jitter

    def retracted(self, running: int, held_tokens: int) -> int:
        """Running requests beyond what the KV pool holds (the log's ``#retracted-req``)."""
        pool = self.kv_pool_tokens
        if not pool or held_tokens <= pool or running <= 0:
            return 0
        return running - math.floor(running * pool / held_tokens)


class ServerLatency:
    """The model bound to one server's live load: the KV tokens its running requests hold (read
    when asked) and the prompts it is prefilling (known from the prefills it timed); every
    duration divided by ``speed()`` (the noise between trials this start drew, variation.py;
    1 without)."""

    def __init__(self, model: LatencyModel, held_tokens: Callable[[], int],
                 clock: Callable[[], float] = time.monotonic,
                 speed: Callable[[], float] | None = None) -> None:
        self.model = model
        self._held = held_tokens
        self._clock = clock
        self._speed = speed
        self._prefills: list[tuple[float, int]] = []  # heap of (ends at, new tokens)
        self._prefilling = 0

    def _paced(self, seconds: float) -> float:
        speed = 1.0 if self._speed is None else self._speed()
        return seconds if speed == 1.0 else seconds / max(1e-6, speed)

    @property
    def base_s(self) -> float:
        return self._paced(self.model.base_s)

    def prefill_s(self, prompt_tokens: int, cached_tokens: int, jitter: float) -> float:
        """The prefill's duration; its new tokens count as prefilling for that long."""
        seconds = self._paced(self.model.prefill_s(prompt_tokens, cached_tokens, jitter,
                                                   held_tokens=self._held()))
        fresh = max(0, prompt_tokens - cached_tokens)
        if self.model.chunk_tokens is not None and fresh:
            self._expire()
            heapq.heappush(self._prefills, (self._clock() + seconds, fresh))
            self._prefilling += fresh
        return seconds

    def decode_step_s(self, running: int, jitter: float) -> float:
        self._expire()
        return self._paced(self.model.decode_step_s(running, jitter, held_tokens=self._held(),
                                                    prefilling_tokens=self._prefilling))

    @property
    def prefilling_tokens(self) -> int:
        self._expire()
        return self._prefilling

    def _expire(self) -> None:
        now = self._clock()
        while self._prefills and self._prefills[0][0] <= now:
            self._prefilling -= heapq.heappop(self._prefills)[1]


class Jitter:
    """A per-request factor in [0.9, 1.1], from the twin's seed (timing only, never outcomes)."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def draw(self) -> float:
        return 1 + self._rng.uniform(-0.1, 0.1)


class PrefixCache:
    """HiCache as the twin sees it: per session, the prompt tokens already computed once.

    A session's next turn repeats its previous prompt as a prefix, so those tokens are hits.
    The cache keeps at most ``capacity`` sessions and ``max_tokens`` tokens (the host pool),
    dropping the least recently used sessions first.
    """

    def __init__(self, enabled: bool, capacity: int = PREFIX_CACHE_SESSIONS,
                 max_tokens: int | None = None) -> None:
        self.enabled = enabled
        self._capacity = capacity
        self._max_tokens = max_tokens
        self._tokens: OrderedDict[str, int] = OrderedDict()
        self._held = 0
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
        kept = max(prompt_tokens, self._tokens.get(session, 0))
        self._held += kept - self._tokens.get(session, 0)
        self._tokens[session] = kept
        self._tokens.move_to_end(session)
        limit = self._max_tokens
        while self._tokens and (len(self._tokens) > self._capacity
                                or (limit is not None and self._held > limit)):
            self._held -= self._tokens.popitem(last=False)[1]

    def flush(self) -> None:
        self._tokens.clear()
        self._held = 0

    @property
    def held_tokens(self) -> int:
        return self._held

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
