"""A server that answers a redirect gets no connection made where it points (issue 26, item 2).

A real loopback server answers every request with 301, 302, 303, 307 or 308 and a Location on a
second loopback server, which answers every request as a healthy server would (200, Prometheus
text, JSON) and counts its connections. The load (``bisect stress --json``, through the real
console script: its model lookup, its ``/server_info`` and its sessions), the health wait, the
metrics scrape and the server facts all go against the first: the second must see no
connection, the sessions are ``error`` naming the redirect, health is not healthy with the
redirect as its last reason, a scrape is a gap.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from deploy.facts import ask_server
from deploy.health import HealthTimeout, wait_healthy
from experiments.collect import poll_metrics
from experiments.workload import report
from tests.support.tcp_servers import http_answer, serving

pytestmark = pytest.mark.real

BISECT = str(Path(sys.executable).parent / "bisect")
CODES = [301, 302, 303, 307, 308]
ENV = {**{k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
       "BISECT_TRIAGE": "builtin"}


def _healthy(path: str) -> bytes:
    """What the redirect's target answers: all a client that followed would want."""
    if path == "/metrics":
        kind, body = b"text/plain; version=0.0.4", b"sglang:num_running_reqs 3\n"
    else:
        kind, body = b"application/json", b'{"data":[{"id":"m"}],"version":"0.0.1"}'
    return (b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close"
            b"\r\n\r\n%s" % (kind, len(body), body))


@contextmanager
def redirecting(code: int) -> Iterator[tuple[str, str, list[str]]]:
    """(the redirecting server's URL, the target's, the target's requests so far)."""
    reached: list[str] = []
    with serving(http_answer(_healthy, reached)) as (host, port):
        target = f"http://{host}:{port}"

        def redirect(path: str) -> bytes:
            return (b"HTTP/1.1 %d Moved\r\nLocation: %s%s\r\nContent-Length: 0\r\n"
                    b"Connection: close\r\n\r\n" % (code, target.encode(), path.encode()))

        with serving(http_answer(redirect)) as (host, port):
            yield f"http://{host}:{port}", target, reached


@pytest.mark.parametrize("code", CODES)
def test_the_stress_workload_follows_no_redirect(code: int) -> None:
    with redirecting(code) as (url, target, reached):
        done = subprocess.run([BISECT, "stress", url, "--sessions", "2", "--rounds", "1",
                               "--timeout", "10", "--json"], capture_output=True, text=True,
                              timeout=120, env=ENV, check=False)
        assert reached == []
    assert "Traceback" not in done.stderr
    assert done.returncode == 1, done.stderr  # as any run whose every session errored
    result = json.loads(done.stdout)
    assert result["counts"]["error"] == 2 and result["judged"] == 0
    assert result["server_info"] is None  # not fetched from the target either
    [failure] = result["error_summary"]
    assert (f"HTTP {code} redirect to {target}/v1/chat/completions not followed"
            in failure["example"]), failure
    assert "bisect sends requests only to the URL given" in done.stderr


@pytest.mark.parametrize("code", CODES)
def test_health_metrics_and_server_facts_follow_no_redirect(code: int) -> None:
    with redirecting(code) as (url, target, reached):
        with pytest.raises(HealthTimeout) as waited:
            wait_healthy(f"{url}/health", 0.3, interval_s=0.1)
        assert f"(last: HTTP {code} redirect to {target}/health not followed)" in str(
            waited.value)

        stop = asyncio.Event()
        stop.set()  # one scrape
        assert asyncio.run(poll_metrics({"sglang": f"{url}/metrics"}, stop)) == []  # a gap

        assert ask_server(url) == (
            None, f"HTTP {code} redirect to {target}/get_server_info not followed")
        assert report.server_info(url, None) is None
        assert reached == []
