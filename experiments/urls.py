"""The URLs a campaign names: http or https to a named host, nothing else.

The load client, the health waits and the metrics scrapes speak HTTP only, and send traffic only
where the file says: a ``file://`` health URL would wait out the start-up timeout, a
``gopher://`` endpoint would be spoken to as http, a bare ``host:port`` has no scheme at all.
Each is refused when the file is read (``bisect validate``), not found out by a run.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from experiments.campaign import Campaign

_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNPRINTABLE = re.compile(r"[\x00-\x20\x7f]")  # whitespace and control bytes: never in a URL


def url_error(url: str) -> str | None:
    """Why ``url`` is not an http(s) URL bisect can send a request to, or None."""
    if _UNPRINTABLE.search(url):
        return "a URL cannot hold spaces or control characters"
    parts = urlsplit(url)
    if parts.scheme.lower() not in _DEFAULT_PORTS or not url.lower().startswith(
            f"{parts.scheme.lower()}://"):
        return (f"{url!r} is not an http:// or https:// URL (bisect speaks HTTP to the "
                f"servers; write the scheme, e.g. http://{parts.netloc or url}/)")
    if not parts.hostname:
        return f"{url!r} names no host"
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when asked
    except ValueError:
        return f"{url!r} has no valid port (1-65535)"
    return None


def origin(url: str) -> str:
    """scheme://host:port, the default port written out: where a request to ``url`` goes."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    host = parts.hostname or ""
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def same_server(a: str, b: str) -> bool:
    """True when two endpoints reach the same server path (case of the host, the default port
    and a trailing slash aside)."""
    return (origin(a), urlsplit(a).path.rstrip("/")) == (origin(b), urlsplit(b).path.rstrip("/"))


def contacts(campaign: Campaign) -> list[str]:
    """Every place a run of ``campaign`` sends traffic to, one line each with what goes there:
    its SSH nodes and the origins of its HTTP URLs (a Ray cluster's address is the run's
    option, not the file's)."""
    lines = []
    for node in campaign.nodes:
        if node.transport == "ssh":
            where = (f"{node.host}:{node.port}" if node.port
                     else f"{node.host} (the ssh config's port, else 22)")
            lines.append(f"ssh {where}: node {node.name}")
    uses: dict[str, list[str]] = {}
    for pool in campaign.pools:
        uses.setdefault(origin(pool.endpoint), []).append(f"pool {pool.name} endpoint")
        for service in pool.services:
            for what, url in (("health", service.health_url),
                              ("health_generate", service.health_generate_url),
                              ("metrics", service.metrics_url)):
                if url is not None:
                    uses.setdefault(origin(url), []).append(f"{service.name} {what}")
    lines += [f"{where}: {', '.join(used)}" for where, used in uses.items()]
    return lines
