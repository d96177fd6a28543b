"""Floods against the stress client: does a request's timeout hold, does memory stay bounded?

Each scenario is a server on 127.0.0.1 (its own process, so its CPU is not the client's) that
answers every chat request with one kind of flood: a head trickled a byte at a time, a stream
trickled forever, SSE events as fast as the socket takes them and never ``[DONE]``, one endless
SSE line, an endless Content-Length body, a body read to EOF that never ends. The client (a fresh
process per scenario, so its peak RSS is its own) runs ``run_stress`` as a trial does (uvloop,
frozen GC): ``--concurrency`` sessions of one turn at once, ``--timeout`` seconds per request,
and reports per scenario the outcomes, the slowest request's wall time against the timeout, and
the client's peak RSS growth.

    .venv/bin/python -m bench.flood [--timeout 1] [--concurrency 100] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import subprocess
import sys
from collections import Counter
from typing import Any

from tests.support.scripted_http import ScriptedServer, flood, head

SSE_START = head(content_type="text/event-stream") + b"Transfer-Encoding: chunked\r\n\r\n"
EVENT = (b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 200 + b'"}}]}\n\n')
SCENARIOS: dict[str, Any] = {
    # status line, then one header byte every 10 ms: the head never ends
    "trickle-head": lambda: flood(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a", gap_s=0.01),
    # a valid stream, one event every 10 ms, never [DONE]
    "trickle-stream": lambda: flood(SSE_START, EVENT, gap_s=0.01),
    # valid events as fast as the socket takes them, never [DONE]
    "sse-flood": lambda: flood(SSE_START, EVENT * 300),
    # one SSE line that never ends
    "line-flood": lambda: flood(SSE_START + b"6\r\ndata: \r\n", b"a" * 65536),
    # a JSON body that claims a terabyte
    "length-flood": lambda: flood(head() + b"Content-Length: 1000000000000\r\n\r\n{",
                                  b" " * 65536),
    # a whole body of 400 MB, sent fast: it ends, and then it must be decoded
    "big-body": lambda: flood(
        head() + b"Content-Length: %d\r\n\r\n" % (400 * 2**20 + 2) + b'{"', b"a" * 2**20,
        total=400 * 2**20 - 2**20),
    # a body read to EOF that never ends
    "eof-flood": lambda: flood(head() + b"\r\n{", b" " * 65536),
}


PLAIN = {"length-flood", "big-body", "eof-flood"}  # JSON floods: the request asks no stream


def _serve(name: str, port_out: Any) -> None:
    async def main() -> None:
        server = ScriptedServer(SCENARIOS[name]())
        async with server.serve() as url:
            port_out.send(url)
            await asyncio.Event().wait()

    asyncio.run(main())


def _client(url: str, timeout_s: float, concurrency: int, stream: bool,
            cold: bool) -> dict[str, Any]:
    """The product's path: ``run_stress`` (uvloop, frozen GC) with one turn per session.
    Unless ``cold``, the leak triage's import (seconds, in a thread beside the first requests of
    a process's first run) is done before, so that only the flood is measured."""
    from experiments.workload import triage
    from experiments.workload.spec import WorkloadSpec
    from experiments.workload.stress import run_stress_sync

    if not cold:
        triage.warm_up()

    spec = WorkloadSpec(sessions=concurrency, rounds=1, timeout_s=timeout_s, stream=stream,
                        model="flood")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_stress_sync(url, spec)
    slowest = max(request.e2e_s for request in result.requests())
    return {
        "outcomes": dict(Counter(session.outcome.value for session in result.sessions)),
        "slowest_s": round(slowest, 3),
        "overrun_pct": round(100 * (slowest - timeout_s) / timeout_s, 1),
        "peak_rss_growth_mib": round(
            (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, 1),
        "evidence": (result.sessions[0].evidence or "")[:120],
    }


def run_one(name: str, timeout_s: float, concurrency: int, cold: bool) -> dict[str, Any]:
    """One scenario: its server in a child process, the client here."""
    receive, send = multiprocessing.Pipe(duplex=False)
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(name, send),
                                                          daemon=True)
    server.start()
    try:
        url = receive.recv()
        return _client(url, timeout_s, concurrency, name not in PLAIN, cold)
    finally:
        server.kill()
        server.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=1.0, help="per-request timeout, s")
    parser.add_argument("--concurrency", type=int, default=100, help="requests at once")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--cold", action="store_true",
                        help="let the triage's import overlap the flood, as in a first run")
    parser.add_argument("--one", choices=sorted(SCENARIOS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: one scenario, its figures as JSON
        print(json.dumps(run_one(args.one, args.timeout, args.concurrency, args.cold)))
        return
    rows = {}
    for name in SCENARIOS:
        child = subprocess.run(
            [sys.executable, "-m", "bench.flood", "--one", name, "--timeout", str(args.timeout),
             "--concurrency", str(args.concurrency), *(["--cold"] if args.cold else [])],
            capture_output=True, text=True, check=True)
        rows[name] = json.loads(child.stdout)
        if not args.json:
            row = rows[name]
            print(f"{name:15} {row['outcomes']}  slowest {row['slowest_s']:.2f} s "
                  f"(+{row['overrun_pct']}%)  peak RSS +{row['peak_rss_growth_mib']} MiB  "
                  f"| {row['evidence']}", flush=True)
    if args.json:
        print(json.dumps({"timeout_s": args.timeout, "concurrency": args.concurrency,
                          "cold": args.cold, "scenarios": rows}, indent=2))


if __name__ == "__main__":
    main()
