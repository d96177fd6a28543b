"""Wait until a service answers its health URL (directly: no proxy, no redirect followed)."""

from __future__ import annotations

import http.client
import time
import urllib.error
from collections.abc import Callable

from deploy.direct_http import open_direct, status_reason


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

    ``alive`` lets the caller fail fast when the process has already exited. A 3xx is not
    healthy (the reason names where it pointed); a reply that is not HTTP is not either.
    """
    started = time.monotonic()
    last = "no answer"
    while True:
        try:
            with open_direct(url, min(5.0, timeout_s)) as response:
                if response.status == 200:
                    return time.monotonic() - started
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            last = status_reason(exc)
            exc.close()
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        except http.client.HTTPException as exc:  # a garbage status line, a header flood
            last = f"not an HTTP answer: {type(exc).__name__}: {str(exc)[:200]}"
        if alive is not None and not alive():
            raise HealthTimeout(f"{url}: the process exited while starting (last: {last})")
        if time.monotonic() - started > timeout_s:
            raise HealthTimeout(f"{url}: not healthy after {timeout_s:g}s (last: {last})")
        time.sleep(interval_s)
