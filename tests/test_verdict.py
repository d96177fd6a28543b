"""The pure core: intervals, exact tests, the factorial plan and the verdict, on plain values."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping

import pytest

from experiments.outcomes import CORRUPTION, INFRA
from orchestrator.core.evidence import (
    CORRUPTING,
    WEDGING,
    Failing,
    TrialEvidence,
    failing_for,
    target_of,
    variant_key,
)
from orchestrator.core.stats.exact import fisher_greater, trials_greater
from orchestrator.core.stats.proportions import newcombe_difference, wilson
from orchestrator.core.strategies.factorial import Factorial, decide, gray_order
from orchestrator.core.verdict import (
    ATTRIBUTED,
    CostModel,
    Status,
    Verdict,
    judged_trials,
    wedging,
)

pytestmark = pytest.mark.pure

FACTORS = {
    "index_k": ["fp8", "bf16"],
    "hicache": ["off", "on"],
    "topk_v2": ["off", "on"],
    "cuda_graph": ["on", "off"],
}
COST = CostModel(restart_s=90, workload_s=485, gpus=16)
Rate = Callable[[Mapping[str, str]], float]


def simulate(rate: Rate, *, factors: Mapping[str, list[str]] = FACTORS, repeats: int = 2,
             sessions: int = 80, seed: int = 1, infra: float = 0.0) -> list[TrialEvidence]:
    rng = random.Random(seed)
    trials = []
    for combo in itertools.product(*factors.values()):
        levels = dict(zip(factors, combo, strict=True))
        for _ in range(repeats):
            counts = {"ok": 0, "leak": 0, "error": 0}
            for _ in range(sessions):
                if rng.random() < infra:
                    counts["error"] += 1
                elif rng.random() < rate(levels):
                    counts["leak"] += 1
                else:
                    counts["ok"] += 1
            trials.append(TrialEvidence(levels, counts, restarts=1, wall_s=2.0))
    return trials


def judge(trials: list[TrialEvidence], factors: Mapping[str, list[str]] = FACTORS, *,
          known_bad: Mapping[str, str] | None = None, failing: Failing = CORRUPTING) -> Verdict:
    return decide(trials, factors, alpha=0.01, clean_rate=0.02, cost=COST, known_bad=known_bad,
                  failing=failing)


def test_wilson_and_fisher_match_published_values() -> None:
    # FACTS.md: 0 of 80 vs 5 of 80 is Fisher p = 0.059 two-sided, so 0.029 one-sided.
    assert fisher_greater(5, 80, 0, 80) == pytest.approx(0.0293, abs=1e-3)
    low, high = wilson(5, 80)
    assert low == pytest.approx(0.0270, abs=1e-3) and high == pytest.approx(0.1381, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = newcombe_difference(5, 80, 0, 80)
    assert 0 < low < 5 / 80 < high < 0.2
    assert fisher_greater(0, 0, 3, 10) == 1.0


def test_wilson_is_scipy_s_interval_to_the_bit() -> None:
    """wilson computes SciPy's formula itself (binomtest's p-value, which it skips, was 99% of
    the call): the same floats, at the ends (0 and n) and between, at several confidences."""
    from scipy.stats import binomtest

    for n, confidence in itertools.product((1, 2, 7, 80, 320), (0.95, 0.99, 0.5)):
        for k in sorted({0, 1, n // 3, n - 1, n}):
            ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
            assert wilson(k, n, confidence) == (float(ci.low), float(ci.high)), (k, n)
    for k, n in ((4, 3), (-1, 3)):
        with pytest.raises(ValueError, match="not a count"):
            wilson(k, n)


def test_trial_level_check_needs_the_trials_to_differ() -> None:
    assert trials_greater([0.1, 0.2, 0.15, 0.12], [0.0] * 12) < 0.001
    assert trials_greater([0.0, 0.0], [0.0, 0.0]) == 1.0
    assert trials_greater([], [0.1]) == 1.0


def test_gray_order_covers_every_variant_and_changes_one_factor_at_a_time() -> None:
    factors = {"a": ["0", "1"], "policy": ["back", "through", "selective"], "c": ["x", "y"]}
    order = gray_order(factors)
    assert len(order) == 12
    assert len({variant_key(v) for v in order}) == 12
    for before, after in itertools.pairwise(order):
        assert sum(before[f] != after[f] for f in factors) == 1


def test_factorial_proposes_what_is_neither_done_nor_pending() -> None:
    strategy = Factorial({"a": ["0", "1"], "b": ["x", "y"]}, repeats=2)
    assert len(strategy.propose([], [])) == 8
    done = [TrialEvidence({"a": "0", "b": "x"}, {"ok": 10})]
    pending = [{"a": "0", "b": "x"}, {"a": "1", "b": "y"}]
    proposed = strategy.propose(done, pending)
    assert len(proposed) == 5
    assert sum(p == {"a": "0", "b": "x"} for p in proposed) == 0
    everything = [TrialEvidence(v, {"ok": 1}) for v in strategy.plan]
    assert strategy.propose(everything, []) == []


def test_planted_interaction_is_named_exactly() -> None:
    def rate(levels: Mapping[str, str]) -> float:
        return 0.15 if levels["index_k"] == "bf16" and levels["hicache"] == "on" else 0.003

    verdict = judge(simulate(rate))
    assert verdict.status is Status.CULPRIT
    assert [dict(c.factors) for c in verdict.culprits] == [{"index_k": "bf16", "hicache": "on"}]
    culprit = verdict.to_json()["culprits"][0]
    assert culprit["kind"] == "interaction"
    assert culprit["ci95"][0] > 0.05 and culprit["p_value"] < 1e-10
    assert culprit["trials_with"] == 8 and culprit["trials_without"] == 24


def test_single_factor_culprit() -> None:
    verdict = judge(simulate(lambda lv: 0.12 if lv["topk_v2"] == "on" else 0.0))
    assert [dict(c.factors) for c in verdict.culprits] == [{"topk_v2": "on"}]
    assert verdict.to_json()["culprits"][0]["kind"] == "factor"


def test_two_independent_culprits_are_both_named() -> None:
    def rate(levels: Mapping[str, str]) -> float:
        if levels["index_k"] == "bf16" and levels["hicache"] == "on":
            return 0.2
        return 0.1 if levels["cuda_graph"] == "off" else 0.0

    verdict = judge(simulate(rate, repeats=3))
    named = [dict(c.factors) for c in verdict.culprits]
    assert {"index_k": "bf16", "hicache": "on"} in named
    assert {"cuda_graph": "off"} in named
    assert len(named) == 2


def test_multi_level_factor() -> None:
    factors = {"policy": ["write_back", "write_through", "selective"], "hicache": ["off", "on"]}
    verdict = judge(simulate(lambda lv: 0.2 if lv["policy"] == "selective" else 0.0,
                             factors=factors, repeats=3), factors)
    assert [dict(c.factors) for c in verdict.culprits] == [{"policy": "selective"}]


def test_clean_campaign_is_no_culprit_and_without_reproduction_not_reproduced() -> None:
    trials = simulate(lambda lv: 0.0)
    assert judge(trials).status is Status.NO_CULPRIT
    bad = {"index_k": "bf16", "hicache": "on", "topk_v2": "on", "cuda_graph": "on"}
    assert judge(trials, known_bad=bad).status is Status.NOT_REPRODUCED


def test_corruption_everywhere_is_inconclusive_not_an_accusation() -> None:
    verdict = judge(simulate(lambda lv: 0.08))
    assert verdict.status is Status.INCONCLUSIVE
    assert verdict.culprits == ()


def test_errors_and_timeouts_are_neither_corrupt_nor_clean() -> None:
    trial = TrialEvidence({"a": "x"}, {"ok": 50, "leak": 10, "error": 30, "timeout": 10})
    assert trial.sessions == 100 and trial.judged == 60 and trial.infra == 40
    assert trial.rate == pytest.approx(10 / 60)


def test_trials_dominated_by_infrastructure_errors_are_not_judged() -> None:
    trials = simulate(lambda lv: 0.0)
    wrecked = TrialEvidence(dict(trials[0].levels), {"error": 70, "leak": 10}, restarts=1)
    verdict = judge([*trials, wrecked])
    assert verdict.status is Status.NO_CULPRIT
    assert verdict.to_json()["cost"]["unjudged_trials"] == 1


def test_no_evidence_and_zero_counts_do_not_crash() -> None:
    assert judge([]).status is Status.INCONCLUSIVE
    zero = [TrialEvidence({"index_k": "fp8", "hicache": "off", "topk_v2": "off",
                           "cuda_graph": "on"}, {})]
    assert judge(zero).status is Status.INCONCLUSIVE


def test_verdict_json_has_the_contract_fields() -> None:
    document = judge(simulate(lambda lv: 0.15 if lv["hicache"] == "on" else 0.0)).to_json()
    assert set(document) >= {"status", "culprits", "variants", "cost"}
    variant = document["variants"][0]
    assert set(variant) >= {"levels", "sessions", "corrupted", "rate", "ci95", "trials"}
    cost = document["cost"]
    assert set(cost) >= {"trials", "restarts", "sessions", "wall_s", "gpu_s_equivalent"}
    # 32 trials, one restart each: (32 * 485 + 32 * 90) s on 16 GPUs.
    assert cost["gpu_s_equivalent"] == pytest.approx(32 * (485 + 90) * 16)
    assert len(document["variants"]) == 16


def wedges_and_leaks() -> list[TrialEvidence]:
    """Eager decode wedges the server (timeouts) without corrupting anything; bf16 x HiCache
    corrupts without wedging."""
    rng = random.Random(4)
    trials = []
    for combo in itertools.product(*FACTORS.values()):
        levels = dict(zip(FACTORS, combo, strict=True))
        for _ in range(2):
            wedge = 0.3 if levels["cuda_graph"] == "off" else 0.0
            leak = 0.15 if levels["index_k"] == "bf16" and levels["hicache"] == "on" else 0.0
            counts = {"ok": 0, "leak": 0, "timeout": 0}
            for _ in range(80):
                if rng.random() < wedge:
                    counts["timeout"] += 1
                elif rng.random() < leak:
                    counts["leak"] += 1
                else:
                    counts["ok"] += 1
            trials.append(TrialEvidence(levels, counts, restarts=1))
    return trials


def test_wedging_is_attributed_separately_from_corruption() -> None:
    verdict = judge(wedges_and_leaks())
    assert [dict(c.factors) for c in verdict.culprits] == [{"index_k": "bf16", "hicache": "on"}]
    assert [dict(c.factors) for c in verdict.wedge_culprits] == [{"cuda_graph": "off"}]
    document = verdict.to_json()
    assert document["target"] == "corruption"
    assert document["wedge_culprits"][0]["factors"] == {"cuda_graph": "off"}


F4 = {f"f{i}": ["a", "b"] for i in range(4)}
GOOD4, BAD4 = {f: "a" for f in F4}, {f: "b" for f in F4}


def hung(levels: Mapping[str, str], timeouts: int, sessions: int = 80) -> TrialEvidence:
    return TrialEvidence(dict(levels), {"ok": sessions - timeouts, "timeout": timeouts},
                         restarts=1)


def test_an_attributed_wedge_names_no_level_the_trials_never_set_apart() -> None:
    """The trials of BENCHMARKS' "wedge f3 20% and leak f1 10%" as the oracle ran them on seed
    0 (known-good, known-bad, known-bad with the leak's f1 flipped): f3 hangs, but f0, f2 and
    f3 are b or a together in every trial, and attribution named f0."""
    trials = [hung(GOOD4, 0), hung(GOOD4, 0), hung(BAD4, 12), hung(BAD4, 9),
              *(hung({**BAD4, "f1": "a"}, n) for n in (10, 14, 8, 12))]
    culprits, reason = wedging(trials, F4, 0.01)
    assert culprits == ()
    assert reason == f"{ATTRIBUTED}; wedging follows f0=b or f2=b or f3=b, not told apart by them"
    # adaptive's seed 47: f0 set apart, f2 and f3 only by trials stopped at their first
    # session (a leak): it named f2
    apart = [*trials, hung({**BAD4, "f0": "a"}, 11), hung({**BAD4, "f2": "a"}, 0, sessions=1),
             hung({**BAD4, "f3": "a"}, 0, sessions=1)]
    culprits, reason = wedging(apart, F4, 0.01)
    assert culprits == ()
    assert reason.endswith("wedging follows f2=b or f3=b, not told apart by them")
    # the trials that set f3 apart from the others: it is named, the reason the usual one
    trials += [hung({**BAD4, "f0": "a"}, 11), hung({**BAD4, "f2": "a"}, 13),
               hung({**BAD4, "f3": "a"}, 0), hung({**BAD4, "f3": "a"}, 0)]
    culprits, reason = wedging(trials, F4, 0.01)
    assert [dict(c.factors) for c in culprits] == [{"f3": "b"}] and reason == ATTRIBUTED


def test_one_trial_is_judged_for_corruption_or_for_wedging_its_counts_unchanged() -> None:
    counts = {"ok": 50, "leak": 10, "no_tool": 2, "error": 30, "timeout": 8}
    trial = TrialEvidence({"a": "x"}, counts)
    assert trial.failing == CORRUPTING == failing_for("corruption")
    assert (trial.failures, trial.judged, trial.infra) == (12, 62, 38)
    wedged = trial.judged_as(failing_for("wedging"))
    assert wedged.failing == WEDGING and wedged.counts == counts  # judged, never rewritten
    assert (wedged.failures, wedged.judged, wedged.infra) == (38, 100, 38)
    assert wedged.rate == pytest.approx(0.38) and wedged.judged_as(CORRUPTING) == trial
    assert {o.value for o in CORRUPTION} == CORRUPTING and {o.value for o in INFRA} == WEDGING
    assert [target_of(f) for f in (CORRUPTING, WEDGING)] == ["corruption", "wedging"]
    # mostly errors: no verdict of its own on corruption, every session judged for wedging
    wrecked = TrialEvidence({"a": "x"}, {"ok": 20, "error": 80})
    assert judged_trials([wrecked]) == [] and judged_trials([wrecked.judged_as(WEDGING)])


def test_a_wedging_campaign_is_decided_on_its_wedges_and_shown_as_it_ran() -> None:
    trials = wedges_and_leaks()
    wedged = [t.judged_as(WEDGING) for t in trials]
    verdict = judge(wedged, failing=WEDGING)
    assert [dict(c.factors) for c in verdict.culprits] == [{"cuda_graph": "off"}]
    assert verdict.wedge_culprits == verdict.culprits  # its culprits are the wedge's
    assert [t.counts for t in verdict.trials] == [t.counts for t in trials]
    document = verdict.to_json()
    assert document["target"] == "wedging"
    # each failure's culprits in its own field: the wedge's are wedge culprits, never
    # corruption culprits (issue 27)
    assert document["wedge_culprits"] == document["culprits"] != []
    assert document["corruption_culprits"] == []
    assert document["reason"].startswith("wedging follows cuda_graph=off")
    # the variants as they ran: timeouts are infra, leaks are corrupted, whatever the target
    assert document["variants"] == judge(trials).to_json()["variants"]
    off = [v for v in document["variants"] if v["levels"]["cuda_graph"] == "off"]
    assert all(v["infra"] > 0 and v["judged"] == v["sessions"] - v["infra"] for v in off)
    assert sum(v["corrupted"] for v in document["variants"]) == sum(
        t.counts["leak"] for t in trials)


def test_an_interaction_whose_two_trials_spread_is_named_though_no_level_alone_stands_out() -> None:
    """The factorial example, 2 trials a variant of 64 sessions: the culprit's trials failed
    24 and 11, every other trial 0 (a run of the example ended inconclusive so). The spread
    counts its 128 sessions as 19 (5 failing), and each of its levels, pooled with a clean
    variant's 128 sessions, falls short of alpha once Bonferroni counts 4 levels."""
    factors = {"index_k": ["fp8", "bf16"], "hicache": ["off", "on"]}
    trials = []
    for combo in itertools.product(*factors.values()):
        levels = dict(zip(factors, combo, strict=True))
        bad = levels == {"index_k": "bf16", "hicache": "on"}
        for leaks in ((24, 11) if bad else (0, 0)):
            trials.append(TrialEvidence(levels, {"ok": 64 - leaks, "leak": leaks},
                                        restarts=1, wall_s=2.0))
    verdict = judge(trials, factors)
    assert verdict.status is Status.CULPRIT, verdict.reason
    assert [dict(c.factors) for c in verdict.culprits] == [{"index_k": "bf16", "hicache": "on"}]
