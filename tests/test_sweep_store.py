"""The sweeps in the store (``db.sweeps``), every test on a SQLite file and on a fresh database of
the run's real PostgreSQL server: runs and their seq, the baseline, the sweep's lock between two
orchestrators (two Store objects on one URL), a dead holder's lock taken over, another host's
refused, skipped and missed runs, hunts, and migration 0008 on a store made at 0007."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from functools import partial

import pytest
from sqlalchemy import create_engine, inspect, text

from db.errors import NotFound, StoreError
from db.migrate import current_revision, downgrade, head_revision
from db.store import Store
from db.sweep_lock import SweepLocked
from db.sweep_records import SweepRunRecord
from db.sweeps import Sweeps
from tests.conftest import REPO
from tests.postgres_fixture import BOTH_REAL

SWEEP_TABLES = {"sweep", "sweep_run", "sweep_hunt", "sweep_lock"}
RESULT = {"variants": {"production": "same", "hicache-off": "different"}, "p": float("nan"),
          "exit": 1}


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store.open(store_url) as opened:
        yield opened


@pytest.fixture
def sweeps(store: Store) -> Sweeps:
    return Sweeps(store)


@pytest.fixture
def other(store_url: str, store: Store) -> Iterator[Sweeps]:
    """A second orchestrator on the same store: its own Store, engine and connections."""
    with Store.open(store_url) as opened:
        yield Sweeps(opened)


def sql(url: str, statement: str, **params: object) -> None:
    """A statement on the store behind its API (what another host, or damage, would leave)."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text(statement), params)
    finally:
        engine.dispose()


def finished(sweeps: Sweeps, store: Store, sweep: str, status: str = "clean") -> SweepRunRecord:
    """A run that measured something: started, linked to its campaign, finished."""
    run = sweeps.start_run(sweep)
    campaign = f"{sweep}-{run.seq}"
    store.create_campaign(campaign, campaign, {}, "sweep.yaml")
    sweeps.set_campaign(run.id, campaign)
    sweeps.finish_run(run.id, status, {"exit": 0})
    return sweeps.get_run(run.id)


def test_a_run_s_life_and_its_seq(sweeps: Sweeps, store: Store) -> None:
    assert sweeps.ensure("nightly") == sweeps.ensure("nightly")  # created once
    run = sweeps.start_run("nightly", trigger="schedule", schedule="every-night")
    assert (run.sweep, run.seq, run.status, run.trigger, run.schedule) == (
        "nightly", 1, "running", "schedule", "every-night")
    assert run.campaign_id is None and run.finished_at is None and not run.finished
    assert run.started_at.tzinfo == UTC and not run.accepted
    store.create_campaign("c1", "nightly", {}, "sweep.yaml")
    sweeps.set_campaign(run.id, "c1")
    sweeps.set_facts(run.id, {"gpu-a": {"driver": "550.54", "gpus": 8}})
    sweeps.finish_run(run.id, "regression", RESULT, reason="hicache-off regressed")
    done = sweeps.get_run(run.id)
    assert (done.status, done.campaign_id, done.reason) == ("regression", "c1",
                                                            "hicache-off regressed")
    assert done.result == {**RESULT, "p": None}  # JSON has no NaN
    assert done.result is not None and list(done.result["variants"]) == ["production",
                                                                         "hicache-off"]
    assert done.facts == {"gpu-a": {"driver": "550.54", "gpus": 8}}
    assert done.finished_at is not None and done.finished_at.tzinfo == UTC
    assert done.finished_at >= done.started_at and done.finished
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.status = "clean"  # type: ignore[misc]

    again = sweeps.start_run("nightly")  # the lock went with the end of the first
    skipped = sweeps.record_skipped("other", trigger="manual", schedule=None, reason="held")
    assert (again.seq, again.trigger, skipped.seq) == (2, "manual", 1)  # seq is per sweep
    assert [r.seq for r in sweeps.runs("nightly")] == [1, 2]
    assert [s.name for s in sweeps.list_sweeps()] == ["nightly", "other"]

    with pytest.raises(StoreError, match=r"sweep run .* is regression, not running"):
        sweeps.finish_run(run.id, "clean")
    with pytest.raises(StoreError, match="'running' is not a status a run ends with"):
        sweeps.finish_run(again.id, "running")
    with pytest.raises(StoreError, match="unknown sweep trigger 'cron'"):
        sweeps.start_run("nightly", trigger="cron")
    with pytest.raises(NotFound, match="no campaign 'nope'"):
        sweeps.set_campaign(again.id, "nope")
    with pytest.raises(NotFound, match="no sweep run 999"):
        sweeps.get_run(999)
    with pytest.raises(NotFound, match="no sweep 'nope'"):
        sweeps.runs("nope")
    assert sweeps.baseline("nope") is None


def test_the_baseline_is_the_last_accepted_run(sweeps: Sweeps, store: Store) -> None:
    assert sweeps.baseline("nightly") is None
    one, two = finished(sweeps, store, "nightly"), finished(sweeps, store, "nightly", "failed")
    assert sweeps.baseline("nightly") is None  # finished is not accepted
    assert sweeps.accept(two.id).accepted
    first = sweeps.accept(one.id)
    assert first.accepted_at is not None and first.accepted_at.tzinfo == UTC
    baseline = sweeps.baseline("nightly")
    assert baseline is not None and baseline.id == one.id  # accepted last, though older
    three = sweeps.start_run("nightly", baseline_run_id=one.id)
    assert three.baseline_run_id == one.id
    with pytest.raises(StoreError, match="still running: only a finished run"):
        sweeps.accept(three.id)
    sweeps.finish_run(three.id, "failed", reason="the deploy failed")
    with pytest.raises(StoreError, match="no campaign: it measured nothing"):
        sweeps.accept(three.id)
    sweeps.accept(two.id)  # accepted again: the baseline again
    assert (b := sweeps.baseline("nightly")) is not None and b.id == two.id
    elsewhere = finished(sweeps, store, "weekly")
    with pytest.raises(StoreError, match="is a run of sweep 'weekly', not of 'nightly'"):
        sweeps.start_run("nightly", baseline_run_id=elsewhere.id)


def test_a_second_live_run_is_refused(sweeps: Sweeps, other: Sweeps) -> None:
    held = sweeps.start_run("nightly")
    with pytest.raises(SweepLocked) as refused:
        other.start_run("nightly")
    assert refused.value.run_id == held.id and refused.value.sweep == "nightly"
    assert refused.value.holder.startswith(f"{socket.gethostname()} pid {os.getpid()} since ")
    assert "one run of a sweep at a time" in str(refused.value)
    assert isinstance(refused.value, StoreError)  # a sentence, never a traceback
    skipped = other.record_skipped("nightly", trigger="schedule", schedule="every-night",
                                   reason=str(refused.value))
    assert (skipped.seq, skipped.status, skipped.campaign_id) == (2, "skipped", None)
    assert [r.status for r in sweeps.runs("nightly")] == ["running", "skipped"]
    assert other.start_run("weekly").seq == 1  # another sweep has its own lock
    sweeps.finish_run(held.id, "clean")
    assert other.start_run("nightly").seq == 3


def test_orchestrators_racing_for_one_sweep_get_one_run(store_url: str, store: Store) -> None:
    """Four orchestrators at once: one run, three refusals; four skips at once take four seqs;
    four finding the same dead holder's lock: one takes it over. No race shows a raw error."""
    opened = [Store.open(store_url) for _ in range(4)]
    try:
        every = [Sweeps(one) for one in opened]
        runs = race([partial(s.start_run, "nightly") for s in every])
        assert sorted(type(r).__name__ for r in runs) == [
            "SweepLocked", "SweepLocked", "SweepLocked", "SweepRunRecord"], runs
        skips = race([partial(s.record_skipped, "nightly", trigger="manual", schedule=None,
                              reason="held") for s in every])
        assert sorted(r.seq for r in skips if isinstance(r, SweepRunRecord)) == [2, 3, 4, 5], skips
        sql(store_url, "UPDATE sweep_lock SET pid_start = pid_start + 1")  # its holder: gone
        taken = race([partial(s.start_run, "nightly") for s in every])
        assert sorted(type(r).__name__ for r in taken) == [
            "SweepLocked", "SweepLocked", "SweepLocked", "SweepRunRecord"], taken
        assert [r.status for r in every[0].runs("nightly")] == [
            "interrupted", *["skipped"] * 4, "running"]  # taken over once
    finally:
        for one in opened:
            one.close()


def race(calls: list[Callable[[], object]]) -> list[object]:
    """Each call in its own thread, all released together; what each returned or raised."""
    start = threading.Barrier(len(calls))
    found: list[object] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait()
        try:
            found[i] = calls[i]()
        except Exception as exc:  # what the caller would see: shown by the assertion
            found[i] = exc
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found


def _dead_orchestrator(url: str) -> None:
    """A real orchestrator process that starts a run of the sweep and exits holding its lock."""
    script = ("import sys\nfrom db.store import Store\nfrom db.sweeps import Sweeps\n"
              "print(Sweeps(Store.open(sys.argv[1])).start_run('nightly').id)\n")
    done = subprocess.run([sys.executable, "-c", script, url], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def _reused_pid(url: str) -> None:
    """Our own live pid, recorded with another start time: a later process reusing the pid."""
    with Store.open(url) as store:
        Sweeps(store).start_run("nightly")
    sql(url, "UPDATE sweep_lock SET pid_start = pid_start + 1")


def _rebooted(url: str) -> None:
    """A live pid of this host, recorded under an earlier boot of it."""
    with Store.open(url) as store:
        Sweeps(store).start_run("nightly")
    sql(url, "UPDATE sweep_lock SET boot_id = 'an-earlier-boot'")


@pytest.mark.parametrize("died", [_dead_orchestrator, _reused_pid, _rebooted],
                         ids=["pid-gone", "pid-reused", "rebooted"])
@pytest.mark.parametrize("store_url", BOTH_REAL, indirect=True)  # pid-gone runs a process
def test_a_dead_holder_s_lock_on_this_host_is_taken_over(
        died: Callable[[str], None], store_url: str, sweeps: Sweeps) -> None:
    died(store_url)
    [dead] = sweeps.runs("nightly")
    assert dead.status == "running"
    run = sweeps.start_run("nightly")
    assert (run.seq, run.status) == (2, "running")
    interrupted = sweeps.get_run(dead.id)
    assert interrupted.status == "interrupted" and interrupted.finished_at is not None
    assert interrupted.reason is not None and "died holding the sweep" in interrupted.reason
    with pytest.raises(SweepLocked) as refused:  # the new run holds it now
        sweeps.start_run("nightly")
    assert refused.value.run_id == run.id


def test_a_lock_held_from_another_host_is_refused_until_broken(store_url: str,
                                                               sweeps: Sweeps) -> None:
    held = sweeps.start_run("nightly")
    # pid 1 lives here: no matter
    sql(store_url, "UPDATE sweep_lock SET host = 'gpu-box-2', pid = 1")
    with pytest.raises(SweepLocked, match=r"held by its run .* \(gpu-box-2 pid 1 since .*"
                                          r"another host is never taken over"):
        sweeps.start_run("nightly")
    with pytest.raises(StoreError, match="not held by its run 999: nothing was broken"):
        sweeps.break_lock("nightly", 999)
    broken = sweeps.break_lock("nightly", held.id)
    assert broken.status == "interrupted" and broken.reason == "its lock was broken by hand"
    assert sweeps.start_run("nightly").seq == 2


def test_skipped_and_missed_runs_never_take_the_lock(sweeps: Sweeps) -> None:
    held = sweeps.start_run("nightly")
    slot = datetime(2026, 12, 3, 3, 0, tzinfo=timezone(timedelta(hours=1)))
    missed = sweeps.record_missed("nightly", schedule="every-night", slot=slot)
    skipped = sweeps.record_skipped("nightly", trigger="schedule", schedule="every-night",
                                    reason="run 1 held the sweep")
    assert (missed.status, missed.trigger, missed.schedule, missed.seq) == (
        "missed", "schedule", "every-night", 2)
    assert missed.slot == slot and missed.slot is not None and missed.slot.tzinfo == UTC
    assert missed.reason == "no run started at its scheduled time"
    assert (skipped.status, skipped.seq, skipped.reason) == ("skipped", 3, "run 1 held the sweep")
    for row in (missed, skipped):
        assert row.finished and row.finished_at is not None and row.campaign_id is None
        with pytest.raises(StoreError, match="with no campaign"):
            sweeps.accept(row.id)
    with pytest.raises(SweepLocked):  # still the first run's
        sweeps.start_run("nightly")
    sweeps.finish_run(held.id, "inconclusive")
    with pytest.raises(StoreError, match="has no time zone"):
        sweeps.record_missed("nightly", schedule="every-night", slot=datetime(2026, 12, 3, 3))


def test_hunts_of_a_run(sweeps: Sweeps, store: Store) -> None:
    run = finished(sweeps, store, "nightly", "regression")
    for name in ("hunt-1", "hunt-2"):
        store.create_campaign(name, name, {}, "sweep.yaml")
    first = sweeps.add_hunt(run.id, "hunt-1", good="production", bad="hicache-off")
    sweeps.add_hunt(run.id, "hunt-2", good="production", bad="index-bf16")
    assert first.created_at.tzinfo == UTC and (first.run_id, first.campaign_id) == (run.id,
                                                                                   "hunt-1")
    assert [(h.campaign_id, h.good, h.bad) for h in sweeps.hunts(run.id)] == [
        ("hunt-1", "production", "hicache-off"), ("hunt-2", "production", "index-bf16")]
    with pytest.raises(NotFound, match="no campaign 'nope'"):
        sweeps.add_hunt(run.id, "nope", good="a", bad="b")
    with pytest.raises(NotFound, match="no sweep run 999"):
        sweeps.hunts(999)


def test_a_database_failure_is_a_store_error(store_url: str, sweeps: Sweeps, store: Store) -> None:
    run = finished(sweeps, store, "nightly")
    sql(store_url, "DROP TABLE sweep_hunt")  # damage behind the store's back
    store.create_campaign("hunt", "hunt", {}, "sweep.yaml")
    with pytest.raises(StoreError, match=f"cannot record a hunt of sweep run {run.id}: .*"
                                         "sweep_hunt"):
        sweeps.add_hunt(run.id, "hunt", good="a", bad="b")


def test_0008_upgrades_a_store_made_at_0007_and_goes_back(store_url: str, store: Store) -> None:
    store.create_campaign("c1", "before sweeps", {}, "campaign.yaml")
    store.close()
    downgrade(store_url, "0007")
    assert tables(store_url).isdisjoint(SWEEP_TABLES) and current_revision(store_url) == "0007"
    with Store.open(store_url) as again:  # a store at 0007, opened: upgraded, its campaign kept
        assert current_revision(store_url) == "0008" and tables(store_url) >= SWEEP_TABLES
        assert again.get_campaign("c1").name == "before sweeps"
        sweeps = Sweeps(again)
        run = sweeps.start_run("nightly")
        sweeps.set_campaign(run.id, "c1")
        sweeps.finish_run(run.id, "clean")
        sweeps.accept(run.id)
    downgrade(store_url, "0007")  # the sweeps go with their tables; the campaign stays
    assert tables(store_url).isdisjoint(SWEEP_TABLES)
    with Store.open(store_url) as again:
        assert again.get_campaign("c1").status == "running"
        assert Sweeps(again).list_sweeps() == []


def tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.real
def test_two_orchestrators_opening_a_new_postgresql_store_at_once(postgres_url: str) -> None:
    """Both create the tables at the same moment: one migrates, the other waits and finds it
    done (a migration lock), neither fails."""
    start = threading.Barrier(4)
    failures: list[BaseException] = []

    def open_store() -> None:
        start.wait()
        try:
            Store.open(postgres_url).close()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert current_revision(postgres_url) == head_revision()
