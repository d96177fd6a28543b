"""The stress workload: concurrent multi-turn tool-calling sessions against one endpoint.

Every session follows the agent contract (experiments/agent.py); every assistant turn is judged by
``classify_turn``; a session ends at its first non-OK turn. One shared aiohttp session carries all
requests (FACTS.md §Load harnesses: aiohttp is the client for the load path).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from rich.table import Table
from scipy.stats import binomtest

from experiments.agent import (
    SYSTEM_PROMPT,
    TOOLS,
    first_user_message,
    new_canary,
    tool_result_message,
)
from experiments.outcomes import CORRUPTION, INFRA, Outcome
from experiments.workload.classify import TurnVerdict, classify_turn, clip
from experiments.workload.spec import WorkloadSpec

BODY_PREVIEW = 500
_FILLER_TEXT = (
    "build log trace stack frame module import error warning retry cache buffer kernel thread "
    "queue worker socket request response header payload token batch shard replica index key "
    "value commit branch merge patch diff config flag option default timeout deadline latency"
)
FILLER_WORDS: tuple[str, ...] = tuple(_FILLER_TEXT.split(" "))


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


@dataclass(frozen=True)
class StressResult:
    sessions: tuple[SessionResult, ...]
    wall_s: float
    stopped_early: bool

    def counts(self) -> dict[str, int]:
        counts = {outcome.value: 0 for outcome in Outcome}
        for session in self.sessions:
            counts[session.outcome.value] += 1
        return counts

    def summary(self) -> dict[str, Any]:
        counts = self.counts()
        corrupted = sum(counts[outcome.value] for outcome in CORRUPTION)
        infra = sum(counts[outcome.value] for outcome in INFRA)
        judged = len(self.sessions) - infra
        ci95 = [0.0, 1.0]
        if judged:
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
        }


def filler(rng: random.Random, words: int) -> str:
    """``words`` seeded filler words and a trailing space, or "" (see tool_result_message)."""
    return " ".join(rng.choices(FILLER_WORDS, k=words)) + " " if words > 0 else ""


async def _post(
    http: aiohttp.ClientSession, endpoint: str, body: dict[str, Any], timeout_s: float
) -> dict[str, Any] | TurnVerdict:
    """The decoded JSON object of one completion, or an ERROR / TIMEOUT verdict."""
    try:
        async with http.post(endpoint, json=body) as response:
            text = (await response.read()).decode("utf-8", "replace")
            status = response.status
    except TimeoutError:
        return TurnVerdict(Outcome.TIMEOUT, f"no complete response within {timeout_s:g} s")
    except aiohttp.ClientError as exc:
        return TurnVerdict(Outcome.ERROR, clip(f"{type(exc).__name__}: {exc}"))
    if status != 200:
        return TurnVerdict(Outcome.ERROR, f"HTTP {status}: {text[:BODY_PREVIEW]}")
    try:
        data = json.loads(text)
    except ValueError:
        return TurnVerdict(Outcome.ERROR, f"invalid JSON (HTTP 200): {text[:BODY_PREVIEW]}")
    if not isinstance(data, dict):
        return TurnVerdict(Outcome.ERROR, f"response is not a JSON object: {text[:BODY_PREVIEW]}")
    return data


async def _session(
    http: aiohttp.ClientSession, base: str, model: str, spec: WorkloadSpec, seed: int, index: int
) -> SessionResult:
    key = f"s{seed}-{index}"
    rng = random.Random(f"{seed}:{index}")
    canary = new_canary(rng)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": first_user_message(key, canary)},
    ]
    started = time.monotonic()
    request_s: list[float] = []
    verdict = TurnVerdict(Outcome.OK)
    turn = 0
    try:
        for turn in range(1, spec.rounds + 1):  # noqa: B007 - turn is read after the loop
            body = {
                "model": model, "messages": messages, "tools": TOOLS, "tool_choice": "auto",
                "max_tokens": spec.max_tokens, "stream": False,
            }
            sent = time.monotonic()
            got = await _post(http, f"{base}/v1/chat/completions", body, spec.timeout_s)
            request_s.append(time.monotonic() - sent)
            verdict = got if isinstance(got, TurnVerdict) else classify_turn(got, canary, TOOLS)
            if verdict.outcome is not Outcome.OK or isinstance(got, TurnVerdict):
                break
            message = got["choices"][0]["message"]
            messages.append(
                {"role": "assistant", "content": message.get("content"),
                 "tool_calls": message["tool_calls"]}
            )
            for call in message["tool_calls"]:
                canary = new_canary(rng)
                result = tool_result_message(
                    call["function"]["name"], canary, filler(rng, spec.filler_tokens)
                )
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    except Exception as exc:  # a harness bug in one session must not kill the run
        verdict = TurnVerdict(Outcome.ERROR, clip(f"harness error: {exc!r}"))
    bad = verdict.outcome is not Outcome.OK
    return SessionResult(
        index=index, key=key, outcome=verdict.outcome, turns=turn,
        first_bad_turn=turn if bad else None, evidence=verdict.evidence,
        latency_s=time.monotonic() - started, request_s=tuple(request_s),
    )


async def _resolve_model(http: aiohttp.ClientSession, base: str, timeout_s: float) -> str:
    """The first model id the server lists, or "default"."""
    try:
        timeout = aiohttp.ClientTimeout(total=min(timeout_s, 10.0))
        async with http.get(f"{base}/v1/models", timeout=timeout) as response:
            data = await response.json(content_type=None)
        model = data["data"][0]["id"]
        return model if isinstance(model, str) and model else "default"
    except (aiohttp.ClientError, TimeoutError, ValueError, LookupError, TypeError):
        return "default"


async def run_stress(
    url: str,
    spec: WorkloadSpec,
    *,
    seed: int | None = None,
    on_session: Callable[[SessionResult], bool | None] | None = None,
) -> StressResult:
    """Run ``spec.sessions`` sessions at once against ``url`` (no trailing /v1).

    ``on_session`` sees each session as it finishes; returning True cancels the rest, which are
    not reported. ``seed`` overrides ``spec.seed``.
    """
    seed = spec.seed if seed is None else seed
    base = url.rstrip("/")
    started = time.monotonic()
    reported: list[SessionResult] = []
    stop = False
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=spec.timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        model = spec.model or await _resolve_model(http, base, spec.timeout_s)
        tasks = [
            asyncio.create_task(_session(http, base, model, spec, seed, index))
            for index in range(spec.sessions)
        ]
        try:
            pending: set[asyncio.Task[SessionResult]] = set(tasks)
            while pending and not stop:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for result in sorted((task.result() for task in done), key=lambda r: r.index):
                    reported.append(result)
                    if on_session is not None and on_session(result):
                        stop = True
                        break
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    reported.sort(key=lambda r: r.index)
    stopped_early = stop and len(reported) < spec.sessions
    return StressResult(tuple(reported), time.monotonic() - started, stopped_early)


def summary_table(result: StressResult) -> Table:
    """Outcome, count and share of one stress run, for ``bisect stress``."""
    summary = result.summary()
    total = summary["sessions"]
    lo, hi = summary["ci95"]
    table = Table(
        title=f"{total} sessions in {result.wall_s:.1f} s"
        + (" (stopped early)" if result.stopped_early else ""),
        caption=(
            f"corrupted {summary['corrupted']}/{summary['judged']} judged = "
            f"{summary['rate']:.1%} (95% CI {lo:.1%}–{hi:.1%}); infra {summary['infra']}"
        ),
    )
    table.add_column("outcome")
    table.add_column("count", justify="right")
    table.add_column("share", justify="right")
    for outcome, count in summary["counts"].items():
        share = f"{count / total:.1%}" if total else "-"
        table.add_row(outcome, str(count), share)
    return table
