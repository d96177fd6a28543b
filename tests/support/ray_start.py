"""The start of the test run's local Ray (conftest's ``ray_cluster``), tried again when Ray's
own start-up limit runs out on a loaded machine."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

TRIES = 3
Started = TypeVar("Started")


def started(cluster_type: Callable[..., Started], head: dict[str, object]) -> Started:
    """A one-node cluster. Ray gives a node 30 s to register (a constant in ray/_private/
    node.py), which a loaded 2-core machine can miss while another worker or test starts a Ray
    of its own: then once more, the processes of the try that timed out stopped at exit by Ray.
    Any other failure, or the last try's, is raised as it came."""
    for attempt in range(1, TRIES + 1):
        try:
            return cluster_type(initialize_head=True, head_node_args=head)
        except Exception as exc:  # Ray raises a bare Exception for its start-up timeout
            if "timed out during startup" not in str(exc) or attempt == TRIES:
                raise
            print(f"\nthe test run's Ray did not start (try {attempt}): {exc}", file=sys.stderr)
    raise AssertionError("unreachable")
