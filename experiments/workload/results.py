"""What a stress run returns: its sessions, their requests, and the run's summary."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from experiments.outcomes import CORRUPTION, INFRA, STRESS_OUTCOMES, Outcome
from experiments.workload.metrics import (
    LATENCIES,
    RequestMetrics,
    aggregate,
    latency_samples,
    percentiles_ms,
)
from experiments.workload.spec import SLO


@dataclass(frozen=True)
class SessionResult:
    """One finished session. Turns are counted from 1; ``turns`` includes the bad one."""

    index: int
    key: str
    outcome: Outcome
    turns: int
    first_bad_turn: int | None
    evidence: str | None
    latency_s: float
    request_s: tuple[float, ...] = ()  # end-to-end seconds of each request, in order
    requests: tuple[RequestMetrics, ...] = ()  # the same requests, fully measured

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "key": self.key,
            "outcome": self.outcome.value,
            "turns": self.turns,
            "first_bad_turn": self.first_bad_turn,
            "evidence": self.evidence,
            "latency_s": self.latency_s,
            "requests": [request.to_json() for request in self.requests],
        }


@dataclass(frozen=True)
class Progress:
    """How far a run is, for a progress bar. A session that ends early counts all its turns."""

    turns_done: int
    turns_total: int
    sessions_done: int
    sessions_total: int
    corrupted: int
    infra: int


_CLAUSE = re.compile(r": | after \d+ events|; ")


def failure_reason(evidence: str | None) -> str:
    """What a failed request's evidence says went wrong, without what varies between requests
    (bodies, event counts): ``HTTP 404``, ``cannot connect to 127.0.0.1:9: connection refused``,
    ``no complete response within 60 s``, ``stream ended before [DONE]``, ``broken reply``."""
    text = (evidence or "no evidence").split("\n", 1)[0]
    if text.startswith("cannot connect to "):  # host:port holds a colon; the cause is the point
        return text[:120]
    return _CLAUSE.split(text, maxsplit=1)[0][:80]


@dataclass(frozen=True)
class StressResult:
    sessions: tuple[SessionResult, ...]
    wall_s: float  # the whole run: model lookup and warm-up included
    stopped_early: bool
    slo: SLO | None = None  # the objectives goodput is counted against
    duration_s: float | None = None  # the measured sessions only (bench_serving's "duration")
    interrupted: bool = False  # stopped by Ctrl-C: the sessions finished until then
    model: str | None = None  # the model the requests named

    @property
    def duration(self) -> float:
        """Seconds the measured sessions took: the denominator of every throughput."""
        return self.wall_s if self.duration_s is None else self.duration_s

    def error_summary(self) -> list[dict[str, Any]]:
        """Sessions that errored or timed out, grouped by ``failure_reason``, most first; each
        with the first one's evidence as an example."""
        groups: dict[tuple[str, str], list[SessionResult]] = {}
        for session in self.sessions:
            if session.outcome in INFRA:
                reason = failure_reason(session.evidence)
                groups.setdefault((session.outcome.value, reason), []).append(session)
        ranked = sorted(groups.items(), key=lambda item: -len(item[1]))
        return [{"reason": reason, "outcome": outcome, "sessions": len(found),
                 "example": found[0].evidence}
                for (outcome, reason), found in ranked]

    def counts(self) -> dict[str, int]:
        counts = {outcome.value: 0 for outcome in STRESS_OUTCOMES}
        for session in self.sessions:
            counts[session.outcome.value] = counts.get(session.outcome.value, 0) + 1
        return counts

    def requests(self) -> Iterator[RequestMetrics]:
        for session in self.sessions:
            yield from session.requests

    def good_sessions(self) -> int:
        """Sessions that finished ok and, where the run had an SLO, met it with every request."""
        slo = self.slo
        return sum(s.outcome is Outcome.OK
                   and (slo is None or all(r.meets(slo) for r in s.requests))
                   for s in self.sessions)

    def performance(self) -> dict[str, Any]:
        """What a trial stores of the run's speed (JSON; a stored observation the search and the
        sweeps read): requests sent and completed, output tokens, per second of ``duration``
        (the measured sessions: the model lookup and warm-up are not the server's speed)
        completed requests (``request_throughput``), output tokens (``output_throughput``) and
        good sessions (``goodput``, ``good_sessions``), and the p50/p90/p99 of each latency in
        ``LATENCIES`` (None where the run measured none: ITL and TPOT need streaming)."""
        every = list(self.requests())
        done = [r for r in every if r.completed]
        per_s = 1 / self.duration if self.duration > 0 else 0.0
        output_tokens = sum(r.completion_tokens or 0 for r in done)
        good = self.good_sessions()
        samples = latency_samples(done)
        return {
            "wall_s": self.wall_s,
            "requests": len(every),
            "completed": len(done),
            "output_tokens": output_tokens,
            "good_sessions": good,
            "request_throughput": len(done) * per_s,
            "output_throughput": output_tokens * per_s,
            "goodput": good * per_s,
            **{name: percentiles_ms(samples[name]) for name in LATENCIES},
        }

    def summary(self) -> dict[str, Any]:
        """Outcome counts and the corruption rate, then bench_serving's metrics under its names
        (``metrics.aggregate``; throughputs over ``duration``), then the failures by reason."""
        counts = self.counts()
        corrupted = sum(counts.get(outcome.value, 0) for outcome in CORRUPTION)
        infra = sum(counts[outcome.value] for outcome in INFRA)
        judged = len(self.sessions) - infra
        ci95 = [0.0, 1.0]
        if judged:
            # here, not at the top: scipy.stats takes 0.7 s to import, and every pool actor
            # imports this module while only `bisect stress` asks for a summary
            from scipy.stats import binomtest

            interval = binomtest(corrupted, judged).proportion_ci(method="wilson")
            ci95 = [float(interval.low), float(interval.high)]
        return {
            "sessions": len(self.sessions),
            "counts": counts,
            "corrupted": corrupted,
            "infra": infra,
            "judged": judged,
            "rate": corrupted / judged if judged else 0.0,
            "ci95": ci95,
            "wall_s": self.wall_s,
            "duration": self.duration,
            "stopped_early": self.stopped_early,
            "interrupted": self.interrupted,
            **aggregate(self.requests(), self.duration, self.slo),
            "error_summary": self.error_summary(),
        }
