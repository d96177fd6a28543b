"""Independent draws: each campaign (each sweep run, each hunt) draws its own run seed, stored
with it, and its trials' seeds come from it; a resume goes on with it; `--seed` (or a seed the
file sets) replays a draw on purpose. Before, every run of one file sent the same sessions trial
by trial: "N quiet runs" were one draw."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from db.records import SessionRow, TrialRecord, TrialTiming
from db.store import Store
from experiments.campaign import Campaign
from experiments.sweep import load_sweep
from experiments.twin.faults import FaultModel
from experiments.twin.simulate import server_view, session_outcomes
from orchestrator.cli import app
from orchestrator.demo import twin_pool
from orchestrator.executor.base import TrialOrder, TrialReport
from orchestrator.executor.driver import drive
from orchestrator.reports.campaign.provenance import campaign_file
from orchestrator.stored import (
    SEED_BITS,
    campaign_of,
    campaign_seed,
    create_campaign,
    derived_seed,
    trial_seed,
)
from orchestrator.sweeps.run import run_seed
from tests.support.twins import FAST
from tests.sweep_support import (
    RealSweep,
    commit_faults,
    real_sweep_fixture,  # noqa: F401 - the session's runs
    sweep_file,
)

SESSIONS = 12
# a leak in about a third of the sessions of any variant, drawn from each session's key
NOISE = {"seed": 7, "rules": [{"name": "noise", "probability": 0.35, "effect": "leak",
                               "markup": "dsml"}]}


def spec(workdir: Path, seed: int | None = None, repeats: int = 2) -> dict[str, Any]:
    """A factorial campaign over one factor (4 trials with ``repeats`` 2) on one twin pool;
    ``seed``: the workload's, set in the file (None: not set)."""
    workdir.mkdir(parents=True, exist_ok=True)
    model = workdir / "faults.yaml"
    model.write_text(yaml.safe_dump(NOISE))
    pool = twin_pool("p", "here", model, latency_ms=2)
    pool["services"][0]["start"] += ["--twin-startup-delay", "0", *FAST]
    workload: dict[str, Any] = {"sessions": SESSIONS, "rounds": 1, "timeout_s": 20}
    if seed is not None:
        workload["seed"] = seed
    return {
        "name": "draws",
        "nodes": [{"name": "here", "workdir": str(workdir / "services")}],
        "pools": [pool],
        "factors": [{"name": "hicache", "levels": {
            "off": None, "on": {"flags": ["--enable-hierarchical-cache"]}}}],
        "workload": workload,
        "strategy": {"kind": "factorial", "repeats": repeats},
    }


class TwinDraws:
    """An ``Executor`` whose one pool draws each trial's sessions as the twin draws them
    (``experiments.twin.simulate``: the fault model's stable draw of each session's key, which
    the trial's seed makes). ``stop_after``: reports given before a Ctrl-C; ``lost``: the
    reports (1, 2, ...) that are an infrastructure failure instead."""

    def __init__(self, stop_after: int | None = None, lost: Collection[int] = ()) -> None:
        self.model = FaultModel.model_validate(NOISE)
        self.view = server_view([], {})
        self.orders: list[tuple[str, TrialOrder]] = []
        self.reports, self.stop_after, self.lost = 0, stop_after, lost

    @property
    def busy(self) -> Collection[str]:
        return {pool for pool, _ in self.orders}

    def submit(self, pool: str, order: TrialOrder) -> None:
        self.orders.append((pool, order))

    def next_report(self) -> tuple[str, TrialReport]:
        if self.reports == self.stop_after:
            raise KeyboardInterrupt  # the trial submitted last is left running
        pool, order = self.orders.pop(0)
        self.reports += 1
        if self.reports in self.lost:
            return pool, TrialReport(order.trial_id, "the node went away", TrialTiming(0.0),
                                     failure="infrastructure")
        outcomes = session_outcomes(self.model, self.view, sessions=SESSIONS, seed=order.seed)
        sessions = [SessionRow(i, f"s{order.seed}-{i}", o.value, 1, None, None, 0.0)
                    for i, o in enumerate(outcomes)]
        return pool, TrialReport(order.trial_id, None, TrialTiming(wall_s=0.0), sessions)

    def shutdown(self) -> None:
        self.orders.clear()


def drawn(trials: list[TrialRecord]) -> dict[int, tuple[dict[str, str], dict[str, int]]]:
    """Each done trial's levels and counts, by its seed."""
    return {t.seed: (t.levels, t.counts) for t in trials if t.status == "done"}


def draws(seed: int, trials: list[TrialRecord]) -> list[int]:
    """The done trials' seeds, as the numbers of the run's draws they are (1, 2, ...)."""
    return sorted(t.seed - trial_seed(seed, 0) for t in trials if t.status == "done")


@pytest.mark.real
def test_each_campaign_draws_its_own_run_seed_and_stores_it(tmp_path: Path) -> None:
    campaign = Campaign.model_validate(spec(tmp_path))
    with Store.open(str(tmp_path / "bisect.db")) as store:
        ids = [create_campaign(store, campaign, "c.yaml") for _ in range(3)]
        seeds = [campaign_seed(store, campaign_id) for campaign_id in ids]
        assert len(set(seeds)) == 3, seeds  # three runs, three draws (1 in 2^31 to collide)
        assert all(0 < seed < 2**SEED_BITS for seed in seeds)
        # stored as the campaign's workload.seed: every later read (a resume) has it
        assert [store.get_campaign(i).spec["workload"]["seed"] for i in ids] == seeds
        assert campaign_of(store, ids[0]).workload.seed == seeds[0]
        for campaign_id, seed in zip(ids, seeds, strict=True):
            drive(store, campaign_id, campaign_of(store, campaign_id), TwinDraws())
            trials = store.trials(campaign_id)
            assert [t.seed for t in trials] == [trial_seed(seed, t.seq) for t in trials]  # 1, 2...
        by_run = [{t.seed for t in store.trials(i)} for i in ids]
        assert not by_run[0] & by_run[1] and not by_run[1] & by_run[2]  # no session shared


@pytest.mark.real
def test_a_seed_set_in_the_file_or_given_replays_the_draw(tmp_path: Path) -> None:
    explicit = Campaign.model_validate(spec(tmp_path, seed=0))  # set, even to the default
    unset = Campaign.model_validate(spec(tmp_path))
    with Store.open(str(tmp_path / "bisect.db")) as store:
        again = [create_campaign(store, explicit, "c.yaml") for _ in range(2)]
        assert [campaign_seed(store, i) for i in again] == [0, 0]
        given = [create_campaign(store, unset, "c.yaml", seed=12345) for _ in range(2)]
        given.append(create_campaign(store, explicit, "c.yaml", seed=12345))  # over the file's
        assert [campaign_seed(store, i) for i in given] == [12345] * 3
        for campaign_id in given:
            drive(store, campaign_id, campaign_of(store, campaign_id), TwinDraws())
        first, *others = (drawn(store.trials(i)) for i in given)
        assert len(first) == 4 and all(other == first for other in others)  # seeds and counts
        assert len({tuple(counts.items()) for _, counts in first.values()}) > 1  # not one draw


@pytest.mark.real
def test_a_resume_goes_on_with_the_run_seed(tmp_path: Path) -> None:
    """Interrupted after two trials, resumed: the discarded trial's draw goes to the next trial,
    and the trials that count are the uninterrupted run's of the same seed, draw for draw."""
    campaign = Campaign.model_validate(spec(tmp_path, repeats=3))
    with Store.open(str(tmp_path / "bisect.db")) as store:
        resumed = create_campaign(store, campaign, "c.yaml")
        seed = campaign_seed(store, resumed)
        with pytest.raises(KeyboardInterrupt):
            drive(store, resumed, campaign_of(store, resumed), TwinDraws(stop_after=2))
        assert store.get_campaign(resumed).status == "interrupted"
        assert store.discard_unfinished(resumed)  # as `bisect resume` does first
        drive(store, resumed, campaign_of(store, resumed), TwinDraws())  # read back, as resumed
        assert campaign_seed(store, resumed) == seed
        trials = store.trials(resumed, status=None)
        assert draws(seed, trials) == list(range(1, len(draws(seed, trials)) + 1))
        [discarded] = [t for t in trials if t.status == "discarded"]
        assert [t.seq for t in trials if t.seed == discarded.seed and t.status == "done"] == \
            [discarded.seq + 1]  # the next trial sends the sessions it would have sent

        whole = create_campaign(store, campaign, "c.yaml", seed=seed)
        drive(store, whole, campaign_of(store, whole), TwinDraws())
        after, before = drawn(trials), drawn(store.trials(whole))
        assert len(after) >= 6 and after == before


@pytest.mark.real
def test_a_retried_trial_sends_the_failed_attempt_s_sessions(tmp_path: Path) -> None:
    """An infrastructure failure, retried: the retry takes the failed attempt's draw, so a
    replay without the failure counts the same trials, draw for draw."""
    campaign = Campaign.model_validate(spec(tmp_path))
    with Store.open(str(tmp_path / "bisect.db")) as store:
        retried = create_campaign(store, campaign, "c.yaml", seed=99)
        drive(store, retried, campaign_of(store, retried), TwinDraws(lost={2}))
        trials = store.trials(retried, status=None)
        [failed] = [t for t in trials if t.status == "failed"]
        assert [t.seq for t in trials if t.seed == failed.seed] == [2, 3]
        assert draws(99, trials) == [1, 2, 3, 4]
        clean = create_campaign(store, campaign, "c.yaml", seed=99)
        drive(store, clean, campaign_of(store, clean), TwinDraws())
        assert drawn(trials) == drawn(store.trials(clean))


@pytest.mark.pure
def test_a_trial_seed_always_fits_the_store() -> None:
    assert trial_seed(5000, 7) == 5000 * 1_000_003 + 7  # what stored campaigns' trials used
    assert trial_seed(0, 3) == 3 and trial_seed(-2, 1) == -2 * 1_000_003 + 1
    for seed in (2**63 - 1, -(2**63), 2**62 + 12345):
        assert -(2**63) <= trial_seed(seed, 9) < 2**63  # wrapped, never an overflow


@pytest.mark.real
def test_the_report_s_campaign_file_replays_the_draw(tmp_path: Path) -> None:
    campaign = Campaign.model_validate(spec(tmp_path, seed=0))
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "c.yaml", seed=0)
        shown = yaml.safe_load(campaign_file(campaign_of(store, campaign_id)))
        assert shown["workload"]["seed"] == 0  # the default, shown all the same
        fresh = create_campaign(store, Campaign.model_validate(spec(tmp_path)), "c.yaml")
        shown = yaml.safe_load(campaign_file(campaign_of(store, fresh)))
        assert shown["workload"]["seed"] == campaign_seed(store, fresh)
        replay = Campaign.model_validate(shown)  # the file as the report shows it
        assert campaign_seed(store, create_campaign(store, replay, "r.yaml")) == \
            shown["workload"]["seed"]


@pytest.mark.real
def test_each_sweep_run_has_its_own_seed(tmp_path: Path) -> None:
    """Without a seed in the sweep file each run's campaign draws one; with one, run k's is
    derived from it and k (reproducible, one draw per run); `--seed` gives it exactly."""
    tree = tmp_path / "src"
    commit_faults(tree, 0.0, "first")
    path = sweep_file(tmp_path, tree)
    assert run_seed(load_sweep(path), 1) is None  # create_campaign draws it
    data = yaml.safe_load(path.read_text())
    data["workload"]["seed"] = 42
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    seeded = load_sweep(path)
    seeds = [run_seed(seeded, seq) for seq in (1, 2, 3)]
    assert seeds == [derived_seed(42, "run", seq) for seq in (1, 2, 3)]
    assert len(set(seeds)) == 3 and 42 not in seeds
    assert [run_seed(seeded, seq) for seq in (1, 2, 3)] == seeds  # the sweep's history again
    assert run_seed(seeded, 2, seed=seeds[0]) == seeds[0]  # --seed: run 1's draw, replayed


@pytest.mark.real
def test_real_sweep_runs_and_their_hunt_draw_independently(real_sweep: RealSweep) -> None:
    runs = (real_sweep.first, real_sweep.second, real_sweep.third)
    seeds = [run["seed"] for run in runs]
    assert len(set(seeds)) == 3, seeds
    with Store.open(str(real_sweep.store)) as db:
        assert [campaign_seed(db, run["campaign"]) for run in runs] == seeds
        trial_seeds = [{t.seed for t in db.trials(run["campaign"], status=None)} for run in runs]
        assert not trial_seeds[0] & trial_seeds[1]  # the clean run sent sessions of its own
        hunt = real_sweep.third["hunt"]["campaign"]
        assert campaign_seed(db, hunt) == derived_seed(seeds[2], "hunt")
        assert not {t.seed for t in db.trials(hunt, status=None)} & trial_seeds[2]


def _run(path: Path, store: Path, *args: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`bisect run PATH --json ARGS`, then `bisect show --json` of its campaign."""
    runner = CliRunner()
    done = runner.invoke(app, ["run", str(path), "--store", str(store), "--json", *args])
    assert done.exit_code in (0, 3), done.output
    verdict = json.loads(done.stdout)
    assert f"seed: {verdict['seed']} " in done.stderr
    shown = runner.invoke(app, ["show", verdict["campaign"], "--store", str(store), "--json"])
    assert shown.exit_code == 0, shown.output
    return verdict, json.loads(shown.stdout)


@pytest.mark.real
def test_bisect_run_draws_anew_and_seed_replays_on_twins(ray_cluster: None,
                                                         tmp_path: Path) -> None:
    path, store = tmp_path / "campaign.yaml", tmp_path / "bisect.db"
    path.write_text(yaml.safe_dump(spec(tmp_path, repeats=1)))
    first, first_trials = _run(path, store)
    second, second_trials = _run(path, store)
    assert first["seed"] != second["seed"]
    assert {t["seed"] for t in first_trials}.isdisjoint(t["seed"] for t in second_trials)
    replay, replay_trials = _run(path, store, "--seed", str(first["seed"]))
    assert replay["seed"] == first["seed"]

    def counted(trials: list[dict[str, Any]]) -> list[tuple[int, dict[str, str], Any]]:
        """The trials that count, by draw (a retry, as under load, takes its attempt's)."""
        return sorted((t["seed"], t["levels"], t["counts"]) for t in trials
                      if t["status"] == "done")

    assert len(counted(first_trials)) == 2 and counted(replay_trials) == counted(first_trials)
    verdict = CliRunner().invoke(app, ["verdict", replay["campaign"], "--store", str(store),
                                       "--json"])
    assert json.loads(verdict.stdout)["seed"] == first["seed"]
    table = CliRunner().invoke(app, ["show", replay["campaign"], "--store", str(store)]).stdout
    assert f"seed {first['seed']} (`--seed {first['seed']}`" in table
