"""The twin's fault model without HTTP: what a trial of a variant would return, session by session.

A campaign over real twins costs seconds per trial; a benchmark of strategies needs thousands of
trials. This draws every session's outcome from the same fault model with the same stable draws
(`faults.draw` of the session key), so a trial simulated here and one run over HTTP against a
twin agree session for session whenever the concurrency condition held (tests/test_simulate.py).
Per-request rules are drawn round by round, as the twin draws each request: a session ends at its
first hit round, as the workload ends it at its first non-OK turn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from experiments.outcomes import Outcome
from experiments.twin.args import apply_role, build_parser, flag_values, fork_flags
from experiments.twin.conditions import FileFacts, RoleView
from experiments.twin.faults import Effect, FaultModel, decide, per_request

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
    """A combined twin started with ``flags`` and ``env``, as its fault rules see it (the fork
    flags ``env`` declares included)."""
    parser = build_parser(fork_flags(env))
    ns = parser.parse_args(["--port", "0", *flags])
    apply_role(ns)
    return RoleView(flag_values(parser, ns), dict(env))


@dataclass(frozen=True)
class Session:
    outcome: Outcome
    first_bad_turn: int | None  # the round of the first hit, as the workload reports it


def session_results(model: FaultModel, view: RoleView, *, sessions: int, seed: int,
                    rounds: int = 1, twin_seed: int = 0, inflight: int | None = None,
                    files: Mapping[str, FileFacts] | None = None,
                    rate_scale: float = 1.0) -> list[Session]:
    """Each session keyed as the workload keys sessions (``s{seed}-{index}``), over ``rounds``
    rounds. Without per-request rules every round draws the same, so one round decides.
    ``rate_scale``: the multiplier of every rate a twin's start drew (variation.py)."""
    played = rounds if per_request(model) else 1
    results = []
    for index in range(sessions):
        result = Session(Outcome.OK, None)
        for round_ in range(1, played + 1):
            decision = decide(
                model, twin_seed=twin_seed, flags=view.flags, env=view.env,
                inflight=sessions if inflight is None else inflight,
                session_key=f"s{seed}-{index}", roles={"prefill": view, "decode": view},
                request=round_, files=files, rate_scale=rate_scale,
            )
            if decision is not None:
                result = Session(OUTCOME_OF[decision.effect], round_)
                break
        results.append(result)
    return results


def session_outcomes(model: FaultModel, view: RoleView, *, sessions: int, seed: int,
                     rounds: int = 1, twin_seed: int = 0, inflight: int | None = None,
                     files: Mapping[str, FileFacts] | None = None,
                     rate_scale: float = 1.0) -> list[Outcome]:
    """Each session's outcome (see ``session_results``)."""
    return [s.outcome for s in session_results(
        model, view, sessions=sessions, seed=seed, rounds=rounds, twin_seed=twin_seed,
        inflight=inflight, files=files, rate_scale=rate_scale)]


def trial_counts(model: FaultModel, view: RoleView, *, sessions: int, seed: int,
                 rounds: int = 1) -> dict[str, int]:
    return dict(Counter(o.value for o in session_outcomes(model, view, sessions=sessions,
                                                          seed=seed, rounds=rounds)))
