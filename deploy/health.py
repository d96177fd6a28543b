"""Wait until a service answers its health URL."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable


class HealthTimeout(RuntimeError):
    """The service did not become healthy in time (or died while starting)."""


def wait_healthy(
    url: str,
    timeout_s: float,
    *,
    alive: Callable[[], bool] | None = None,
    interval_s: float = 0.1,
) -> float:
    """Poll ``url`` until it returns 200; returns the seconds waited.

    ``alive`` lets the caller fail fast when the process has already exited.
    """
    started = time.monotonic()
    last = "no answer"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=min(5.0, timeout_s)) as response:
                if response.status == 200:
                    return time.monotonic() - started
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        if alive is not None and not alive():
            raise HealthTimeout(f"{url}: the process exited while starting (last: {last})")
        if time.monotonic() - started > timeout_s:
            raise HealthTimeout(f"{url}: not healthy after {timeout_s:g}s (last: {last})")
        time.sleep(interval_s)
