"""The real console script for the CLI tests that run ``bisect`` as a user does: its path, a
clean environment, a run of it, and an ``AgentServer`` served from a thread for it to talk to."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.agent_server import AgentServer, serve

BISECT = str(Path(sys.executable).parent / "bisect")
# bisect must not pick up a key from the environment the tests run in
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
# No leak to triage in these runs: the built-in parser spares each run importing SGLang's
# detectors (a few tenths of a second, without torch) before its sessions start
# (test_stress_cli.py's Popen runs keep the default).
QUICK_ENV = {**CLEAN_ENV, "BISECT_TRIAGE": "builtin"}


def bisect(*args: str, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BISECT, *args], capture_output=True, text=True, timeout=timeout,
                          env={**QUICK_ENV, **(env or {})}, check=False)


@contextmanager
def served(server: AgentServer) -> Iterator[str]:
    """``server`` on a free port, in a thread with its own loop: for a bisect subprocess."""
    loop = asyncio.new_event_loop()
    urls: list[str] = []
    ready = threading.Event()
    stop: asyncio.Future[None] = loop.create_future()

    async def main() -> None:
        async with serve(server) as url:
            urls.append(url)
            ready.set()
            await stop

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield urls[0]
    finally:
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(10)
        loop.close()
