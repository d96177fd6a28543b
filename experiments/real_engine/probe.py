"""A probe (``workload: command``) for a real engine serving random weights: is every forced
tool call handed back as a structured call?

Random weights cannot keep the stress workload's canary, so its sessions are corrupt whatever
the engine does. What still separates a sound engine from a broken one: with ``tool_choice:
required`` the engine's grammar forces a hermes ``<tool_call>`` block, and its tool parser must
turn that block into ``tool_calls``. This sends REQUESTS such requests (IN_FLIGHT at once) to
``$BISECT_ENDPOINT`` and exits 1 when any reply hands back a well-formed call as content (every
``<tool_call>`` block closed and holding a JSON object with a name: the parser's fault), 0
otherwise. A block the model left unclosed or broken (random weights run out of
``max_tokens`` inside one) is the model's doing, not the parser's, and does not count. An HTTP
error or a broken reply exits 128, which bisect counts as an error of the run (retried), never
as "bad". Standard library and experiments.agent only.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from experiments.agent import SYSTEM_PROMPT, TOOLS, first_user_message, new_canary

REQUESTS = 16
IN_FLIGHT = 8
ERROR = 128  # bisect's probe contract: 128 and above is an error of the run


def ask(endpoint: str, key: str, canary: str) -> dict[str, Any]:
    body = json.dumps({
        "model": "tiny", "tools": TOOLS, "tool_choice": "required", "max_tokens": 256,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                     {"role": "user", "content": first_user_message(key, canary)}],
    }).encode()
    request = urllib.request.Request(f"{endpoint}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        message: dict[str, Any] = json.load(reply)["choices"][0]["message"]
    return message


BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def well_formed(content: str) -> bool:
    """Content that is nothing but closed ``<tool_call>`` blocks of JSON objects with a name."""
    blocks = BLOCK.findall(content)
    if not blocks or BLOCK.sub("", content).strip():
        return False
    try:
        calls = [json.loads(block) for block in blocks]
    except ValueError:
        return False
    return all(isinstance(call, dict) and isinstance(call.get("name"), str) for call in calls)


def main() -> int:
    endpoint = os.environ["BISECT_ENDPOINT"].rstrip("/")
    seed = os.environ.get("BISECT_SEED", "0")
    draw = random.Random(f"{seed}:{os.environ.get('BISECT_RUN', '0')}")
    asks = [(f"p{seed}-{n}", new_canary(draw)) for n in range(REQUESTS)]
    try:
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            replies = list(pool.map(lambda a: ask(endpoint, *a), asks))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        print(f"no verdict: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ERROR
    leaks = [m["content"] for m in replies if well_formed(m.get("content") or "")]
    calls = sum(bool(m.get("tool_calls")) for m in replies)
    print(f"{os.environ.get('BISECT_VARIANT', '?')}: {len(leaks)} of {REQUESTS} replies with a "
          f"well-formed call in content, {calls} with tool_calls")
    for leak in leaks[:2]:
        print("  ", leak[:160].replace("\n", " "))
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
