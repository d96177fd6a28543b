"""The twin's fault model without HTTP: what a trial of a variant would return, session by session.

A campaign over real twins costs seconds per trial; a benchmark of strategies needs thousands of
trials. This draws every session's outcome from the same fault model with the same stable draws
(`faults.draw` of the session key), so a trial simulated here and one run over HTTP against a
twin agree session for session whenever the concurrency condition held (tests/test_simulate.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from experiments.outcomes import Outcome
from experiments.twin.args import build_parser, flag_values
from experiments.twin.cli import _apply_role
from experiments.twin.conditions import RoleView
from experiments.twin.faults import Effect, FaultModel, decide

# What the workload's classifier makes of each effect the twin produces.
OUTCOME_OF: dict[Effect, Outcome] = {
    Effect.LEAK: Outcome.LEAK,
    Effect.NO_TOOL: Outcome.NO_TOOL,
    Effect.LOST_PLOT: Outcome.LOST_PLOT,
    Effect.BAD_ARGS: Outcome.BAD_ARGS,
    Effect.ERROR: Outcome.ERROR,
    Effect.WEDGE: Outcome.TIMEOUT,
}


def server_view(flags: Sequence[str], env: Mapping[str, str]) -> RoleView:
    """A combined twin started with ``flags`` and ``env``, as its fault rules see it."""
    parser = build_parser()
    ns = parser.parse_args(["--port", "0", *flags])
    _apply_role(ns)
    return RoleView(flag_values(parser, ns), dict(env))


def session_outcomes(model: FaultModel, view: RoleView, *, sessions: int, seed: int,
                     twin_seed: int = 0, inflight: int | None = None) -> list[Outcome]:
    """Each session's outcome, keyed as the workload keys sessions (``s{seed}-{index}``)."""
    outcomes = []
    for index in range(sessions):
        decision = decide(
            model, twin_seed=twin_seed, flags=view.flags, env=view.env,
            inflight=sessions if inflight is None else inflight,
            session_key=f"s{seed}-{index}", roles={"prefill": view, "decode": view},
        )
        outcomes.append(Outcome.OK if decision is None else OUTCOME_OF[decision.effect])
    return outcomes


def trial_counts(model: FaultModel, view: RoleView, *, sessions: int, seed: int) -> dict[str, int]:
    return dict(Counter(o.value for o in session_outcomes(model, view, sessions=sessions,
                                                          seed=seed)))
