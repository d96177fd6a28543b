"""Session outcomes (DESIGN.md contract 3) and how they group."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    OK = "ok"
    LEAK = "leak"  # tool-call markup in content instead of structured tool_calls
    NO_TOOL = "no_tool"  # a call was required and none came
    LOST_PLOT = "lost_plot"  # a well-formed call carrying the wrong canary: context corruption
    BAD_ARGS = "bad_args"  # arguments not valid JSON or not matching the tool schema
    ERROR = "error"  # HTTP error, disconnect, a broken reply (workload/reply.py), over the cap
    TIMEOUT = "timeout"
    # The user's own probe (workload/probe.py) exited 1-127 (not 125): bad, as `git bisect run`
    # reads it. Counted with corruption: a probe's trial has no other way to fail.
    PROBE_FAILED = "probe_failed"


CORRUPTION: frozenset[Outcome] = frozenset(
    {Outcome.LEAK, Outcome.NO_TOOL, Outcome.LOST_PLOT, Outcome.BAD_ARGS, Outcome.PROBE_FAILED}
)
# What a session of the stress workload can end as: what `bisect stress` counts and shows.
STRESS_OUTCOMES: tuple[Outcome, ...] = tuple(o for o in Outcome if o is not Outcome.PROBE_FAILED)
# Infrastructure or wedge evidence: never counted as corrupt, never as clean.
INFRA: frozenset[Outcome] = frozenset({Outcome.ERROR, Outcome.TIMEOUT})
# Kinds of service log events (experiments.collect) that tell of a server hanging or dropping
# requests — the investigation's wedged variant logged 168 aborts: reported per variant beside
# the sessions' errors and timeouts.
WEDGE_LOG_KINDS: tuple[str, ...] = ("wedge", "abort", "transfer_timeout", "error")


def is_corrupt(outcome: str) -> bool:
    return Outcome(outcome) in CORRUPTION


def is_infra(outcome: str) -> bool:
    return Outcome(outcome) in INFRA
