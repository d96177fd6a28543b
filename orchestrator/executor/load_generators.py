"""Load generators: a trial's sessions run by Ray actors, on other machines of a Ray cluster.

The campaign's ``generators:`` section says how many generators share a trial's workload and
which Ray resources or node labels place them (e.g. a custom resource ``loadgen`` that only the
load machines advertise). Generator *g* of *n* runs the session indices ``g, g+n, g+2n, …`` with
the trial's seed, so together they run exactly the sessions one process would run: same keys,
same canaries, same arrival offsets. The pool's actor keeps everything else (deploy, metrics,
logs): it takes finished sessions from every generator as they come, feeds them to the trial's
stop rule, and stops every generator once the rule decides. A generator that dies or cannot be
placed fails the trial as an infrastructure failure (``GeneratorFailed``), never as evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayError

from experiments.campaign import Generators
from experiments.workload import triage
from experiments.workload.results import SessionResult, StressResult
from experiments.workload.spec import WorkloadSpec
from experiments.workload.stress import run_stress
from orchestrator.executor.base import GeneratorRun


def driver_settings() -> dict[str, Any]:
    """Ray options that carry the driver's own settings to the actors that judge sessions (a
    Ray cluster's workers do not see the driver's environment): ``BISECT_TRIAGE``."""
    value = os.environ.get(triage.ENV)
    return {} if value is None else {"runtime_env": {"env_vars": {triage.ENV: value}}}


class GeneratorFailed(RuntimeError):
    """A load generator died, failed or was never placed: the trial is an infrastructure
    failure (by its type: retried; the run stops if it persists), never evidence."""


@dataclass(frozen=True)
class GeneratorNode:
    """Where a generator runs, as it sees itself."""

    node_id: str  # its Ray node
    address: str  # that node's IP address: the machine a user can find


@dataclass(frozen=True)
class Share:
    """One generator's part of a trial: its session indices and its part of the cap."""

    indices: tuple[int, ...]
    spec: WorkloadSpec


def split(spec: WorkloadSpec, count: int) -> list[Share]:
    """Session indices dealt round-robin (Poisson arrivals stay spread over every generator)
    and ``max_concurrency`` divided so the generators together keep the same bound. Never more
    generators than sessions or than the concurrency bound allows."""
    used = min(count, spec.sessions, spec.max_concurrency or spec.sessions)
    shares = []
    for g in range(used):
        indices = tuple(range(g, spec.sessions, used))
        cap = spec.max_concurrency
        if cap is not None:
            cap = cap // used + (1 if g < cap % used else 0)
        shares.append(Share(indices, spec.model_copy(update={"max_concurrency": cap})))
    return shares


def unplaceable(config: Generators | None, pools: int = 1) -> str | None:
    """Why the Ray cluster cannot host the generators (resources no live node advertises, too
    few of them for every pool at once), or None. Checked once before a campaign starts: a
    misconfigured cluster is a broken run, not a string of failed trials."""
    if config is None:
        return None
    total = ray.cluster_resources()
    each = config.count * pools  # every pool keeps its generators from trial to trial
    wanted = {name: amount * each for name, amount in config.resources.items()}
    if config.num_cpus:
        wanted["CPU"] = config.num_cpus * each
    short = [f"{name}: {amount:g} wanted, {total.get(name, 0):g} in the cluster"
             for name, amount in wanted.items() if total.get(name, 0) < amount]
    if config.labels:
        labelled = [node for node in ray.nodes() if node.get("Alive")
                    and all(node.get("Labels", {}).get(k) == v for k, v in config.labels.items())]
        if not labelled:
            short.append(f"no live node has the labels {config.labels}")
    if not short:
        return None
    return ("the Ray cluster cannot place the load generators (" + "; ".join(short) + "): start "
            "the load machines with `ray start --address … --resources '{…}'` (see README)")


class LoadGenerator:
    """A Ray actor that runs its share of one trial at a time. The pool's actor calls ``start``,
    then ``take`` until the run is over, or ``stop`` to end it early."""

    def __init__(self) -> None:
        self._run: asyncio.Task[StressResult] | None = None
        self._finished: list[SessionResult] = []
        self._news = asyncio.Event()
        # The leak triage imports sglang (seconds): done while the pool deploys, not in a run.
        threading.Thread(target=triage.warm_up, name="triage-warm-up", daemon=True).start()

    async def start(self, url: str, spec: WorkloadSpec, seed: int,
                    indices: tuple[int, ...], api_key: str | None = None,
                    tool_call_parser: str | None = None) -> GeneratorNode:
        """Begin a run in the background; returns where this generator is. Leaks are triaged
        against ``tool_call_parser``, the server's (None: not known)."""
        await self.stop()
        finished: list[SessionResult] = []
        news = asyncio.Event()

        def report(session: SessionResult) -> None:
            finished.append(session)
            news.set()

        self._finished, self._news = finished, news
        self._run = asyncio.create_task(
            run_stress(url, spec, seed=seed, on_session=report, indices=frozenset(indices),
                       api_key=api_key, tool_call_parser=tool_call_parser))
        self._run.add_done_callback(lambda _: news.set())
        return GeneratorNode(str(ray.get_runtime_context().get_node_id()),
                             ray.util.get_node_ip_address())

    async def take(self) -> tuple[list[SessionResult], bool]:
        """The sessions finished since the last take (waiting for at least one, or for the end
        of the run), and whether the run is over. A run that failed raises its error here."""
        run, news = self._run, self._news
        if run is None:
            return [], True
        if not run.done():
            await news.wait()
            news.clear()
        batch = list(self._finished)
        self._finished.clear()  # the list the run appends to
        if run.done() and not run.cancelled():
            run.result()  # a failed run raises here, and so in the pool's actor
        return batch, run.done()

    async def stop(self) -> bool:
        """End the current run; True if it still had sessions to run."""
        run = self._run
        if run is None or run.done():
            return False
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        return True


def _future(ref: Any) -> asyncio.Future[Any]:
    return asyncio.wrap_future(ref.future())


def _reason(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0] if text else ''}".rstrip(": ")


class LoadGenerators:
    """The generators of one pool, used from inside its actor: created on first use, kept for
    the next trials, replaced after a failure."""

    def __init__(self, config: Generators) -> None:
        self.config = config
        self.actors: list[Any] = []
        self.runs: tuple[GeneratorRun, ...] = ()  # what each generator did in the last trial
        self._spawn(config.count)  # they start (and warm up) while the first variant deploys

    def _spawn(self, count: int) -> list[Any]:
        options: dict[str, Any] = {"num_cpus": self.config.num_cpus,
                                   "resources": dict(self.config.resources),
                                   "scheduling_strategy": "SPREAD", "max_restarts": 0,
                                   **driver_settings()}
        if self.config.labels:
            options["label_selector"] = dict(self.config.labels)
        actor = ray.remote(LoadGenerator).options(**options)
        while len(self.actors) < count:
            self.actors.append(actor.remote())
        return self.actors[:count]

    async def run_stress(
        self, url: str, spec: WorkloadSpec, *, seed: int,
        on_session: Callable[[SessionResult], bool | None], api_key: str | None = None,
        tool_call_parser: str | None = None,
    ) -> StressResult:
        """Like ``run_stress``, with the sessions spread over the generators."""
        began = time.monotonic()
        self.runs = ()
        shares = split(spec, self.config.count)
        actors = self._spawn(len(shares))
        try:
            nodes = await self._start(actors, shares, url, seed, api_key, tool_call_parser)
            kept, finished, decided = await self._collect(actors, on_session)
            stopped = [False] * len(actors)
            if decided:  # every generator stops: queued sessions, in-flight requests, streams
                stopped = list(await asyncio.gather(*(_future(a.stop.remote()) for a in actors)))
        except (RayError, TimeoutError) as exc:
            self.shutdown()  # the next trial gets fresh generators
            raise GeneratorFailed(f"load generator failed: {_reason(exc)}") from None
        self.runs = tuple(
            GeneratorRun(node.node_id, node.address, len(share.indices), done, stop)
            for node, share, done, stop in zip(nodes, shares, finished, stopped, strict=True))
        kept.sort(key=lambda s: s.index)
        return StressResult(tuple(kept), time.monotonic() - began,
                            decided and len(kept) < spec.sessions, spec.slo)

    async def _start(self, actors: list[Any], shares: list[Share], url: str,
                     seed: int, api_key: str | None,
                     tool_call_parser: str | None = None) -> list[GeneratorNode]:
        """Start every share; where each generator is."""
        starts = [_future(a.start.remote(url, s.spec, seed, s.indices, api_key,
                                         tool_call_parser))
                  for a, s in zip(actors, shares, strict=True)]
        try:
            return list(await asyncio.wait_for(asyncio.gather(*starts),
                                               timeout=self.config.start_timeout_s))
        except TimeoutError:
            raise TimeoutError(f"not placed within {self.config.start_timeout_s:g} s (does a "
                               "live node still advertise the resources?)") from None

    async def _collect(
        self, actors: list[Any], on_session: Callable[[SessionResult], bool | None],
    ) -> tuple[list[SessionResult], list[int], bool]:
        """Feed finished sessions to ``on_session`` as they come, until every generator is done
        or it returns True (the session that decided is the last one kept). Returns the kept
        sessions, how many each generator reported, and whether it was decided."""
        kept: list[SessionResult] = []
        finished = [0] * len(actors)
        taking = {_future(a.take.remote()): g for g, a in enumerate(actors)}
        try:
            while taking:
                done, _ = await asyncio.wait(taking, return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    g = taking.pop(future)
                    batch, over = future.result()
                    finished[g] += len(batch)
                    for session in sorted(batch, key=lambda s: s.index):
                        kept.append(session)
                        if on_session(session):
                            return kept, finished, True
                    if not over:
                        taking[_future(actors[g].take.remote())] = g
            return kept, finished, False
        finally:
            for future in taking:  # a stopped or dead generator's last take is not needed
                future.cancel()

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
