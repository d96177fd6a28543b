"""`bisect optimize` on the real loop (driver, store, Optuna study next to it) over a simulated
space with a planted trade-off (bench/knob_space.py): the fastest configurations are corrupt,
the best safe one is known. Both Optuna generations, the samplers, failed deployments, a
driver killed with SIGKILL and resumed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy.exc
from optuna.trial import TrialState

from bench.knob_space import (
    BEST,
    KNOWN_GOOD,
    PRODUCTION,
    KnobPools,
    corruption,
    knob_campaign,
    run_search,
    throughput,
)
from db.store import Store
from orchestrator.executor.base import TrialReport
from orchestrator.search.study import DEPLOY_FAILED, ENDED, SEQ, study_name
from orchestrator.stored import verdict_of
from tests.support.knob_search import SEARCH, SHORT, memory_search
from tests.support.optimize_campaigns import (
    OptimizeCampaigns,
    optimize_campaigns_fixture,  # noqa: F401 - the stored searches
)
from tests.support.optimize_planted import Recorder
from tests.support.scratch import in_memory

ROOT = Path(__file__).resolve().parents[1]
OPTUNA4 = Path(sys.prefix) / "optuna4"  # the Makefile installs Optuna 4.9 there


def study_of(directory: Path, campaign_id: str = "knobs") -> optuna.Study:
    return optuna.load_study(study_name=study_name(campaign_id),
                             storage=f"sqlite:///{directory / 'bisect.optuna.db'}")


def assert_never_unsafe(verdict: dict[str, Any]) -> None:
    """Every configuration reported safe is safe in truth; every corrupt one measured is
    rejected, not ranked."""
    search = verdict["optimize"]
    assert all(corruption(row["levels"]) == 0 for row in search["ranked"])
    if search["best"] is not None:
        assert corruption(search["best"]) == 0


@pytest.fixture(scope="module")
def searched() -> Iterator[tuple[Path, dict[str, Any]]]:
    with in_memory() as directory:
        yield directory, run_search(str(directory), SEARCH, seed=2)


@pytest.fixture
def memory() -> Iterator[Path]:
    """A directory in memory for a search's store (tests/support/scratch.py)."""
    with in_memory() as directory:
        yield directory


@pytest.mark.pure
def test_the_search_names_the_best_safe_configuration_within_its_interval(
        searched: tuple[Path, dict[str, Any]]) -> None:
    _, verdict = searched
    search = verdict["optimize"]
    assert verdict["status"] == "optimum"
    assert_never_unsafe(verdict)
    best = search["ranked"][0]
    assert best["levels"] == search["best"] and best["confirmed"] and best["trials"] >= 3
    assert best["levels"]["hicache"] == "on" and best["levels"]["max_running"] == "96"
    low, high = best["objectives"][0]["ci"]
    assert low <= throughput(BEST) <= high  # the true best lies within the answer's interval
    assert best["corruption"]["upper"] < 0.05 and best["corruption"]["margin"] > 0


@pytest.mark.pure
def test_fast_corrupt_configurations_are_rejected_with_why(
        searched: tuple[Path, dict[str, Any]]) -> None:
    _, verdict = searched
    rejected = verdict["optimize"]["rejected"]
    assert rejected, "the search never met the trap"
    fastest = rejected[0]
    assert corruption(fastest["levels"]) > 0
    assert fastest["objectives"][0]["mean"] > verdict["optimize"]["ranked"][0]["objectives"][0][
        "mean"] * 0.9
    assert any(reason.startswith("corruption ") for reason in fastest["why"])
    # A configuration certain to be corrupt stopped its trial early
    assert verdict["optimize"]["trials"]["stopped_early"] >= 1
    assert all(row["stopped_early"] == 0 for row in verdict["optimize"]["ranked"])


@pytest.mark.pure
def test_production_and_known_good_are_measured_first(
        searched: tuple[Path, dict[str, Any]]) -> None:
    directory, _ = searched
    with Store.open(str(directory / "bisect.db")) as store:
        first = [t.levels for t in sorted(store.trials("knobs", status=None),
                                          key=lambda t: t.seq)][:2]
    assert first == [PRODUCTION, KNOWN_GOOD]


@pytest.mark.pure
def test_the_study_holds_every_trial_with_its_constraints(
        searched: tuple[Path, dict[str, Any]]) -> None:
    directory, verdict = searched
    study = study_of(directory)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == verdict["cost"]["trials"]
    assert sorted(t.user_attrs[SEQ] for t in complete) == list(range(1, len(complete) + 1))
    assert all(set(t.constraints) == {"corruption", "wedging"} for t in complete)
    infeasible = [t for t in complete if any(v > 0 for v in t.constraints.values())]
    assert infeasible and all(corruption(
        {k: str(v) for k, v in t.params.items()} | {"mem": f"{t.params['mem']:g}"}) > 0
        for t in infeasible)
    # Optuna's best counts feasible trials only
    assert all(v <= 0 for v in study.best_trial.constraints.values())
    assert os.stat(directory / "bisect.optuna.db").st_mode & 0o077 == 0


@pytest.mark.pure
def test_two_objectives_give_the_pareto_front(optimize_campaigns: OptimizeCampaigns) -> None:
    """On the report tests' stored search of two objectives (run once a test session)."""
    with Store.open(optimize_campaigns.store_arg) as store:
        verdict = verdict_of(store, optimize_campaigns.optimum).to_json()
    search = verdict["optimize"]
    assert_never_unsafe(verdict)
    front = search["pareto"]
    assert len(front) >= 2 and all(row["pareto"] for row in search["ranked"][:len(front)])
    for a in front:  # no member of the front beats another on both objectives
        for b in front:
            better = (a["objectives"][0]["mean"] > b["objectives"][0]["mean"]
                      and a["objectives"][1]["mean"] < b["objectives"][1]["mean"])
            assert not better
    assert len(optimize_campaigns.studies[optimize_campaigns.optimum].directions) == 2


def assert_every_trial_told(study: optuna.Study, verdict: dict[str, Any], sampler: str) -> None:
    """Every stored trial was told to the study, as a trial of its own, and the verdict
    names the sampler."""
    told = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(told) == verdict["cost"]["trials"]
    assert verdict["optimize"]["sampler"] == sampler


@pytest.mark.pure
def test_the_gp_sampler(memory: Path) -> None:
    """(random: test_a_failed_deployment_is_a_failed_trial)"""
    strategy = {**SHORT, "trials": 9, "sampler": "gp", "startup_trials": 6}
    search = memory_search(strategy)
    verdict = run_search(str(memory), strategy, seed=3, search=search)
    assert_never_unsafe(verdict)
    assert verdict["cost"]["trials"] >= 9
    assert_every_trial_told(search.study, verdict, "gp")


@pytest.mark.real
def test_optuna_4_constraints_func(tmp_path: Path) -> None:
    """The same search on Optuna 4.9, where samplers take constraints_func (5.0 deprecates
    it for trial.set_constraint): the constraints reach the study and steer the answer."""
    assert (OPTUNA4 / "optuna").is_dir(), "make test installs Optuna 4.9 beside the venv"
    env = {**os.environ, "PYTHONPATH": f"{OPTUNA4}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-m", "bench.knob_space",
                           str(tmp_path), json.dumps(SHORT), "1"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["optuna"] == "4.9.0" and optuna.__version__.startswith("5.")
    verdict = answer["verdict"]
    assert verdict["status"] == "optimum"
    assert_never_unsafe(verdict)
    script = ("import optuna, sys;"
              "s = optuna.load_study(study_name=sys.argv[1], storage=sys.argv[2]);"
              "t = [x for x in s.trials if x.state.name == 'COMPLETE'];"
              "print(sum(1 for x in t if x.system_attrs.get('constraints')), len(t))")
    counted = subprocess.run([sys.executable, "-c", script, study_name("knobs"),
                              f"sqlite:///{tmp_path / 'bisect.optuna.db'}"], env=env,
                             capture_output=True, text=True, timeout=120, check=True)
    with_constraints, complete = map(int, counted.stdout.split())
    assert with_constraints == complete == verdict["cost"]["trials"]


class FailingDeploys(KnobPools):
    """Deployments of the largest chunk fail, as a variant that cannot start does."""

    def next_report(self) -> tuple[str, TrialReport]:
        name, order = self.orders[0]
        if order.levels["chunk"] != "8192":
            return super().next_report()
        self.orders.popleft()
        from db.records import TrialTiming

        return name, TrialReport(order.trial_id, "server exited during startup",
                                 TrialTiming(wall_s=0.0), failure="variant")


@pytest.mark.pure
def test_a_failed_deployment_is_a_failed_trial(memory: Path) -> None:
    """With the random sampler: also what the search with it must do."""
    strategy = {**SHORT, "sampler": "random"}
    search = memory_search(strategy)
    verdict = run_search(str(memory), strategy, seed=4, pools=FailingDeploys(4), search=search)
    assert_never_unsafe(verdict)
    assert_every_trial_told(search.study, verdict, "random")
    failed = [t for t in search.study.get_trials(states=(TrialState.FAIL,))
              if t.user_attrs.get(ENDED) == DEPLOY_FAILED]
    assert failed and all(t.params["chunk"] == 8192 for t in failed)
    assert all(row["levels"]["chunk"] != "8192" for row in verdict["optimize"]["ranked"])
    # failed deployments count against the search's budget: the search's trials and they
    # spend it exactly (one pool: one trial at a time)
    assert verdict["optimize"]["trials"]["search"] + len(failed) == SHORT["trials"]


def done_trials(store: Path) -> int:
    if not store.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            return int(db.execute("SELECT count(*) FROM trial WHERE status = 'done'")
                       .fetchone()[0])
    except sqlite3.OperationalError:  # its tables not made yet
        return 0


def mid_trial(tmp_path: Path) -> bool:
    try:  # a child stopped inside a write holds its lock: not a moment to kill it in
        return done_trials(tmp_path / "bisect.db") >= 8 and any(
            t.state == TrialState.RUNNING for t in study_of(tmp_path).get_trials())
    except sqlalchemy.exc.OperationalError:
        return False


@pytest.mark.real
def test_a_driver_killed_resumes_the_same_study(tmp_path: Path) -> None:
    """SIGKILL mid-search (no cleanup of any kind), then the loop again on the same store:
    the study goes on where it was, every stored trial told once, nothing lost."""
    code = ("import sys; sys.path.insert(0, sys.argv[2]);"
            "from bench.knob_space import run_search;"
            "from tests.support.knob_search import Slow, SHORT;"
            "run_search(sys.argv[1], SHORT, pools=Slow(5))")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(ROOT)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # read-only: nothing of the child's is created here
            # mid-search and while a trial of the study runs (re-runs after the budget, as
            # production's beside the leader, may be all that runs at a given moment); looked
            # at again with the child stopped, so that what is seen is what the kill hits
            if mid_trial(tmp_path):
                child.send_signal(signal.SIGSTOP)
                if mid_trial(tmp_path):
                    break
                child.send_signal(signal.SIGCONT)
            time.sleep(0.1)
        else:
            pytest.fail("the search did not get going")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    before = study_of(tmp_path).get_trials()
    assert any(t.state == TrialState.RUNNING for t in before)  # killed while one ran
    verdict = run_search(str(tmp_path), SHORT, seed=5)
    after = study_of(tmp_path)
    storage = f"sqlite:///{tmp_path / 'bisect.optuna.db'}"
    assert optuna.get_all_study_names(storage) == [study_name("knobs")]  # the same study
    assert [t.number for t in after.trials[:len(before)]] == [t.number for t in before]
    assert len(after.trials) > len(before)
    assert not after.get_trials(states=(TrialState.RUNNING,))  # the killed one ended
    told = Counter(t.user_attrs[SEQ] for t in after.trials if SEQ in t.user_attrs)
    assert set(told.values()) == {1}  # no stored trial told twice
    assert len(told) == verdict["cost"]["trials"]  # and none missed
    assert verdict["status"] == "optimum"
    assert_never_unsafe(verdict)


@pytest.mark.pure
def test_grid_needs_steps_and_covers_the_space() -> None:
    campaign = knob_campaign({"sampler": "grid"})
    from orchestrator.search.space import grid

    space = grid(campaign.factors)
    assert [len(values) for values in space.values()] == [16, 8, 5, 2]


@pytest.mark.pure
def test_the_log_tells_each_trial_and_where_its_configuration_stood(
        searched: tuple[Path, dict[str, Any]]) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    directory, verdict = searched
    result = CliRunner().invoke(app, ["log", "knobs", "--store", str(directory / "bisect.db")])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == verdict["cost"]["trials"]
    assert " seed " in lines[0] and " seed " in lines[1]
    phases = {phase for line in lines for phase in (" search ", " re-run ", " final ")
              if phase in line}
    assert phases == {" search ", " re-run ", " final "}
    assert any(" unsafe after " in line for line in lines)
    trials = verdict["optimize"]["trials"]
    assert trials["search"] + trials["confirmation"] + trials["final"] == trials["total"] == len(
        lines)
    assert trials["confirmation"] == sum(" re-run " in line for line in lines)
    # the final phase: production and the answer alternated, 3 pairs (confirm_trials)
    assert trials["final"] == 6 == sum(" final " in line for line in lines)
    assert lines[-6:] == [line for line in lines if " final " in line]
    assert verdict["optimize"]["versus_production"]["pairs"] == 3


@pytest.mark.pure
@pytest.mark.parametrize(("trials", "rerun"), [(1, True), (5, True), (6, False)])
def test_a_leader_its_trials_cannot_settle_leaves_the_budget_to_the_sampler(
        trials: int, rerun: bool) -> None:
    from experiments.optimize_config import OptimizeConfig
    from orchestrator.core.evidence import Performance, TrialEvidence
    from orchestrator.core.strategies.optimize import Optimize

    plan = OptimizeConfig(trials=30, confirm_trials=3, max_corruption=0.02)
    speed = Performance(wall_s=1, requests=60, completed=60, output_tokens=600, good_sessions=59,
                        request_throughput=60, output_throughput=600, goodput=59)
    # 1 corrupt in 60 a trial: 1.7%, under the 2% limit (plausible), its bound never under it
    done = [TrialEvidence({"m": "1"}, {"ok": 59, "leak": 1}, performance=speed, seq=i + 1)
            for i in range(trials)]
    search = Recorder()
    Optimize(plan, ["m"], pools=1, search=search).propose(done, [])
    assert search.fixed == [[{"m": "1"}] if rerun else []]
