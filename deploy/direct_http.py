"""GETs from a campaign's servers (health, server facts, ``/server_info``) as the load goes:
straight to the URL given. No proxy from the environment, no redirect followed: a 3xx is the
server's answer, named in the reason, never a second connection to where it points (README,
"Where bisect sends traffic"). The load client (``experiments/workload/http_client.py``)
follows no redirect either and names one with ``redirect_reason``.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from typing import IO

LOCATION_SHOWN = 200  # characters of a Location header in a reason: it is the server's text


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handler, refusing: urllib then raises the 3xx as an ``HTTPError``."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: http.client.HTTPMessage, newurl: str) -> None:
        return None


def open_direct(request: urllib.request.Request | str,
                timeout_s: float) -> http.client.HTTPResponse:
    """``urlopen`` without the environment's proxies and without following redirects."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    response: http.client.HTTPResponse = opener.open(request, timeout=timeout_s)
    return response


def is_redirect(status: int) -> bool:
    """A 3xx that points elsewhere (304 Not Modified points nowhere)."""
    return 300 <= status < 400 and status != 304


def redirect_reason(status: int, location: str | None) -> str:
    """The sentence of a 3xx answer that was not followed."""
    if not location:
        return f"HTTP {status} redirect (no Location) not followed"
    shown = "".join(c if c.isprintable() else "?" for c in location[:LOCATION_SHOWN + 1])
    if len(shown) > LOCATION_SHOWN:
        shown = shown[:LOCATION_SHOWN - 1] + "…"
    return f"HTTP {status} redirect to {shown} not followed"


def status_reason(exc: urllib.error.HTTPError) -> str:
    """``HTTP 503``, or the redirect sentence of a 3xx (its Location named)."""
    if is_redirect(exc.code):
        return redirect_reason(exc.code, exc.headers.get("Location"))
    return f"HTTP {exc.code}"
