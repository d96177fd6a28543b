"""What one stress run does: the ``workload:`` section of a campaign file."""

from __future__ import annotations

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


class SLO(BaseModel):
    """Latency objectives of one request; a request is good when it meets all that are given."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: float | None = Field(default=None, gt=0, le=DAY_MS, allow_inf_nan=False,
                                  description="Time to first token, ms.")
    itl_ms: float | None = Field(
        default=None, gt=0, le=DAY_MS, allow_inf_nan=False,
        description="Longest gap between two output chunks, ms (streaming).",
    )
    e2e_ms: float | None = Field(default=None, gt=0, le=DAY_MS, allow_inf_nan=False,
                                  description="End-to-end latency, ms.")

    @model_validator(mode="after")
    def _some(self) -> SLO:
        if self.ttft_ms is None and self.itl_ms is None and self.e2e_ms is None:
            raise ValueError("an SLO needs at least one of ttft_ms, itl_ms, e2e_ms")
        return self


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
    stream: bool = Field(default=False, description="Request SSE streams (stream: true).")
    arrival: Arrival = Field(
        default=Arrival.BURST, description="burst: all sessions at once; poisson: request_rate."
    )
    request_rate: float | None = Field(
        default=None, gt=0, le=100_000, allow_inf_nan=False,
        description="Sessions started per second (arrival: poisson)."
    )
    max_concurrency: int | None = Field(
        default=None, ge=1, le=100_000,
        description="At most this many sessions in flight; None: no bound.",
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
            raise ValueError("arrival: poisson needs request_rate (sessions per second)")
        if self.arrival is Arrival.BURST and self.request_rate is not None:
            raise ValueError("request_rate applies only to arrival: poisson")
        if self.context is not None and self.filler_tokens:
            raise ValueError("give either context or filler_tokens, not both")
        return self


def parse_slo(text: str) -> SLO:
    """``ttft_ms=500,itl_ms=50,e2e_ms=8000`` (any non-empty subset) as an SLO; ValueError with
    a one-line reason otherwise."""
    known = ("ttft_ms", "itl_ms", "e2e_ms")
    values: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in known:
            raise ValueError(f"{item!r} is not KEY=MS with KEY one of {', '.join(known)}")
        if key in values:
            raise ValueError(f"{key} is given twice")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{key}: {raw.strip()!r} is not a number of milliseconds") from None
        if not value > 0 or value == float("inf"):
            raise ValueError(f"{key}: must be a positive number of milliseconds, not {raw.strip()}")
        values[key] = value
    return SLO.model_validate(values)
