"""A node's facts, as a report's provenance (and a sweep's) states them: its host name, GPU model
and driver, the server's version and build, the git commit of its source tree.

Read through the node's transport in ONE short command (a fixed script; the tree's path and the
section boundary travel as positional arguments, never inside its text, so no campaign value
reaches a shell unquoted), plus one ``GET /get_server_info`` of the node's server. Nothing here
raises: a fact that cannot be read is None, and why goes to ``problems``. A fact the node simply
does not have (no ``nvidia-smi``, no tree declared, a server that does not say) is None with no
problem.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deploy.direct_http import open_direct, status_reason
from deploy.proof import SECTIONS_SH, Section, new_boundary, parse_sections
from deploy.safe_words import word_error
from deploy.transports.base import Transport, TransportError

_SHOW = 200  # a value a server or a node says is cut to this many characters

# $1 the boundary, $2 (optional) the git tree. nvidia-smi hangs on a GPU fallen off the bus: it
# gets 10 s (``timeout``, where the node has it), so such a node still has its other facts.
_SCRIPT = SECTIONS_SH + r"""
B=$1; shift
_host() { hostname 2>/dev/null || uname -n; }
_t() { if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi; }
_s host _host
if command -v nvidia-smi >/dev/null 2>&1; then
  _s gpu _t 10 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
fi
if [ "$#" -gt 0 ]; then _s commit git -C "$1" rev-parse --verify HEAD; fi
"""
SERVER_INFO_PATH = "/get_server_info"


@dataclass(frozen=True)
class NodeFacts:
    host: str | None = None
    gpu: str | None = None  # e.g. "8 x NVIDIA H200"
    driver: str | None = None
    server_version: str | None = None
    server_build: str | None = None
    commit: str | None = None
    tree: str | None = None  # the git tree whose commit it is
    problems: tuple[str, ...] = ()

    def details(self) -> dict[str, Any]:
        """JSON-able: the trial step's ``details``."""
        return {"host": self.host, "gpu": self.gpu, "driver": self.driver,
                "server_version": self.server_version, "server_build": self.server_build,
                "commit": self.commit, "tree": self.tree, "problems": list(self.problems)}


def _cut(text: str) -> str:
    return text if len(text) <= _SHOW else text[: _SHOW - 1] + "…"


def _said(value: Any) -> str | None:
    """A fact as a server or a node says it: a non-empty string, cut; else None."""
    if not isinstance(value, str) or not value.strip():
        return None
    # no NUL nor lone surrogate reaches the store (PostgreSQL's JSON refuses both)
    return _cut(value.strip().replace("\0", "").encode(errors="replace").decode())


def _last_line(section: Section) -> str:
    lines = section.text.strip().splitlines()
    return _cut(lines[-1]) if lines else f"exit {section.rc}"


def gpus(csv: str) -> tuple[str | None, str | None]:
    """(model, driver) from ``nvidia-smi --query-gpu=name,driver_version --format=csv,noheader``:
    one line per GPU; several GPUs of one model are counted ("8 x NVIDIA H200")."""
    names: Counter[str] = Counter()
    drivers: list[str] = []
    for line in csv.splitlines():
        name, sep, driver = line.rpartition(",")
        if sep and name.strip():
            names[name.strip()] += 1
            if driver.strip() and driver.strip() not in drivers:
                drivers.append(driver.strip())
    if not names:
        return None, None
    model = " + ".join(name if count == 1 else f"{count} x {name}"
                       for name, count in names.items())
    return _cut(model), _cut(", ".join(drivers)) if drivers else None


def server_facts(answer: Any) -> tuple[str | None, str | None]:
    """(version, build) from a ``/get_server_info`` answer. SGLang says ``version`` (no build);
    a server that says ``build`` has it read. A router that answers its workers' infos (the
    twin's prefill/decode router) gives its first worker's that says either."""
    if not isinstance(answer, dict):
        return None, None
    version, build = _said(answer.get("version")), _said(answer.get("build"))
    if version is None and build is None:
        for role in ("prefill", "decode"):
            workers = answer.get(role)
            for worker in workers if isinstance(workers, list) else ():
                version, build = server_facts(worker)
                if version is not None or build is not None:
                    return version, build
    return version, build


def ask_server(base_url: str, api_key: str | None = None,
               timeout_s: float = 5.0) -> tuple[Any, str | None]:
    """``GET BASE/get_server_info``: (the JSON answer, None), or (None, why not); a server
    without it (404) answers (None, None): it does not say."""
    request = urllib.request.Request(base_url.rstrip("/") + SERVER_INFO_PATH)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with open_direct(request, timeout_s) as response:  # as the load goes
            return json.loads(response.read(1 << 22)), None
    except urllib.error.HTTPError as exc:
        exc.close()
        return None, None if exc.code == 404 else status_reason(exc)
    except (OSError, ValueError, RecursionError,  # refused, timed out, junk, too deep
            http.client.HTTPException) as exc:
        return None, _cut(str(getattr(exc, "reason", exc)) or type(exc).__name__)


def _on_node(transport: Transport, tree: str | None,
             timeout_s: float) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    if tree is not None and (error := word_error(tree)):  # the node's other facts still come
        problems.append(f"cannot read the commit of git tree: {error}")
        tree = None
    boundary = new_boundary()
    argv = ["sh", "-c", _SCRIPT, "sh", boundary,
            *([tree] if tree is not None else [])]
    try:
        result = transport.run(argv, timeout_s=timeout_s)
    except (TransportError, ValueError) as exc:  # unreachable, or a value it cannot send
        return {}, [*problems, f"cannot ask {transport.node}: {_cut(str(exc))}"]
    sections = parse_sections(result.stdout, boundary)
    facts: dict[str, Any] = {}
    host = sections.get("host")
    if host is not None and host.rc == 0 and _said(host.text):
        facts["host"] = _said(host.text)
    else:
        why = _last_line(host) if host else _cut(result.stderr.strip()) or "no answer"
        problems.append(f"cannot read the host name: {why}")
    if (gpu := sections.get("gpu")) is not None:  # absent: the node has no nvidia-smi
        facts["gpu"], facts["driver"] = gpus(gpu.text) if gpu.rc == 0 else (None, None)
        if facts["gpu"] is None:
            problems.append(f"nvidia-smi failed: {_last_line(gpu)}")
    if tree is not None:
        commit = sections.get("commit")
        sha = commit.text.strip() if commit is not None and commit.rc == 0 else ""
        if len(sha) >= 40 and all(c in "0123456789abcdef" for c in sha):
            facts["commit"] = sha
        else:
            why = _last_line(commit) if commit is not None else "no answer"
            problems.append(f"cannot read the commit of git tree {_cut(tree)!r}: {why}")
    return facts, problems


def node_facts(transport: Transport, *, tree: str | None = None, servers: Sequence[str] = (),
               api_key: str | None = None, timeout_s: float = 30.0) -> NodeFacts:
    """The node's facts: ``tree``, its git source tree (None: it has none declared);
    ``servers``, the base URLs of the servers it runs, asked in order until one answers."""
    facts, problems = _on_node(transport, tree, timeout_s)
    version = build = None
    for base in servers:
        answer, why = ask_server(base, api_key, min(timeout_s, 5.0))
        if why is not None:
            problems.append(f"{_cut(base)}{SERVER_INFO_PATH}: {why}")
        if answer is not None:
            version, build = server_facts(answer)
            break
    return NodeFacts(host=facts.get("host"), gpu=facts.get("gpu"), driver=facts.get("driver"),
                     server_version=version, server_build=build, commit=facts.get("commit"),
                     tree=tree if tree is None or word_error(tree) is None else None,
                     problems=tuple(problems))
