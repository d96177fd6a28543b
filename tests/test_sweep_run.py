"""`bisect sweep` end to end on twins: a clean build raises no alert run after run; a new
commit that brings the race back is detected, confirmed against the baseline's commit put back
on the same pool, exits 1, is refused as a baseline, and the hunt names the commit.

The runs are ``real_sweep``'s (tests/sweep_support.py), made once per test session: the sweep
report's end-to-end test reads the same store."""

from __future__ import annotations

import pytest

from db.store import Store
from db.sweeps import Sweeps
from tests.sweep_support import (
    RealSweep,
    git,
    real_sweep_fixture,  # noqa: F401 - the session's runs
)

pytestmark = pytest.mark.real


def test_a_sweep_finds_confirms_and_hunts_a_regression(real_sweep: RealSweep) -> None:
    swept = real_sweep
    good, bad, head = swept.good, swept.bad, swept.head
    code, first = swept.codes[0], swept.first
    assert code == 0, first
    assert first["status"] == "clean" and first["accepted"]
    assert "no baseline yet" in first["reason"]
    assert {v["state"] for v in first["variants"]} == {"new"}

    code, second = swept.codes[1], swept.second
    assert code == 0, second
    assert second["status"] == "clean"
    assert {v["state"] for v in second["variants"]} == {"clean"}, second["variants"]
    assert second["commits"] == {"baseline": good, "now": good}

    code, third = swept.codes[2], swept.third
    assert code == 1, third
    assert third["status"] == "regression"
    assert not third["accepted"]  # --accept of a regression, without --force: refused
    risky = next(v for v in third["variants"] if v["name"] == "hicache-on")
    assert risky["state"] == "regression" and risky["regressed"] == ["corruption"]
    assert risky["confirm_trials"] >= 2
    assert next(v for v in third["variants"] if v["name"] == "production")["state"] == "clean"
    assert third["commits"] == {"baseline": good, "now": head}
    hunt = third["hunt"]
    assert hunt["first_bad"] == [bad[:12]], hunt
    assert git(swept.tree, "rev-parse", "HEAD") == head  # the tree as found
    written = swept.page.read_text()  # the run's report, and its hunt's beside it
    assert "REGRESSION" in written and bad[:12] in written
    assert "<script>window.PWNED" not in written  # head's subject, as text
    assert (swept.page.parent / f"hunt-{hunt['campaign']}.html").is_file()

    with Store.open(str(swept.store)) as db:
        sweeps = Sweeps(db)
        runs = sweeps.runs("nightly")
        assert [r.status for r in runs] == ["clean", "clean", "regression"]
        assert sweeps.baseline("nightly").seq == runs[0].seq  # type: ignore[union-attr]
        assert [h.good for h in sweeps.hunts(runs[-1].id)] == [good]
        # the confirmation ran the baseline's commit beside the current one
        trials = db.trials(third["campaign"])
        assert {t.levels.get("build") for t in trials} == {"current", "baseline"}
