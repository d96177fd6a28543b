"""The stress workload: concurrent multi-turn tool-calling sessions against one endpoint.

Every session (``session.py``) follows the agent contract (experiments/agent.py) with the
built-in tools or the user's (``agent_tools.py``); every assistant turn is judged by
``classify_turn``; a session ends at its first non-OK turn. One ``HttpClient`` (keep-alive
pool, ``experiments/workload/http_client.py``) carries all requests. Sessions start all at once
or at Poisson arrivals paced so that requests come at ``request_rate`` per second, optionally at
most ``max_concurrency`` sessions in flight, like bench_serving's ``--request-rate`` and
``--max-concurrency``; ``warmup`` one-turn sessions go first and are not counted, as its
``--warmup-requests``.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import orjson

try:
    import uvloop
except ImportError:  # a dependency, but not on every platform (no Windows build)
    uvloop = None  # type: ignore[assignment]

from experiments.workload import triage
from experiments.workload.agent_tools import BUILT_IN, Agent
from experiments.workload.arrival import Arrival
from experiments.workload.context import FILLER_WORDS, filler
from experiments.workload.http_client import HttpClient, bearer
from experiments.workload.http_connection import HttpError
from experiments.workload.output import summary_table, write_jsonl
from experiments.workload.results import Progress, SessionResult, StressResult
from experiments.workload.session import Tracker, run_session
from experiments.workload.spec import WorkloadSpec

# Re-exported: callers import these from here since before the split into modules.
__all__ = [
    "FILLER_WORDS", "Progress", "SessionResult", "StressInterrupted", "StressResult",
    "WarmupFailed", "api_base", "arrival_offsets", "filler", "run_stress", "run_stress_sync",
    "summary_table", "write_jsonl",
]
_SUFFIXES = ("/chat/completions", "/v1")


def api_base(url: str) -> str:
    """The server's root from a URL as users write it: bare (``http://host:8000``), as the
    OpenAI SDK's ``base_url`` (``http://host:8000/v1``) or the endpoint itself."""
    base = url.strip().rstrip("/")
    for suffix in _SUFFIXES:
        base = base.removesuffix(suffix)
    return base


class WarmupFailed(Exception):
    """No warm-up request completed (as bench_serving's "Warmup failed"): the run was not
    started. The message is the first failure's reason."""


class StressInterrupted(Exception):
    """Ctrl-C during ``run_stress_sync``; ``result`` holds the sessions finished until then."""

    def __init__(self, result: StressResult) -> None:
        super().__init__("interrupted")
        self.result = result


async def _resolve_model(http: HttpClient, base: str, timeout_s: float) -> str:
    """The first model id the server lists, or "default"."""
    try:
        async with asyncio.timeout(min(timeout_s, 10.0)):
            response = await http.request("GET", f"{base}/v1/models")
            try:
                data = orjson.loads(await response.read())
            finally:
                response.close()
        model = data["data"][0]["id"]
        return model if isinstance(model, str) and model else "default"
    except (HttpError, TimeoutError, ValueError, LookupError, TypeError):
        return "default"


def arrival_offsets(spec: WorkloadSpec, seed: int) -> list[float]:
    """Seconds after the start at which each session arrives: 0 for all (burst: bench_serving's
    request rate inf), or a seeded Poisson process whose first arrival is at 0 (as
    bench_serving's) at ``request_rate / rounds`` sessions per second: ``request_rate`` counts
    requests, as bench_serving's does, and each session sends ``rounds`` of them."""
    if spec.arrival is Arrival.BURST or spec.request_rate is None:
        return [0.0] * spec.sessions
    rng = random.Random(f"{seed}:arrival")
    sessions_per_s = spec.request_rate / spec.rounds
    offsets, at = [], 0.0
    for _ in range(spec.sessions):
        offsets.append(at)
        at += rng.expovariate(sessions_per_s)
    return offsets


@dataclass
class _Run:
    """What a run has measured so far: the result, or the partial one of an interrupted run."""

    spec: WorkloadSpec
    started: float = field(default_factory=time.monotonic)
    began: float | None = None  # the measured sessions' start (after the model and warm-up)
    ended: float | None = None
    model: str | None = None
    sessions: list[SessionResult] = field(default_factory=list)

    def result(self, stopped_early: bool, interrupted: bool = False) -> StressResult:
        now = time.monotonic() if self.ended is None else self.ended
        duration = now - self.began if self.began is not None else 0.0
        return StressResult(tuple(sorted(self.sessions, key=lambda r: r.index)),
                            now - self.started, stopped_early, self.spec.slo, duration,
                            interrupted, self.model)


async def _warm_up(http: HttpClient, base: str, model: str, spec: WorkloadSpec, seed: int,
                   count: int, tracker: Tracker, agent: Agent) -> None:
    """``count`` one-turn sessions (keys ``w{seed}-{i}``), at most ``max_concurrency`` at once;
    ``WarmupFailed`` when none completed its request."""
    one = spec.model_copy(update={"rounds": 1})
    limiter = asyncio.Semaphore(spec.max_concurrency or count)

    async def warm(index: int) -> SessionResult:
        async with limiter:
            return await run_session(http, base, model, one, seed, index, tracker, agent, "w")

    tracker.counting = False
    try:
        done = await asyncio.gather(*(warm(index) for index in range(count)))
    finally:
        tracker.counting = True
    if not any(r.completed for session in done for r in session.requests):
        raise WarmupFailed(tracker.first_failure or "no warm-up request completed")


async def _run_stress(
    url: str,
    spec: WorkloadSpec,
    run: _Run,
    *,
    seed: int | None = None,
    on_session: Callable[[SessionResult], bool | None] | None = None,
    progress: Callable[[Progress], None] | None = None,
    indices: Collection[int] | None = None,
    api_key: str | None = None,
    agent: Agent = BUILT_IN,
    warmup: int = 0,
    on_failure: Callable[[str], None] | None = None,
    on_leak: Callable[[str], None] | None = None,
    ready: asyncio.Future[Any] | None = None,
) -> StressResult:
    """The body of ``run_stress``; what it measures goes into ``run`` as it comes. The
    measured sessions start once ``ready`` is done."""
    seed = spec.seed if seed is None else seed
    base = api_base(url)
    tracker = Tracker(spec, progress, on_failure, on_leak)
    limiter = asyncio.Semaphore(spec.max_concurrency) if spec.max_concurrency else None
    stop = False
    tasks: list[asyncio.Task[SessionResult]] = []
    async with HttpClient(headers=bearer(api_key),
                          max_response_bytes=spec.max_response_bytes) as http:
        model = run.model = spec.model or await _resolve_model(http, base, spec.timeout_s)
        if warmup:
            await _warm_up(http, base, model, spec, seed, warmup, tracker, agent)
        if ready is not None:
            await ready
        begin = run.began = time.monotonic()

        async def arrive(index: int, offset: float) -> SessionResult:
            await asyncio.sleep(max(0.0, begin + offset - time.monotonic()))
            if limiter is None:
                return await run_session(http, base, model, spec, seed, index, tracker, agent)
            async with limiter:
                return await run_session(http, base, model, spec, seed, index, tracker, agent)

        tasks = [asyncio.create_task(arrive(index, offset))
                 for index, offset in enumerate(arrival_offsets(spec, seed))
                 if indices is None or index in indices]
        try:
            pending: set[asyncio.Task[SessionResult]] = set(tasks)
            while pending and not stop:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for result in sorted((task.result() for task in done), key=lambda r: r.index):
                    run.sessions.append(result)
                    tracker.session(result)
                    if on_session is not None and on_session(result):
                        stop = True
                        break
            run.ended = time.monotonic()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return run.result(stop and len(run.sessions) < len(tasks))


async def run_stress(
    url: str,
    spec: WorkloadSpec,
    *,
    seed: int | None = None,
    on_session: Callable[[SessionResult], bool | None] | None = None,
    progress: Callable[[Progress], None] | None = None,
    indices: Collection[int] | None = None,
    api_key: str | None = None,
    agent: Agent = BUILT_IN,
    warmup: int = 0,
    on_failure: Callable[[str], None] | None = None,
    tool_call_parser: str | None = None,
    on_leak: Callable[[str], None] | None = None,
    _run: _Run | None = None,
) -> StressResult:
    """Run ``spec.sessions`` sessions against ``url`` (``api_base``: bare, or ending in /v1)
    as the spec schedules.

    ``on_session`` sees each session as it finishes; returning True cancels the rest (queued
    ones and in-flight requests and streams alike), which are not reported. ``seed`` overrides
    ``spec.seed``. ``progress`` is called after every turn and every session. ``indices``: run
    only these sessions (a load generator's share), keyed and timed as in the whole run.
    ``api_key``: sent as ``Authorization: Bearer`` with every request (never printed).
    ``agent``: the system prompt and tools sent, and how calls are judged (``agent_tools``).
    ``warmup``: one-turn sessions sent first, not counted; ``WarmupFailed`` if none completed.
    ``on_failure`` is called once, with the first request that failed (its endpoint and why).
    ``tool_call_parser``: the server's ``--tool-call-parser``, which leaks are triaged against
    (None: not known, every detector is asked); ``on_leak`` sees each leak's triage label.
    """
    # What the process holds before the run (imports, the caller's state) is not the run's
    # garbage: frozen, every full collection during the load skips it (against the harness's
    # stub, a freeze left to warm_up came late: two full collections over ~580,000 objects in a
    # run of 2,000 requests, 0.4 ms added to each request).
    gc.freeze()
    # Leaks are triaged with SGLang's detectors when they are installed; importing them takes
    # seconds, so it happens in a thread beside the model lookup and the warm-up, not inside
    # the first leak; and before the measured sessions: the import holds the GIL most of the
    # time, and the latencies of the requests beside it came out ~6 ms too long (against
    # bench_serving's figures, tests/test_stress_bench_serving.py). Once done it is free.
    warming = asyncio.create_task(asyncio.to_thread(triage.warm_up))
    try:
        with triage.serving(tool_call_parser):  # the sessions' tasks inherit it
            return await _run_stress(url, spec, _Run(spec) if _run is None else _run,
                                     seed=seed, on_session=on_session, progress=progress,
                                     indices=indices, api_key=api_key, agent=agent,
                                     warmup=warmup, on_failure=on_failure, on_leak=on_leak,
                                     ready=warming)
    finally:
        await warming
        # warm_up froze the long-lived objects for the run; given back, the interpreter's exit
        # frees them (frozen, triton's bindings would report them as leaked).
        gc.unfreeze()


def run_stress_sync(url: str, spec: WorkloadSpec, **options: Any) -> StressResult:
    """``run_stress`` from synchronous code (``bisect stress``), on uvloop's event loop when
    uvloop imports (less client CPU per request than asyncio's own loop: BENCHMARKS.md).
    Ctrl-C raises ``StressInterrupted`` with the sessions finished until then.

    The result leaves through a list, not as the main task's result: ``asyncio.run`` restores
    its SIGINT handler through ``signal.getsignal``, which formats the handler's repr, the
    finished main task's result included: every session of the run, ~0.1 s per 1,000."""
    box: list[StressResult] = []
    run = _Run(spec)

    async def main() -> None:
        box.append(await run_stress(url, spec, _run=run, **options))

    try:
        if uvloop is None:
            asyncio.run(main())
        else:
            uvloop.run(main())
    except KeyboardInterrupt:  # the runner cancelled the run at the first Ctrl-C, then raised
        raise StressInterrupted(run.result(True, interrupted=True)) from None
    return box[0]
