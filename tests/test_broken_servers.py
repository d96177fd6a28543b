"""`bisect stress URL --json` against servers broken below the JSON (issue 26, item 5).

A real loopback server (tests/support/garbage_server.py, its ``RAW`` kinds) answers every
request but `/health` with one broken reply: a chat completion whose usage holds a NaN, a
status line that is not HTTP, 4,000 header lines, a 1 MiB header. Each once ended the run with
exit 1 and no JSON (``/server_info`` read through urllib raised, or its NaN broke the strict
JSON). Now every session is ``error``, its reason says what was broken, and the one JSON
document comes out; the exit code is a normal run's (1: no session could be judged). The same
heads answering a health wait or the server facts are a reason, never an exception.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from deploy.facts import ask_server
from deploy.health import HealthTimeout
from deploy.health import wait_healthy as health_wait
from tests.conftest import REPO, free_port, wait_healthy
from tests.support import garbage_server
from tests.support.tcp_servers import http_answer, serving

pytestmark = pytest.mark.real

BISECT = str(Path(sys.executable).parent / "bisect")
ENV = {**{k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
       "BISECT_TRIAGE": "builtin"}
REASONS = {
    "usage_nan": "broken reply (HTTP 200): the body is not valid JSON",
    "status_line_garbage": "malformed HTTP response",
    "header_flood": "the response head has over 1000 header lines",
    "huge_header": "the response head is over 65536 bytes",
}


@contextmanager
def broken(kind: str) -> Iterator[str]:
    """A garbage server of ``kind``; yields its URL."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.support.garbage_server", "--port", str(port)],
        cwd=REPO, env={**os.environ, garbage_server.ENV: kind},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, timeout_s=20)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.parametrize("kind", list(garbage_server.RAW))
def test_a_broken_server_is_counted_as_errors_in_a_whole_json_result(kind: str) -> None:
    with broken(kind) as url:
        done = subprocess.run([BISECT, "stress", url, "--sessions", "3", "--rounds", "1",
                               "--timeout", "10", "--json"], capture_output=True, text=True,
                              timeout=120, env=ENV, check=False)
    assert "Traceback" not in done.stderr
    assert done.returncode == 1, done.stderr[-2000:]
    assert "no session could be judged" in done.stderr
    result = json.loads(done.stdout)  # the whole document, strict JSON
    assert result["sessions"] == 3 and result["counts"]["error"] == 3, result["counts"]
    [failure] = result["error_summary"]
    assert failure["sessions"] == 3 and REASONS[kind] in failure["example"], failure
    if kind == "usage_nan":  # /server_info answered the same: kept, its NaN as null
        assert result["server_info"]["usage"] == {"prompt_tokens": None, "completion_tokens": 1}
    else:
        assert result["server_info"] is None


@pytest.mark.parametrize("kind", ["status_line_garbage", "header_flood", "huge_header"])
def test_a_head_that_is_not_http_is_not_healthy_and_no_server_facts(kind: str) -> None:
    """The same bytes as the answer to /health and /get_server_info: a reason, no exception."""
    with serving(http_answer(lambda _: garbage_server.RAW[kind])) as (host, port):
        url = f"http://{host}:{port}"
        with pytest.raises(HealthTimeout, match=r"\(last: not an HTTP answer: "):
            health_wait(f"{url}/health", 0.3, interval_s=0.1)
        answer, why = ask_server(url)
    assert answer is None and why
