"""What one stress run does: the ``workload:`` section of a campaign file."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, model_validator

from experiments.workload.arrival import Arrival

# Upper bounds, far above any real run, so that `sessions: 1e30` or `timeout_s: .inf` is named
# when the campaign is validated instead of hanging a run.
MAX_TOKENS = 10_000_000
DAY_MS = 86_400_000


class ContextGrowth(BaseModel):
    """Context of a session from its first request to its last, in tokens (~4 chars each).

    Seeded filler goes into the user message and the tool results so that each request's context
    grows roughly linearly from ``start_tokens`` to ``end_tokens``: a race that needs HiCache to
    evict and reload (FACTS.md, PR #22811) only shows once the total context exceeds the KV pool.
    """

    model_config = ConfigDict(extra="forbid")

    start_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS,
                              description="Context of the first request.")
    end_tokens: int = Field(ge=0, le=MAX_TOKENS, description="Context of the last request.")

    @model_validator(mode="after")
    def _grows(self) -> ContextGrowth:
        # A conversation only ever appends, so its context cannot shrink.
        if self.end_tokens < self.start_tokens:
            raise ValueError("end_tokens must be at least start_tokens")
        return self


# Each SLO field and its name in bench_serving's goodput keys (its ``--goodput e2el:8000``;
# bench_serving has no ITL objective: ``itl`` is bisect's).
SLO_KEYS = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2el"}


class SLO(BaseModel):
    """Latency objectives of one request; a request is good when it meets all that are given.
    bench_serving's ``--goodput`` keys are ``ttft``, ``tpot`` and ``e2el``; ITL is bisect's own."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: float | None = Field(default=None, gt=0, le=DAY_MS, allow_inf_nan=False,
                                  description="Time to first token, ms.")
    tpot_ms: float | None = Field(
        default=None, gt=0, le=DAY_MS, allow_inf_nan=False,
        description="Time per output token after the first, ms (streaming; a request of one "
                    "output token meets it, as in bench_serving).",
    )
    itl_ms: float | None = Field(
        default=None, gt=0, le=DAY_MS, allow_inf_nan=False,
        description="Longest gap between two output chunks, ms (streaming).",
    )
    e2e_ms: float | None = Field(default=None, gt=0, le=DAY_MS, allow_inf_nan=False,
                                  description="End-to-end latency, ms.")

    @model_validator(mode="after")
    def _some(self) -> SLO:
        if all(value is None for value in self.limits().values()):
            raise ValueError(f"an SLO needs at least one of {', '.join(SLO_KEYS)}")
        return self

    def limits(self) -> dict[str, float | None]:
        """Each objective under bench_serving's goodput name (ttft, tpot, itl, e2el)."""
        return {name: getattr(self, field) for field, name in SLO_KEYS.items()}


class WorkloadSpec(BaseModel):
    """Concurrent multi-turn tool-calling sessions against one endpoint."""

    model_config = ConfigDict(extra="forbid")

    sessions: int = Field(default=80, ge=1, le=100_000,
                          description="Sessions per run (see arrival).")
    rounds: int = Field(default=4, ge=1, le=1000, description="Assistant turns per session.")
    timeout_s: float = Field(default=60, gt=0, le=86_400, allow_inf_nan=False,
                             description="Timeout of one request, seconds.")
    seed: int = Field(default=0, ge=-(2**63), lt=2**63,
                      description="Seeds session keys, canaries, filler, arrivals. In a "
                                  "campaign: absent, each campaign draws its own; set, it is "
                                  "replayed.")
    model: str | None = Field(
        default=None,
        description="Model name; None asks the server's /v1/models (fallback 'default').",
    )
    max_tokens: int = Field(default=512, ge=1, le=MAX_TOKENS,
                            description="max_tokens of every request.")
    filler_tokens: int = Field(
        default=0, ge=0, le=MAX_TOKENS,
        description="Approximate words of seeded filler in each tool result.",
    )
    stream: bool = Field(
        default=True,
        description="Request SSE streams, as bench_serving does unless --disable-stream: TTFT, "
                    "ITL and TPOT are measured on a stream only.",
    )
    arrival: Arrival = Field(
        default=Arrival.BURST,
        description="burst: all sessions at once (bench_serving's request rate inf); poisson: "
                    "at request_rate.",
    )
    request_rate: float | None = Field(
        default=None, gt=0, le=100_000, allow_inf_nan=False,
        description="Requests per second (arrival: poisson): sessions start as a Poisson "
                    "process of request_rate / rounds per second, and each sends its next "
                    "request when the last is answered, so requests come at request_rate per "
                    "second while the server keeps up and sessions run all their rounds.",
    )
    max_concurrency: int | None = Field(
        default=None, ge=1, le=100_000,
        description="At most this many sessions in flight (a session has one request in "
                    "flight at a time); None: no bound.",
    )
    context: ContextGrowth | None = Field(
        default=None, description="Grow each session's context (instead of filler_tokens)."
    )
    slo: SLO | None = Field(default=None, description="Latency objectives for goodput.")
    max_response_bytes: int = Field(
        default=8 << 20, ge=4096, le=1 << 30,
        description="Bytes one response may take (head, framing, body); more is an error.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        if self.arrival is Arrival.POISSON and self.request_rate is None:
            raise ValueError("arrival: poisson needs request_rate (requests per second)")
        if self.arrival is Arrival.BURST and self.request_rate is not None:
            raise ValueError("request_rate applies only to arrival: poisson")
        if self.context is not None and self.filler_tokens:
            raise ValueError("give either context or filler_tokens, not both")
        return self


# What ``--slo`` accepts for each SLO field: bisect's names and bench_serving's --goodput keys.
_SLO_NAMES = {name: field for field, short in SLO_KEYS.items()
              for name in (field, short, field.removesuffix("_ms"))}


def parse_slo(text: str) -> SLO:
    """``ttft_ms=500,tpot_ms=40,itl_ms=50,e2e_ms=8000`` or bench_serving's ``--goodput`` form
    ``ttft:500 tpot:40 e2el:8000`` (any non-empty subset; separated by commas or spaces) as an
    SLO; ValueError with a one-line reason otherwise."""
    values: dict[str, float] = {}
    text = re.sub(r"\s*([=:])\s*", r"\1", text)  # "ttft_ms = 500" as "ttft_ms=500"
    for item in text.replace(",", " ").split() or [""]:
        key, sep, raw = item.partition("=") if "=" in item else item.partition(":")
        field = _SLO_NAMES.get(key.strip())
        if not sep or field is None:
            raise ValueError(f"{item!r} is not KEY=MS (or KEY:MS) with KEY one of "
                             f"{', '.join(SLO_KEYS)} (or {', '.join(SLO_KEYS.values())})")
        if field in values:
            raise ValueError(f"{field} is given twice")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{field}: {raw.strip()!r} is not a number of milliseconds") \
                from None
        if not value > 0 or value == float("inf"):
            raise ValueError(f"{field}: must be a positive number of milliseconds, not "
                             f"{raw.strip()}")
        values[field] = value
    return SLO.model_validate(values)
