"""Planted `optimize` evidence for the pure tests of the answer against production: clean
trials of a few configurations of bench/knob_space.py with given output throughputs, in the
order a run measured them, and the strategy's conclusion on them (no driver, no Optuna)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.knob_space import PRODUCTION, knob_campaign
from experiments.optimize_config import OptimizeConfig
from orchestrator.core.evidence import Performance, TrialEvidence
from orchestrator.core.strategies.base import Conclusion
from orchestrator.core.strategies.optimize import Optimize

ELSE = {**PRODUCTION, "max_running": "96"}  # another configuration of the knob space
CONFIGS = {"production": PRODUCTION, "else": ELSE,
           **{f"m{n}": {**PRODUCTION, "max_running": str(n)} for n in (64, 80)}}
BUDGET = 10  # trials: the search's budget where a test gives none
# what ``concluded`` sets: 2 trials confirm an answer, and the final phase runs 2 pairs
PLANTED = {"max_corruption": 0.05, "max_wedging": 0.05, "confirm_trials": 2, "trials": BUDGET}


def trial(name: str, figure: float, seq: int, sessions: int = 100,
          corrupt: int = 0, pool: str = "") -> TrialEvidence:
    speed = Performance(wall_s=60, requests=sessions, completed=sessions,
                        output_tokens=int(figure * 60), good_sessions=sessions - corrupt,
                        request_throughput=sessions / 60, output_throughput=figure,
                        goodput=(sessions - corrupt) / 60)
    counts = {"ok": sessions - corrupt, **({"leak": corrupt} if corrupt else {})}
    return TrialEvidence(dict(CONFIGS[name]), counts, performance=speed, seq=seq, pool=pool)


def planted(values: Mapping[str, Sequence[float]], final: Sequence[tuple[str, float]] = (),
            sessions: int = 100, corrupt: Mapping[str, int] | None = None) -> list[TrialEvidence]:
    """Clean trials of each configuration (a key of ``CONFIGS``) with these output
    throughputs, production's first, as the run measured them; then ``final``'s, in its order
    (the final phase's, where the search's budget is the trials before it). ``corrupt``:
    leaking sessions in each trial of a configuration."""
    done: list[TrialEvidence] = []
    for name, figures in values.items():
        for figure in figures:
            done.append(trial(name, figure, len(done) + 1, sessions,
                              (corrupt or {}).get(name, 0)))
    for name, figure in final:
        done.append(trial(name, figure, len(done) + 1, sessions))
    return done


def strategy(budget: int = BUDGET, pools: int = 1, search: Any = None) -> Optimize:
    campaign = knob_campaign({**PLANTED, "trials": budget})
    plan = campaign.strategy
    assert isinstance(plan, OptimizeConfig)
    return Optimize(plan, [f.name for f in campaign.factors], pools=pools,
                    known_good=campaign.known_good, search=search)


def concluded(values: Mapping[str, Sequence[float]],
              final: Sequence[tuple[str, float]] | None = None,
              corrupt: Mapping[str, int] | None = None) -> tuple[Conclusion, dict[str, Any]]:
    """The optimize strategy's conclusion on the planted trials, and its versus_production.
    ``final``: the final phase's trials, the search's budget spent just before them; None: the
    run never reached it (a budget of 10 trials)."""
    done = planted(values, final or (), corrupt=corrupt)
    budget = BUDGET if final is None else len(done) - len(final)
    conclusion = strategy(budget).conclude(done, [])
    said = conclusion.finding_json("optimize")
    assert said is not None
    return conclusion, said["versus_production"]


class Recorder:
    """A Search that records what the strategy asks it to measure as given (the strategy's own
    choice, pure logic; Optuna is tested on the real loop) and picks "m=9" for the rest."""

    def __init__(self) -> None:
        self.fixed: list[list[dict[str, str]]] = []

    def suggest(self, told: Any, fixed: Any, pending: Any, count: int) -> list[dict[str, str]]:
        self.fixed.append([dict(levels) for levels in fixed])
        return [dict(levels) for levels in fixed] + [{"m": "9"}] * count

    def failed(self) -> int:
        return 0

    def close(self, told: Any) -> None:
        pass
