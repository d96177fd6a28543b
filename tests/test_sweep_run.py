"""`bisect sweep` end to end on twins: a clean build raises no alert run after run; a new
commit that brings the race back is detected, confirmed against the baseline's commit put back
on the same pool, exits 1, and the hunt names the commit."""

from __future__ import annotations

from pathlib import Path

from db.store import Store
from db.sweeps import Sweeps
from tests.sweep_support import (
    builtin_triage,  # noqa: F401 - autouse
    commit_faults,
    git,
    run_sweep_cli,
    sweep_file,
)


def test_a_sweep_finds_confirms_and_hunts_a_regression(ray_cluster: None,
                                                       tmp_path: Path) -> None:
    tree = tmp_path / "src"
    good = commit_faults(tree, 0.0, "the fixed pool sizing")
    path, store = sweep_file(tmp_path, tree), tmp_path / "bisect.db"

    code, first = run_sweep_cli(path, store, "--accept")
    assert code == 0, first
    assert first["status"] == "clean" and first["accepted"]
    assert "no baseline yet" in first["reason"]
    assert {v["state"] for v in first["variants"]} == {"new"}

    code, second = run_sweep_cli(path, store)
    assert code == 0, second
    assert second["status"] == "clean"
    assert {v["state"] for v in second["variants"]} == {"clean"}, second["variants"]
    assert second["commits"] == {"baseline": good, "now": good}

    commit_faults(tree, 0.0, "refactor the scheduler")
    bad = commit_faults(tree, 0.6, "reuse the host pool across requests")
    head = commit_faults(tree, 0.6, "docs")
    page = tmp_path / "reports" / "nightly.html"
    page.parent.mkdir()
    code, third = run_sweep_cli(path, store, "-o", str(page))
    assert code == 1, third
    assert third["status"] == "regression"
    risky = next(v for v in third["variants"] if v["name"] == "hicache-on")
    assert risky["state"] == "regression" and risky["regressed"] == ["corruption"]
    assert risky["confirm_trials"] >= 2
    assert next(v for v in third["variants"] if v["name"] == "production")["state"] == "clean"
    assert third["commits"] == {"baseline": good, "now": head}
    hunt = third["hunt"]
    assert hunt["first_bad"] == [bad[:12]], hunt
    assert git(tree, "rev-parse", "HEAD") == head  # the tree as found
    written = page.read_text()  # the run's report, and its hunt's beside it
    assert "REGRESSION" in written and bad[:12] in written
    assert (page.parent / f"hunt-{hunt['campaign']}.html").is_file()

    with Store.open(str(store)) as db:
        sweeps = Sweeps(db)
        runs = sweeps.runs("nightly")
        assert [r.status for r in runs] == ["clean", "clean", "regression"]
        assert sweeps.baseline("nightly").seq == runs[0].seq  # type: ignore[union-attr]
        assert [h.good for h in sweeps.hunts(runs[-1].id)] == [good]
        # the confirmation ran the baseline's commit beside the current one
        trials = db.trials(third["campaign"])
        assert {t.levels.get("build") for t in trials} == {"current", "baseline"}

    code, refused = run_sweep_cli(path, store, "--accept")
    assert code == 1 and not refused["accepted"]
