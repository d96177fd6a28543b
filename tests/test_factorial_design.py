"""Fractional factorial designs on plain values: the runs, their resolution and aliases, and the
verdict on sessions drawn from planted per-variant rates."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from typer.testing import CliRunner

from experiments.campaign import Campaign, CampaignError
from experiments.campaign_checks import FRACTIONAL_MAX_FACTORS
from experiments.campaign_load import load_campaign
from experiments.strategy_config import FactorialConfig
from orchestrator.cli import app
from orchestrator.core.evidence import TrialEvidence, variant_key
from orchestrator.core.strategies.design import MAX_FACTORS, Design, DesignError, fraction
from orchestrator.core.strategies.factorial import Factorial, decide
from orchestrator.core.strategies.registry import strategy_for
from orchestrator.core.verdict import CostModel, Status, Verdict

pytestmark = pytest.mark.pure

COST = CostModel(restart_s=90, workload_s=485, gpus=16)
NAMES = ["index_k", "hicache", "topk_v2", "cuda_graph", "overlap", "radix", "chunked", "spec",
         "mtp", "dp_attn", "ep_moe"]
Levels = Mapping[str, str]


def two_level(k: int) -> dict[str, list[str]]:
    return {name: ["off", "on"] for name in NAMES[:k]}


Columns = dict[str, npt.NDArray[np.int64]]


def columns(runs: Sequence[Levels], factors: Mapping[str, Sequence[str]]) -> Columns:
    """Each factor's sign in each run: +1 at its second level, -1 at its first (numpy arrays:
    the properties below multiply thousands of columns of up to 128 runs)."""
    return {name: np.array([1 if run[name] == levels[1] else -1 for run in runs])
            for name, levels in factors.items()}


def column(signs: Columns, effect: Sequence[str]) -> npt.NDArray[np.int64]:
    """An effect's column: the product of its factors' signs, run by run."""
    return np.prod([signs[name] for name in effect], axis=0)


def measured_resolution(runs: list[dict[str, str]], factors: Mapping[str, Sequence[str]]) -> int:
    """The shortest set of factors whose sign product is constant over the runs: found from the
    runs themselves, not from the design's own words."""
    signs, names = columns(runs, factors), list(factors)
    for size in range(1, len(names) + 1):
        for effect in itertools.combinations(names, size):
            if abs(int(column(signs, effect).sum())) == len(runs):
                return size
    return 0  # a full factorial: no word


# --- the designs -------------------------------------------------------------------------------

# Montgomery's Table 8.14: the smallest design of resolution V or more for k two-level factors.
RESOLUTION_V = {5: (16, 5), 6: (32, 6), 7: (64, 7), 8: (64, 5), 9: (128, 6), 10: (128, 5),
                11: (128, 5)}


@pytest.mark.parametrize("k", sorted(RESOLUTION_V))
def test_the_smallest_resolution_v_design_and_its_properties(k: int) -> None:
    factors = two_level(k)
    design = fraction(factors, 5)
    runs = design.runs()
    runs_expected, resolution = RESOLUTION_V[k]
    assert design.fractional and len(runs) == runs_expected
    assert design.resolution == resolution == measured_resolution(runs, factors)
    assert len({variant_key(run) for run in runs}) == len(runs)  # no run twice
    signs = columns(runs, factors)
    effects = [(name,) for name in factors] + list(itertools.combinations(factors, 2))
    matrix = np.column_stack([column(signs, effect) for effect in effects])
    # balance: every column is half + and half -
    assert not matrix.sum(axis=0).any()
    # all mutually orthogonal: every product of two columns sums to 0 (the diagonal: the runs)
    assert (matrix.T @ matrix == len(runs) * np.eye(len(effects), dtype=np.int64)).all()
    assert design.clear_effects() == "main effects and two-factor interactions"


def test_the_half_fraction_of_five_factors_is_e_equals_abcd() -> None:
    design = fraction(two_level(5), 5)
    assert dict(design.generators) == {"overlap": ("index_k", "hicache", "topk_v2", "cuda_graph")}
    assert design.words == [frozenset(NAMES[:5])]
    # Main effects are aliased with four-factor interactions, two-factor ones with three-factor.
    assert design.aliases(["index_k", "hicache"]) == [frozenset({"topk_v2", "cuda_graph",
                                                                 "overlap"})]
    assert design.confusions(["index_k", "hicache"]) == []
    confused = design.confusions(["index_k", "hicache", "topk_v2"])
    assert (frozenset({"index_k", "hicache", "topk_v2"}), frozenset({"cuda_graph", "overlap"})) \
        == confused[0]
    data = design.to_json()
    assert data["kind"] == "fractional" and data["resolution"] == 5 and data["variants"] == 16
    assert data["aliases"]["hicache×index_k"] == ["cuda_graph×overlap×topk_v2"]
    assert data["aliases"]["index_k"] == []  # aliased only with a four-factor interaction
    assert "Montgomery" in data["source"]


def test_eight_factors_at_resolution_v_are_a_quarter_with_words_of_four_or_more() -> None:
    design = fraction(two_level(8), 5)
    assert len(design.generators) == 2 and len(design.words) == 3
    assert sorted(len(w) for w in design.words) == [5, 5, 6]  # G=ABCD, H=ABEF, GH=CDEF·GH


def test_resolution_iv_aliases_two_factor_interactions_with_each_other() -> None:
    factors = two_level(6)
    design = fraction(factors, 4)
    runs = design.runs()
    assert len(runs) == 16 and design.resolution == 4 == measured_resolution(runs, factors)
    signs = columns(runs, factors)
    mains = [(name,) for name in factors]
    pairs = list(itertools.combinations(factors, 2))
    for main, pair in itertools.product(mains, pairs):  # main effects stay clear of pairs
        assert int((column(signs, main) * column(signs, pair)).sum()) == 0
    assert any(abs(int((column(signs, a) * column(signs, b)).sum())) == 16
               for a, b in itertools.combinations(pairs, 2))
    assert design.clear_effects() == "main effects"
    assert design.confusions(["index_k"]) == []
    assert design.confusions(["index_k", "hicache"])  # a pair is not resolved at IV


def test_few_factors_give_the_full_design_and_too_many_are_refused() -> None:
    assert not fraction(two_level(4), 5).fractional  # 2^(4-1) is only IV: all 16 are needed
    assert len(fraction(two_level(4), 5).runs()) == 16
    assert fraction(two_level(4), 4).resolution == 4
    assert fraction(two_level(5), 6).resolution is None  # VI needs all 32
    with pytest.raises(DesignError, match="12 two-level factors"):
        fraction({f"f{i}": ["0", "1"] for i in range(12)}, 5)
    with pytest.raises(DesignError, match="below 4"):
        fraction(two_level(5), 3)
    assert MAX_FACTORS == FRACTIONAL_MAX_FACTORS  # the campaign check knows the table's limit


def test_factors_of_more_levels_are_crossed_with_the_fraction() -> None:
    factors: dict[str, list[str]] = {**two_level(5), "policy": ["back", "through", "selective"]}
    design = fraction(factors, 5)
    runs = design.runs()
    assert design.crossed == ["policy"] and design.resolution == 5 and len(runs) == 48
    by_policy = Counter(run["policy"] for run in runs)
    assert set(by_policy.values()) == {16}
    fractions = {p: {variant_key({k: v for k, v in r.items() if k != "policy"}) for r in runs
                     if r["policy"] == p} for p in factors["policy"]}
    assert fractions["back"] == fractions["through"] == fractions["selective"]
    assert "crossed with policy" in design.describe()


def test_runs_follow_a_gray_like_order_and_contain_the_anchor() -> None:
    factors = two_level(5)
    anchor = {name: "on" for name in factors}
    design = fraction(factors, 5, anchor)
    runs = design.runs()
    assert anchor in runs
    # A half fraction of five factors has no two runs one change apart: two is the least.
    assert all(sum(a[f] != b[f] for f in factors) == 2 for a, b in itertools.pairwise(runs))
    assert {name: "off" for name in factors} not in runs  # five changes from the anchor: odd
    eight = fraction(two_level(8), 5).runs()
    changes = [sum(a[f] != b[f] for f in a) for a, b in itertools.pairwise(eight)]
    # G=ABCD, H=ABEF: A and B drive two generators each, so they change least often (3 times).
    assert Counter(changes) == {2: 60, 3: 3}


def test_factorial_proposes_the_fraction_times_repeats() -> None:
    factors = two_level(5)
    design = fraction(factors, 5)
    strategy = Factorial(factors, 3, design)
    assert strategy.design is design and len(strategy.plan) == 48
    assert Counter(variant_key(v) for v in strategy.plan) == Counter(
        {variant_key(run): 3 for run in design.runs()})
    assert strategy.plan[15] == strategy.plan[16]  # passes join without a jump
    done = [TrialEvidence(strategy.plan[0], {"ok": 10})]
    assert len(strategy.propose(done, [strategy.plan[1]])) == 46


# --- the verdict on planted rates --------------------------------------------------------------

Rate = Callable[[Levels], float]


def simulate(design: Design, rate: Rate, *, repeats: int = 2, sessions: int = 80, seed: int = 1,
             infra: Callable[[Levels], float] = lambda _: 0.0) -> list[TrialEvidence]:
    """Every run of the design, ``repeats`` trials each; each session drawn from the variant's
    planted rates (like bench/scenarios.py's Pool)."""
    rng = random.Random(seed)
    trials = []
    for levels in Factorial(design.factors, repeats, design).plan:
        counts = {"ok": 0, "leak": 0, "error": 0}
        for _ in range(sessions):
            if rng.random() < infra(levels):
                counts["error"] += 1
            elif rng.random() < rate(levels):
                counts["leak"] += 1
            else:
                counts["ok"] += 1
        trials.append(TrialEvidence(dict(levels), counts, restarts=1, wall_s=2.0))
    return trials


def judge(design: Design, trials: list[TrialEvidence]) -> Verdict:
    return decide(trials, design.factors, alpha=0.01, clean_rate=0.02, cost=COST,
                  known_bad={name: "on" for name in design.factors}, design=design)


def culprits(verdict: Verdict) -> list[dict[str, str]]:
    return [dict(c.factors) for c in verdict.culprits]


SEEDS = range(1, 6)


def seed_interaction(v: Levels) -> float:
    return 0.15 if v["index_k"] == "on" and v["hicache"] == "on" else 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_a_single_factor_among_five(seed: int) -> None:
    design = fraction(two_level(5), 5)
    verdict = judge(design, simulate(design, lambda v: 0.15 if v["topk_v2"] == "on" else 0.0,
                                     seed=seed))
    assert verdict.status is Status.CULPRIT and culprits(verdict) == [{"topk_v2": "on"}]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_seed_interaction_among_five(seed: int) -> None:
    design = fraction(two_level(5), 5)
    verdict = judge(design, simulate(design, seed_interaction, seed=seed))
    assert verdict.status is Status.CULPRIT
    assert culprits(verdict) == [{"index_k": "on", "hicache": "on"}]
    assert "2^(5-1) fraction of resolution V" in verdict.reason
    assert len(verdict.cells) == 16 and verdict.culprits[0].trial_p_value < 0.05
    data = verdict.to_json()["design"]
    assert data["kind"] == "fractional" and data["resolution"] == 5
    top = {row["effect"]: row for row in data["effects"][:3]}
    assert set(top) == {"index_k", "hicache", "hicache×index_k"}
    assert top["hicache×index_k"]["aliases"] == ["cuda_graph×overlap×topk_v2"]
    assert top["hicache×index_k"]["p_value"] < 1e-6


@pytest.mark.parametrize("seed", SEEDS)
def test_an_interaction_among_eight(seed: int) -> None:
    design = fraction(two_level(8), 5)
    verdict = judge(design, simulate(
        design, lambda v: 0.06 if v["radix"] == "on" and v["spec"] == "off" else 0.0, seed=seed))
    assert len(verdict.cells) == 64
    assert verdict.status is Status.CULPRIT and culprits(verdict) == [{"radix": "on",
                                                                       "spec": "off"}]


@pytest.mark.parametrize("seed", SEEDS)
def test_no_culprit_and_low_noise(seed: int) -> None:
    design = fraction(two_level(8), 5)
    verdict = judge(design, simulate(design, lambda _: 0.003, seed=seed))
    assert verdict.status is Status.NO_CULPRIT and not verdict.culprits
    assert verdict.to_json()["design"]["resolution"] == 5


def test_zero_count_cells_and_unjudged_runs() -> None:
    """Every variant outside the culprit is exactly 0 corrupt, and two runs are all errors (not
    judged at all): the exact tests and the effect estimates still stand."""
    design = fraction(two_level(5), 5)
    wedged = design.runs()[3]
    trials = simulate(design, lambda v: 0.25 if v["index_k"] == "on" and v["hicache"] == "on"
                      else 0.0, seed=9, infra=lambda v: 1.0 if v == wedged else 0.0)
    assert sum(t.failures for t in trials if not (t.levels["index_k"] == "on" and
                                                   t.levels["hicache"] == "on")) == 0
    verdict = judge(design, trials)
    assert verdict.unjudged_trials == 2 and len(verdict.cells) == 15
    assert culprits(verdict) == [{"index_k": "on", "hicache": "on"}]
    assert verdict.culprits[0].corrupted_out == 0
    for row in verdict.to_json()["design"]["effects"]:
        assert 0.0 <= row["p_value"] <= 1.0 and row["ci95"][0] <= row["estimate"] <= row["ci95"][1]


def test_an_aliased_three_factor_culprit_is_not_named() -> None:
    design = fraction(two_level(5), 5)
    verdict = judge(design, simulate(
        design, lambda v: 0.3 if all(v[f] == "on" for f in ("index_k", "hicache", "topk_v2"))
        else 0.0, seed=2))
    assert verdict.status is Status.INCONCLUSIVE and not verdict.culprits
    assert "hicache×index_k×topk_v2 = cuda_graph×overlap" in verdict.reason
    assert "design: full" in verdict.reason


def test_resolution_iv_names_a_factor_but_not_an_interaction() -> None:
    design = fraction(two_level(6), 4)
    single = judge(design, simulate(design, lambda v: 0.15 if v["overlap"] == "on" else 0.0))
    assert single.status is Status.CULPRIT and culprits(single) == [{"overlap": "on"}]
    pair = judge(design, simulate(design, seed_interaction))
    assert pair.status is Status.INCONCLUSIVE and "resolution IV" in pair.reason


# --- the campaign file -------------------------------------------------------------------------

def campaign_text(tmp_path: Path, strategy: str, names: Sequence[str] = NAMES[:5]) -> str:
    listed = "\n".join(f"  - {{name: {name}, levels: {{off: , on: }}}}" for name in names)
    return f"""\
name: fraction
nodes: [{{name: local, workdir: {tmp_path}}}]
pools:
  - name: p
    endpoint: http://127.0.0.1:1
    services: [{{name: s, node: local, start: serve, health_url: http://x/h}}]
factors:
{listed}
strategy: {strategy}
"""


def write(tmp_path: Path, strategy: str, names: Sequence[str] = NAMES[:5]) -> tuple[Path, int]:
    """The campaign file, and the line of its strategy."""
    path = tmp_path / "campaign.yaml"
    text = campaign_text(tmp_path, strategy, names)
    path.write_text(text)
    return path, text.splitlines().index(f"strategy: {strategy}") + 1


def load_error(tmp_path: Path, strategy: str) -> tuple[str, str]:
    path, line = write(tmp_path, strategy)
    with pytest.raises(CampaignError) as error:
        load_campaign(path)
    return str(error.value), f"{path}:{line}"


def test_a_fractional_campaign_loads_and_builds_its_strategy(tmp_path: Path) -> None:
    path, _ = write(tmp_path, "{kind: factorial, design: fractional, repeats: 2}")
    with path.open("a") as file:
        file.write("known_bad: {index_k: on, hicache: on, topk_v2: off, cuda_graph: off, "
                   "overlap: off}\n")
    campaign = load_campaign(path)
    assert isinstance(campaign.strategy, FactorialConfig)
    assert campaign.strategy.design == "fractional" and campaign.strategy.resolution == 5
    strategy = strategy_for(campaign)
    assert isinstance(strategy, Factorial) and strategy.design is not None
    assert strategy.design.resolution == 5 and len(strategy.plan) == 32
    assert campaign.known_bad in strategy.plan  # the fraction holds the known-bad variant
    full = strategy_for(Campaign.model_validate(
        {**campaign.model_dump(mode="json"), "strategy": {"kind": "factorial"}}))
    assert isinstance(full, Factorial) and full.design is None and len(full.plan) == 64
    path, _ = write(tmp_path, "{design: fractional}", NAMES[:11])  # the table's largest
    eleven = strategy_for(load_campaign(path))
    assert isinstance(eleven, Factorial) and len(eleven.plan) == 2 * 128


def test_fractional_design_errors_name_file_line_and_field(tmp_path: Path) -> None:
    message, where = load_error(tmp_path, "{kind: adaptive, design: fractional}")
    assert f"{where}: strategy.design: only the factorial strategy has a design (this " \
           f"campaign's strategy is adaptive)" in message
    message, where = load_error(tmp_path, "{kind: factorial, resolution: 4}")
    assert f"{where}: strategy.resolution: applies to `design: fractional` only" in message
    message, where = load_error(tmp_path, "{design: fractional, resolution: 3}")
    assert f"{where}: strategy.resolution:" in message and "greater than or equal to 4" in message
    message, where = load_error(tmp_path, "{design: halved}")
    assert f"{where}: strategy.design:" in message and "'full' or 'fractional'" in message


def test_too_many_factors_for_a_fraction_is_a_validate_error(tmp_path: Path) -> None:
    path, line = write(tmp_path, "{design: fractional}", [*NAMES, "extra"])
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{path}:{line}: strategy.design: 12 two-level factors: fractional designs are " \
           f"tabulated for up to 11" in result.output
    assert "Traceback" not in result.output


def test_validate_counts_the_variants_a_fraction_runs(tmp_path: Path) -> None:
    path, _ = write(tmp_path, "{design: fractional}")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "5 factors, 16 of 32 variants (2^(5-1)" in result.output
    assert "resolution V" in result.output
