"""One session of the stress workload: the agent contract's conversation with one endpoint,
turn by turn, every assistant turn judged; the session ends at its first non-OK turn. And the
``Tracker`` that counts its turns and sessions for the run's progress.

A session's key and its random streams come from (seed, index): the same session sends the same
canaries and the same context in every run, whichever load generator runs it."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from experiments.agent import first_user_message, new_canary, tool_result_message
from experiments.outcomes import CORRUPTION, INFRA, Outcome
from experiments.workload.agent_tools import Agent
from experiments.workload.classify import TurnVerdict, clip
from experiments.workload.client import post_turn
from experiments.workload.context import context_chars, filler, filler_chars, target_chars
from experiments.workload.http_client import HttpClient
from experiments.workload.metrics import RequestMetrics
from experiments.workload.results import Progress, SessionResult
from experiments.workload.spec import WorkloadSpec


class Tracker:
    """Counts turns and sessions for the optional progress callback; hands the first failed
    request to ``on_failure``."""

    def __init__(self, spec: WorkloadSpec, progress: Callable[[Progress], None] | None,
                 on_failure: Callable[[str], None] | None = None,
                 on_leak: Callable[[str], None] | None = None) -> None:
        self.spec, self.progress, self.on_failure = spec, progress, on_failure
        self.on_leak = on_leak
        self.turns = self.sessions = self.corrupted = self.infra = 0
        self.first_failure: str | None = None
        self.counting = True  # False during the warm-up: not the run's turns

    def failed(self, endpoint: str, verdict: TurnVerdict) -> None:
        if self.first_failure is None:
            self.first_failure = f"POST {endpoint}: {verdict.evidence}"
            if self.on_failure is not None:
                self.on_failure(self.first_failure)

    def leaked(self, verdict: TurnVerdict) -> None:
        """A leak's triage label to ``on_leak`` (a counted session's only)."""
        if self.counting and self.on_leak is not None and verdict.leak_label is not None:
            self.on_leak(verdict.leak_label)

    def turn(self) -> None:
        if self.counting:
            self.turns += 1
            self._emit()

    def session(self, result: SessionResult) -> None:
        self.sessions += 1
        self.turns += self.spec.rounds - len(result.requests)  # turns it will never take
        self.corrupted += result.outcome in CORRUPTION
        self.infra += result.outcome in INFRA
        self._emit()

    def _emit(self) -> None:
        if self.progress is not None:
            self.progress(Progress(self.turns, self.spec.sessions * self.spec.rounds,
                                   self.sessions, self.spec.sessions, self.corrupted, self.infra))


def _echo(call: dict[str, Any]) -> dict[str, Any]:
    """A judged call as the next request sends it back: only the fields the API defines."""
    function = call["function"]
    return {"id": call["id"], "type": "function",
            "function": {"name": function["name"], "arguments": function["arguments"]}}


def _spread(chars: int, parts: int) -> list[int]:
    share, extra = divmod(max(0, chars), max(1, parts))
    return [share + (1 if i < extra else 0) for i in range(parts)]


async def run_session(
    http: HttpClient, base: str, model: str, spec: WorkloadSpec, seed: int,
    index: int, tracker: Tracker, agent: Agent, prefix: str = "s",
) -> SessionResult:
    key = f"{prefix}{seed}-{index}"
    rng = random.Random(f"{seed}:{index}" if prefix == "s" else f"{prefix}{seed}:{index}")
    # Context filler has its own stream, so canaries do not depend on how long replies were.
    growth_rng = random.Random(f"{seed}:{index}:context")
    canary = new_canary(rng)
    opening = first_user_message(key, canary)
    endpoint = f"{base}/v1/chat/completions"
    tools = agent.tools
    messages: list[dict[str, Any]] = [{"role": "system", "content": agent.system_prompt}]
    first = target_chars(spec, 1)
    if first is not None:  # a pasted log ahead of the task, as an agent's first prompt has
        opening = filler_chars(growth_rng, first - context_chars(
            [*messages, {"content": opening}])) + opening
    messages.append({"role": "user", "content": opening})
    started = time.monotonic()
    requests: list[RequestMetrics] = []
    verdict = TurnVerdict(Outcome.OK)
    turn = 0
    try:
        for turn in range(1, spec.rounds + 1):
            body: dict[str, Any] = {
                "model": model, "messages": messages, "tools": tools, "tool_choice": "auto",
                "max_tokens": spec.max_tokens, "stream": spec.stream,
            }
            if spec.stream:
                body["stream_options"] = {"include_usage": True}
            got, measured = await post_turn(http, endpoint, body, turn=turn,
                                            timeout_s=spec.timeout_s)
            requests.append(measured)
            if isinstance(got, TurnVerdict):
                if not measured.completed:
                    tracker.failed(endpoint, got)
                verdict = got
            else:
                verdict = agent.judge(got, canary)
                tracker.leaked(verdict)
            tracker.turn()
            if verdict.outcome is not Outcome.OK or isinstance(got, TurnVerdict):
                break
            message = got["choices"][0]["message"]
            calls = [_echo(call) for call in message["tool_calls"]]
            messages.append({"role": "assistant", "content": message.get("content"),
                             "tool_calls": calls})
            results = []
            for call in calls:
                canary = new_canary(rng)
                results.append((call, canary, filler(rng, spec.filler_tokens)))
            target = target_chars(spec, turn + 1) if turn < spec.rounds else None
            if target is not None:
                bare = [{"content": tool_result_message(c["function"]["name"], k)}
                        for c, k, _ in results]
                shares = _spread(target - context_chars(messages + bare), len(results))
                results = [(c, k, filler_chars(growth_rng, n))
                           for (c, k, _), n in zip(results, shares, strict=True)]
            for call, canary, text in results:
                content = tool_result_message(call["function"]["name"], canary, text)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    except Exception as exc:  # a harness bug in one session must not kill the run
        verdict = TurnVerdict(Outcome.ERROR, clip(f"harness error: {exc!r}"))
    bad = verdict.outcome is not Outcome.OK
    return SessionResult(
        index=index, key=key, outcome=verdict.outcome, turns=turn,
        first_bad_turn=turn if bad else None, evidence=_evidence(verdict),
        latency_s=time.monotonic() - started,
        request_s=tuple(r.e2e_s for r in requests), requests=tuple(requests),
    )


def _evidence(verdict: TurnVerdict) -> str | None:
    """A session's evidence as stored: a leak's triage line first (a campaign keeps the
    evidence, not the verdict, so `bisect show` and the report say which parser parses it)."""
    if verdict.leak_label is None or verdict.evidence is None:
        return verdict.evidence
    return f"[{verdict.leak_label}] {verdict.evidence}"
