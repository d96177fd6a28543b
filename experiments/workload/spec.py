"""What one stress run does: the ``workload:`` section of a campaign file."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class WorkloadSpec(BaseModel):
    """Concurrent multi-turn tool-calling sessions against one endpoint."""

    model_config = ConfigDict(extra="forbid")

    sessions: int = Field(default=80, ge=1, description="Concurrent sessions, started at once.")
    rounds: int = Field(default=4, ge=1, description="Assistant turns per session.")
    timeout_s: float = Field(default=60, gt=0, description="Timeout of one request, seconds.")
    seed: int = Field(default=0, description="Seeds session keys, canaries and filler.")
    model: str | None = Field(
        default=None,
        description="Model name; None asks the server's /v1/models (fallback 'default').",
    )
    max_tokens: int = Field(default=512, ge=1, description="max_tokens of every request.")
    filler_tokens: int = Field(
        default=0, ge=0, description="Approximate words of seeded filler in each tool result."
    )
