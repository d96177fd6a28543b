"""The calibration of the adaptive strategy (bench/calibration.py): over the strategy
benchmark's scenarios, how often a named culprit set is wrong, against the 1 - alpha its tests
promise, and per the confidence word its report states ("strong", "clear" or "weak")."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.calibration_figures import rate, share
from bench.noise import TrialNoise
from bench.scenarios import ALPHA, Scenario, scenarios
from db.store import Store
from orchestrator.core.verdict import Verdict
from orchestrator.reports.campaign.build import build_report

WORDS = ("strong", "clear", "weak")  # the report's confidence words, strongest first
UNSTATED = "none stated"  # a culprit set named, but no word for it (not the target's culprits)


@dataclass(frozen=True)
class Stated:
    """A verdict that names a culprit set: the word its report states, and whether the set is
    exactly the planted one."""

    seed: int
    word: str  # one of WORDS, or UNSTATED
    right: bool


def stated_word(store: Store, campaign_id: str) -> str:
    """The confidence word the campaign's report states for its culprits (the headline's, for
    the weakest culprit of the target): the report model built by the report's own code and
    the word its confidence sentence opens with; UNSTATED where it opens with none of WORDS."""
    word = build_report(store, campaign_id).headline.confidence.split(":", 1)[0]
    return word if word in WORDS else UNSTATED


def by_word(stated: Sequence[Stated]) -> list[dict[str, Any]]:
    """Per word (every one of WORDS, then UNSTATED if any verdict has it): how many verdicts
    the report stated so, how many of them are right and how many wrong, with Wilson
    intervals."""
    words = [*WORDS, *([UNSTATED] if any(s.word == UNSTATED for s in stated) else [])]
    rows = []
    for word in words:
        inside = [s for s in stated if s.word == word]
        right = sum(s.right for s in inside)
        rows.append({"word": word, "verdicts": len(inside),
                     "right": share(right, len(inside), "right"),
                     "wrong": share(len(inside) - right, len(inside), "wrong")})
    return rows


def words_overall(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The words over every scenario of ``adaptive_runs``, and the share of the wrong verdicts
    that were stated "strong"."""
    stated = [Stated(**s) for row in rows for s in row["stated_words"]]
    wrong = [s for s in stated if not s.right]
    return {"words": by_word(stated),
            "wrong_stated_strong": share(sum(s.word == "strong" for s in wrong), len(wrong),
                                         "strong")}


def adaptive_scenario(store: Store, scenario: Scenario, seeds: int,
                      trial_noise: TrialNoise | None = None) -> dict[str, Any]:
    """How often the adaptive contender's named culprit set is wrong, over ``seeds`` seeds
    (trials drawn with ``trial_noise``, else the scenario's), in all and per the word its
    report states."""
    from bench.contenders import CONTENDERS
    from bench.simulated import run_strategy

    truth = sorted(tuple(sorted(c.items())) for c in scenario.culprits)
    named = wrong = cleared = cleared_wrong = 0
    p_values: list[float] = []
    stated: list[Stated] = []
    for seed in range(seeds):
        pool = scenario.pool(seed, trial_noise)
        campaign_id = f"{scenario.name} / adaptive / {seed}"
        verdicts: list[Verdict] = []

        def loop(strategy: dict[str, Any], pool: Any = pool, campaign_id: str = campaign_id,
                 verdicts: list[Verdict] = verdicts) -> Verdict:
            verdicts.append(run_strategy(store, campaign_id, scenario, strategy, pool, 2))
            return verdicts[-1]

        found = CONTENDERS["adaptive"](scenario, pool, loop)
        if found:  # a culprit set named
            named += 1
            right = sorted(tuple(sorted(c.items())) for c in found) == truth
            wrong += not right
            p_values += [c.p_value for c in verdicts[-1].culprits]
            stated.append(Stated(seed, stated_word(store, campaign_id), right))
        elif found == []:  # "nothing to blame": the bad variant is not reproduced
            cleared += 1
            cleared_wrong += bool(truth)
    return {"scenario": scenario.name, "seeds": seeds, "named": rate(wrong, named),
            "nothing_to_blame": rate(cleared_wrong, cleared), "stated": 1 - ALPHA,
            "max_p_value": max(p_values) if p_values else None,
            "words": by_word(stated), "stated_words": [asdict(s) for s in stated]}


def adaptive_runs(seeds: int, names: Sequence[str] = (),
                  trial_noise: TrialNoise | None = None) -> list[dict[str, Any]]:
    """Per scenario of the strategy benchmark (those whose name contains one of ``names``)."""
    with tempfile.TemporaryDirectory(prefix="bisect-calibration-") as folder:
        store = Store.open(str(Path(folder) / "adaptive.db"))
        try:
            return [adaptive_scenario(store, scenario, seeds, trial_noise)
                    for scenario in scenarios()
                    if not names or any(name in scenario.name for name in names)]
        finally:
            store.close()
