"""The calibration benchmark (bench/calibration.py): its runs, binning and Wilson figures."""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from bench import calibration_adaptive
from bench.calibration import BINS, CommitRun, commit_runs, main, summary, tables
from bench.calibration_adaptive import (
    UNSTATED,
    WORDS,
    Stated,
    adaptive_scenario,
    by_word,
    stated_word,
    words_overall,
)
from bench.calibration_figures import binned, in_bin, rate
from bench.scenarios import scenarios
from db.store import Store
from orchestrator.reports.campaign.build import build_report
from orchestrator.reports.campaign.model import Report

pytestmark = pytest.mark.pure


def wilson_by_hand(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval, written out (not the project's scipy call)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_bins_are_half_open_and_the_last_holds_one() -> None:
    assert in_bin(0.95, 0.95, 0.99) and not in_bin(0.99, 0.95, 0.99)
    assert in_bin(0.99, 0.99, 1.0) and in_bin(1.0, 0.99, 1.0)
    assert not any(in_bin(0.949, low, high) for low, high in BINS)


def test_wrong_rates_per_bin_with_their_wilson_interval() -> None:
    # 20 verdicts stated in [0.95, 0.99), 3 of them wrong; 10 in [0.99, 1], none wrong; two
    # below 0.95 that no bin holds.
    points = ([(0.96, True)] * 3 + [(0.97, False)] * 17 + [(1.0, False)] * 4
              + [(0.995, False)] * 6 + [(0.9, True), (0.5, False)])
    low_bin, high_bin = binned(points, BINS)
    assert (low_bin["n"], low_bin["wrong"], low_bin["rate"]) == (20, 3, 0.15)
    assert low_bin["wilson95"] == pytest.approx(wilson_by_hand(3, 20))
    assert low_bin["mean_stated"] == pytest.approx((3 * 0.96 + 17 * 0.97) / 20)
    assert (high_bin["n"], high_bin["wrong"], high_bin["rate"]) == (10, 0, 0.0)
    assert high_bin["wilson95"] == pytest.approx(wilson_by_hand(0, 10))
    empty = rate(0, 0)
    assert empty["rate"] is None and empty["wilson95"] == [0.0, 1.0]


def _run(stated: float, wrong: bool, status: str = "culprit") -> CommitRun:
    return CommitRun(16, "0-10", 0, 5, status, (6,) if wrong else (5,), stated, 8,
                     ((0.2, False), (stated, not wrong)))


def test_the_summary_counts_verdicts_stated_at_least_095() -> None:
    runs = [_run(0.96, True), _run(0.97, False), _run(0.999, False),
            _run(0.6, True, status="inconclusive")]
    figures = summary(runs)["overall"]
    assert (figures["runs"], figures["culprit"], figures["inconclusive"]) == (4, 3, 1)
    assert figures["stated_at_least_095"]["wrong"] == 1
    assert figures["stated_at_least_095"]["n"] == 3
    # Every step of every run, by its largest mass: 4 steps at 0.2 (never the truth) and one
    # each at 0.6, 0.96, 0.97 and 0.999.
    by_bin = {tuple(b["bin"]): b for b in figures["reliability"]}
    assert (by_bin[(0.0, 0.5)]["n"], by_bin[(0.0, 0.5)]["wrong"]) == (4, 4)
    assert (by_bin[(0.95, 0.99)]["n"], by_bin[(0.95, 0.99)]["wrong"]) == (2, 1)
    assert "| all | all | 3 / 0 / 1 of 4 |" in tables({"commits": summary(runs)})


def test_simulated_ranges_run_on_the_real_loop() -> None:
    # ranges of 8 commits, two seeds of each noise: three runs name a culprit and one is not
    # reproduced (16 commits and three seeds took 6 s of the pure tier; the benchmark's sizes
    # are its own)
    runs = commit_runs([8], ["0-10", "2-8"], seeds=2)
    assert [(r.noise, r.seed) for r in runs] == [(n, s) for n in ("0-10", "2-8")
                                                for s in range(2)]
    assert {r.status for r in runs} == {"culprit", "not_reproduced"}
    for run in runs:
        assert 1 <= run.first_bad < 8 and run.trials == len(run.steps) >= 4
        assert all(0 < mass <= 1 for mass, _ in run.steps)
        if run.status == "culprit":
            assert run.named and run.stated >= 0.95  # what the verdict states, at its end
            assert run.stated == pytest.approx(run.steps[-1][0]) or len(run.named) > 1


def test_the_command_writes_its_tables_and_json(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "calibration.json"
    # ranges of 8 commits: the tables and the document, not the answers, are tested
    main(["--seeds", "2", "--sizes", "8", "--noise", "0-10", "--adaptive-seeds", "1",
          "--scenarios", "single factor", "--workers", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "| 8 | 0% → 10% |" in printed and "| single factor, 6% | 1 |" in printed
    document = json.loads(out.read_text())
    assert len(document["commit_runs"]) == 2
    assert document["commits"]["settings"][0]["size"] == 8
    [adaptive] = document["adaptive"]
    assert adaptive["scenario"] == "single factor, 6%" and adaptive["stated"] == 0.99
    # the words: one verdict at most, binned by the word its report states
    counted = sum(w["verdicts"] for w in document["adaptive_words"]["words"])
    assert counted == adaptive["named"]["n"] == len(adaptive["stated_words"])
    assert "| scenario | stated word | verdicts |" in printed


def test_verdicts_binned_by_word_add_up() -> None:
    stated = ([Stated(s, "strong", True) for s in range(7)] + [Stated(7, "strong", False)]
              + [Stated(8, "clear", True), Stated(9, "weak", False), Stated(10, UNSTATED, True)])
    rows = {row["word"]: row for row in by_word(stated)}
    assert list(rows) == [*WORDS, UNSTATED]
    assert sum(row["verdicts"] for row in rows.values()) == len(stated)
    for row in rows.values():
        assert row["right"]["right"] + row["wrong"]["wrong"] == row["verdicts"]
        assert row["right"]["n"] == row["wrong"]["n"] == row["verdicts"]
    strong = rows["strong"]
    assert (strong["verdicts"], strong["right"]["right"], strong["wrong"]["wrong"]) == (8, 7, 1)
    assert strong["right"]["wilson95"] == pytest.approx(wilson_by_hand(7, 8))
    assert strong["wrong"]["wilson95"] == pytest.approx(wilson_by_hand(1, 8))
    assert UNSTATED not in {row["word"] for row in by_word(stated[:-1])}
    overall = words_overall([{"stated_words": [asdict(s) for s in stated[:5]]},
                             {"stated_words": [asdict(s) for s in stated[5:]]}])
    assert overall["words"] == by_word(stated)
    # two verdicts wrong, one of them stated strong
    assert (overall["wrong_stated_strong"]["strong"], overall["wrong_stated_strong"]["n"]) == (1, 2)
    table = tables({"adaptive": [], "adaptive_words": overall})
    assert "| all | strong | 8 | 87.5% (7/8; " in table and "| all | clear | 1 |" in table


def test_the_word_is_the_one_the_report_states(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = next(s for s in scenarios() if s.name == "single factor, 6%")
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(str(Path(folder) / "words.db"))
        try:
            row = adaptive_scenario(store, scenario, 2)
            assert sum(w["verdicts"] for w in row["words"]) == row["named"]["n"] == 2
            for s in row["stated_words"]:
                confidence = build_report(
                    store, f"{scenario.name} / adaptive / {s['seed']}").headline.confidence
                assert s["word"] in WORDS and confidence.startswith(s["word"] + ":")
            # the word is read from the report model: another sentence there, another word
            real = calibration_adaptive.build_report

            def reworded(store: Store, campaign_id: str) -> Report:
                report = real(store, campaign_id)
                said = report.headline.confidence
                return replace(report, headline=replace(
                    report.headline, confidence="weak" + said[said.index(":"):]))

            monkeypatch.setattr(calibration_adaptive, "build_report", reworded)
            assert stated_word(store, f"{scenario.name} / adaptive / 0") == "weak"
        finally:
            store.close()
