"""Helpers of the twin tests: real twin processes, PD pools, metrics, SSE.

Processes start in parallel and are waited for together: a twin costs ~0.6 s of CPU to start,
and a PD pool is three of them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from experiments import agent
from experiments.markup import find_markup
from experiments.twin.pool import (
    PDPorts,
    decode_argv,
    free_port,
    prefill_argv,
    router_argv,
    twin_argv,
)

REPO = Path(__file__).resolve().parents[2]


def race_faults(seed: int) -> dict[str, Any]:
    """The seed investigation's race as a twin fault model: bf16 index keys with HiCache leak
    DSML markup in half the replies, with any load."""
    return {"seed": seed, "rules": [{
        "name": "race",
        "when": {"env": {"BF16_INDEX_K": "1"}, "flags": {"enable-hierarchical-cache": True}},
        "min_inflight": 1,
        "probability": 0.5,
        "effect": "leak",
        "markup": "dsml",
    }]}

# No per-token cost: for tests that count outcomes, not time.
FAST = ("--twin-latency-ms", "1", "--twin-prefill-us-per-token", "0",
        "--twin-decode-ms-per-token", "0")


@contextmanager
def builtin_triage() -> Iterator[None]:
    """Judge leaks with the workload's built-in parser: these tests judge the twin, not the
    triage, and importing SGLang's detectors costs seconds (experiments/workload/triage.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BISECT_TRIAGE", "builtin")
        yield


def is_leak(answer: dict[str, Any]) -> bool:
    """Markup in the text and no structured call: what the parser returns when it fails."""
    message = answer["choices"][0]["message"]
    return find_markup(message.get("content")) is not None and not message.get("tool_calls")


def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post_chat(url: str, payload: dict[str, Any] | bytes, timeout: float = 10.0
              ) -> tuple[int, Any]:
    """POST to the chat route: a payload as JSON, or raw bytes as they are (a malformed body)."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_healthy(urls: Sequence[str], procs: Sequence[subprocess.Popen[bytes]] = (),
                 timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    pending = list(urls)
    while pending and time.monotonic() < deadline:
        dead = [p.args for p in procs if p.poll() is not None]
        assert not dead, f"exited while starting: {dead}"
        try:
            if get(f"{pending[0]}/health", timeout=2)[0] == 200:
                pending.pop(0)
                continue
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.03)
    assert not pending, f"not healthy after {timeout_s}s: {pending}"


@dataclass
class Procs:
    """Processes a test owns, each logging to ``tmp/NAME.log``; all stopped at the end."""

    tmp: Path
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, argv: Sequence[str],
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                    env={**os.environ, **(env or {})})
        self.running[name] = proc
        return proc

    def stop(self, *names: str) -> None:
        """SIGTERM to all of them first, then wait for each (a twin stops in ~0.1 s)."""
        procs = [self.running.pop(name) for name in names]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()

    def close(self) -> None:
        self.stop(*self.running)


@contextmanager
def processes(tmp: Path) -> Iterator[Procs]:
    procs = Procs(tmp)
    try:
        yield procs
    finally:
        procs.close()


def start_twins(procs: Procs, *specs: tuple[str, Sequence[str], dict[str, str] | None]) -> \
        list[str]:
    """Combined twins ``(name, args, env)`` started at once; their URLs once all are healthy."""
    urls, started = [], []
    for name, args, env in specs:
        port = free_port()
        started.append(procs.start(name, [*twin_argv(port), "--twin-startup-delay", "0", *args],
                                   env))
        urls.append(f"http://127.0.0.1:{port}")
    wait_healthy(urls, started)
    return urls


@dataclass
class PDPool:
    procs: Procs
    ports: PDPorts
    prefill_args: Sequence[str]

    @property
    def router(self) -> str:
        return self.ports.url(self.ports.router)

    @property
    def prefill(self) -> str:
        return self.ports.url(self.ports.prefill)

    @property
    def decode(self) -> str:
        return self.ports.url(self.ports.decode)

    def start_prefill(self, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self.procs.start("prefill", prefill_argv(self.ports, "--twin-startup-delay", "0",
                                                        *self.prefill_args), env)

    def restart_prefill(self, env: dict[str, str] | None = None) -> None:
        """Same ports, new process (new start id, flags and env)."""
        if "prefill" in self.procs.running:
            self.procs.stop("prefill")
        proc = self.start_prefill(env)
        wait_healthy([self.prefill, self.router], [proc])


def start_pd_pool(procs: Procs, *, prefill_args: Sequence[str] = (),
                  decode_args: Sequence[str] = (), prefill_env: dict[str, str] | None = None,
                  decode_env: dict[str, str] | None = None) -> PDPool:
    pool = PDPool(procs, PDPorts.free(), prefill_args)
    started = [
        pool.start_prefill(prefill_env),
        procs.start("decode", decode_argv(pool.ports, "--twin-startup-delay", "0",
                                          *decode_args), decode_env),
        procs.start("router", router_argv(pool.ports)),
    ]
    wait_healthy([pool.prefill, pool.decode, pool.router], started)
    return pool


def metric(url: str, name: str) -> float:
    """The value of one sample (summed over label sets) of ``url``'s /metrics."""
    text = get(f"{url}/metrics")[1].decode()
    values = [sample.value for family in text_string_to_metric_families(text)
              for sample in family.samples if sample.name == name]
    assert values, f"{name} not in {url}/metrics"
    return float(sum(values))


def opening(key: str, canary: str = "CANARY0001", filler: str = "") -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": agent.SYSTEM_PROMPT},
        {"role": "user", "content": filler + agent.first_user_message(key, canary)},
    ]


def body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": messages, "tools": agent.TOOLS, **extra}


async def fold_stream(http: aiohttp.ClientSession, url: str,
                      payload: dict[str, Any]) -> dict[str, Any]:
    """A streamed completion folded back into a non-streaming ``chat.completion`` body."""
    content, finish = "", None
    calls: dict[int, dict[str, Any]] = {}
    async with http.post(f"{url}/v1/chat/completions", json={**payload, "stream": True}) as r:
        assert r.status == 200, await r.text()
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk["choices"]:
                delta = choice["delta"]
                content += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    slot = calls.setdefault(call["index"], {"id": "", "type": "function",
                                                            "function": {"name": "",
                                                                         "arguments": ""}})
                    slot["id"] = call.get("id") or slot["id"]
                    function = call.get("function") or {}
                    slot["function"]["name"] += function.get("name") or ""
                    slot["function"]["arguments"] += function.get("arguments") or ""
                finish = choice.get("finish_reason") or finish
    message = {"role": "assistant", "content": content or None,
               "tool_calls": [calls[i] for i in sorted(calls)] or None}
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}
