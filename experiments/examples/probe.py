#!/usr/bin/env python3
"""The probe of probe.yaml: your own reproduction, as `git bisect run` takes one.

It sends 24 tool-calling chat requests at once to $BISECT_ENDPOINT (the pool bisect deployed the
variant on) and exits 1 when any reply leaks markup into ``message.content`` or calls no tool,
0 when every reply is a clean tool call. Standard library only; bisect tells it the variant in
its environment (BISECT_VARIANT, BISECT_SEED, ...).
"""

from __future__ import annotations

import json
import os
import random
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

TOOLS = [{"type": "function", "function": {
    "name": "lookup_order", "description": "Look an order up by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                   "required": ["order_id"]}}}]


def ask(endpoint: str, session: str) -> str | None:
    """One request; None when its reply is a clean tool call, else what was wrong."""
    body = json.dumps({"model": "default", "tools": TOOLS, "messages": [
        {"role": "user", "content": f"Session {session}: where is order A-17? canary={session}"}],
    }).encode()
    request = urllib.request.Request(f"{endpoint}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        message = json.load(reply)["choices"][0]["message"]
    if "<" in (message.get("content") or ""):
        return f"markup in content: {message['content'][:80]!r}"
    if not message.get("tool_calls"):
        return "no tool call"
    return None


def main() -> int:
    endpoint = os.environ["BISECT_ENDPOINT"].rstrip("/")
    draw = random.Random(os.environ.get("BISECT_SEED", "0"))
    sessions = [f"{draw.getrandbits(48):012x}" for _ in range(24)]
    with ThreadPoolExecutor(len(sessions)) as pool:
        problems = [p for p in pool.map(lambda s: ask(endpoint, s), sessions) if p]
    print(f"{os.environ.get('BISECT_VARIANT', '?')}: {len(problems)} of {len(sessions)} bad")
    for problem in problems[:3]:
        print(" ", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
