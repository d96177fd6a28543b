"""The store on real databases. ``TestStore`` runs every test on a SQLite file and on a fresh
database of a real PostgreSQL server (``store_url``, from ``tests.postgres_fixture``)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, inspect, text
from typer.testing import CliRunner

from db import (
    GeneratorRow,
    LogRow,
    MetricRow,
    NotFound,
    SessionRow,
    StepRow,
    Store,
    StoreError,
    TrialTiming,
    migrate,
    variant_key,
)
from db.migrate import current_revision, downgrade, head_revision, upgrade
from db.models import Base
from db.revision import HEAD
from experiments.campaign import Campaign
from orchestrator.cli import app
from orchestrator.stored import create_campaign, evidence, verdict_of
from tests.support.stored import AT, TIMING, campaign_spec, metrics, sessions

TABLES = {"campaign", "variant", "trial", "session", "metric_sample", "log_event", "node_lock",
          "trial_generator", "trial_step", "sweep", "sweep_run", "sweep_hunt", "sweep_lock"}
OUTCOMES = ["ok", "leak", "no_tool", "lost_plot", "bad_args", "error", "timeout"]
BAD = {"index_k": "bf16", "hicache": "on"}
GOOD = {"index_k": "fp8", "hicache": "on"}
LOGS = [
    LogRow(service="prefill", line_no=1, kind="startup", text="The server is fired up"),
    LogRow(service="decode", line_no=412, kind="abort", text="Abort request <b>rid=7</b>"),
]
NODE_A, NODE_B = "a" * 56, "b" * 56  # Ray node ids are 56 hex digits
STEPS = [StepRow("apply", None, AT, 0.5, "ok", {"restarting": ["p"]}),
         StepRow("prove", "p", AT, 0.25, "failed",
                 {"checks": {"argv": ["python", "-m", "x"], "env": {"K": "v\x00"},
                             "markers": {"up": False}}, "problems": ["marker 'up' missing"]}),
         StepRow("stress", None, AT, 0.0, "skipped", {"reason": "an earlier step failed"})]
GENERATORS = [GeneratorRow(NODE_A, "10.0.0.2", sessions=40, finished=12, stopped=True),
              GeneratorRow(NODE_B, "10.0.0.3", sessions=40, finished=40, stopped=False)]
# A trial's figures as StressResult.performance gives them; a NaN is stored as null.
PERFORMANCE: dict[str, Any] = {
    "wall_s": 10.0, "requests": 80, "completed": 80, "output_tokens": 2400, "good_sessions": 80,
    "request_throughput": 8.0, "output_throughput": 240.0, "goodput": float("nan"),
    "ttft": {"p50_ms": 300.0, "p90_ms": 600.0, "p99_ms": 900.0}, "tpot": None, "itl": None,
    "e2e": {"p50_ms": 300.0, "p90_ms": 600.0, "p99_ms": 900.0}}


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store.open(store_url) as opened:
        yield opened


class TestStore:
    def test_migrations_create_every_table_at_head(self, store: Store, store_url: str) -> None:
        engine = create_engine(store_url)
        try:
            inspector = inspect(engine)
            assert set(inspector.get_table_names()) == TABLES | {"alembic_version"}
            for table in ("session", "metric_sample", "log_event", "trial_generator",
                          "trial_step"):
                indexed = {tuple(ix["column_names"]) for ix in inspector.get_indexes(table)}
                assert ("trial_id",) in indexed
            assert current_revision(store_url) == head_revision()
        finally:
            engine.dispose()

    def test_models_match_the_migrations(self, store: Store, store_url: str) -> None:
        engine = create_engine(store_url)
        try:
            with engine.connect() as connection:
                context = MigrationContext.configure(connection, opts={"compare_type": True})
                assert compare_metadata(context, Base.metadata) == []
        finally:
            engine.dispose()

    def test_downgrade_and_upgrade_again(self, store: Store, store_url: str) -> None:
        store.close()
        downgrade(store_url, "base")
        assert current_revision(store_url) is None
        upgrade(store_url)
        assert current_revision(store_url) == head_revision()

    def test_0005_adds_trial_generator_and_takes_it_away(self, store: Store,
                                                         store_url: str) -> None:
        store.create_campaign("c", "c", {}, "demo")
        trial = store.start_trial("c", store.variant("c", BAD).id, seq=0, pool="p", seed=0)
        store.finish_trial(trial, TIMING, sessions(3), [], [], GENERATORS)
        store.close()
        downgrade(store_url, "0004")  # the trials stay; where their load ran goes with the table
        engine = create_engine(store_url)
        try:
            assert "trial_generator" not in inspect(engine).get_table_names()
        finally:
            engine.dispose()
        with Store.open(store_url) as again:  # back to head
            assert again.trials("c")[0].counts == {"ok": 3}
            assert again.generators(trial) == []
            later = again.start_trial("c", again.variant("c", BAD).id, seq=1, pool="p", seed=1)
            again.finish_trial(later, TIMING, sessions(3), [], [], GENERATORS)
            assert [g.address for g in again.generators(later)] == ["10.0.0.2", "10.0.0.3"]

    def test_0006_classes_old_failures_from_their_prefix_and_back(self, store: Store,
                                                                  store_url: str) -> None:
        store.close()
        downgrade(store_url, "0005")
        engine = create_engine(store_url)
        try:
            with engine.begin() as connection:
                for statement in (
                    "INSERT INTO campaign (id, name, created_at, status, spec_json, source) "
                    "VALUES ('c', 'old', :at, 'done', '{}', 'test')",
                    "INSERT INTO variant (id, campaign_id, key, levels_json) "
                    "VALUES (1, 'c', 'a=x', '{\"a\": \"x\"}')",
                    *(f"INSERT INTO trial (id, campaign_id, variant_id, seq, pool, status, "
                      f"started_at, restarts, seed, error) VALUES ({100 + seq}, 'c', 1, "
                      f"{seq}, 'p', '{status}', :at, 0, {seq}, {error})"
                      for seq, status, error in (
                          (1, "failed", "'infrastructure error: here: connection lost'"),
                          (2, "failed", "'p: the variant is not loaded: marker'"),
                          (3, "done", "NULL"))),
                ):
                    connection.execute(text(statement), {"at": "2026-01-01 00:00:00"})
        finally:
            engine.dispose()
        with Store.open(store_url) as again:
            infra, variant, done = again.trials("c", status=None)
            assert (infra.failure, variant.failure, done.failure) == (
                "infrastructure", "variant", None)
            assert infra.error == "infrastructure error: here: connection lost"
            assert again.steps(done.id) == []  # stored before steps were
            later = again.start_trial("c", 1, seq=4, pool="p", seed=4)
            again.fail_trial(later, "here: ssh dropped", failure="infrastructure",
                             steps=STEPS[:1])
        downgrade(store_url, "0005")  # an older driver reads the class from the prefix again
        engine = create_engine(store_url)
        try:
            with engine.connect() as connection:
                errors = connection.execute(text("SELECT error FROM trial ORDER BY seq"))
                assert [row[0] for row in errors] == [
                    "infrastructure error: here: connection lost",
                    "p: the variant is not loaded: marker", None,
                    "infrastructure error: here: ssh dropped"]
        finally:
            engine.dispose()

    def test_0007_a_store_from_before_keeps_its_trials_without_performance(
            self, store: Store, store_url: str) -> None:
        campaign_id = culprit_campaign(store)
        variant = store.variant(campaign_id, CULPRIT).id
        measured = store.start_trial(campaign_id, variant, seq=99, pool="pool-1", seed=99)
        store.finish_trial(measured, TIMING, sessions(80, leaks=12), [], [],
                           performance=PERFORMANCE)
        assert store.get_trial(measured).performance == {**PERFORMANCE, "goodput": None}
        before = verdict_of(store, campaign_id).to_json()
        store.close()
        downgrade(store_url, "0006")  # the figures go with their column; the trials stay
        engine = create_engine(store_url)
        try:
            columns = {c["name"] for c in inspect(engine).get_columns("trial")}
            assert "performance_json" not in columns and "failure" in columns
        finally:
            engine.dispose()
        with Store.open(store_url) as again:  # back to head: every trial as stored before 0007
            trials = again.trials(campaign_id)
            assert len(trials) == 13 and all(t.performance is None for t in trials)
            assert trials[-1].counts == {"ok": 68, "leak": 12}
            assert all(t.performance is None for t in evidence(trials))
            assert verdict_of(again, campaign_id).to_json() == before  # never read them
            later = again.start_trial(campaign_id, variant, seq=100, pool="pool-1", seed=100)
            again.finish_trial(later, TIMING, sessions(80), [], [], performance=PERFORMANCE)
            [shown] = evidence([again.get_trial(later)])
            assert shown.performance is not None and shown.performance.goodput is None
            assert shown.performance.e2e is not None and shown.performance.e2e.p99_ms == 900.0
            assert shown.performance.itl is None and shown.performance.request_throughput == 8.0

    def test_steps_are_stored_with_the_trial_s_end(self, store: Store) -> None:
        store.create_campaign("c", "c", {}, "demo")
        variant = store.variant("c", BAD).id
        done = store.start_trial("c", variant, seq=0, pool="p", seed=0)
        failed = store.start_trial("c", variant, seq=1, pool="p", seed=1)
        store.finish_trial(done, TIMING, sessions(2), [], [], (), STEPS)
        with pytest.raises(StoreError, match="unknown outcome 'maybe'"):
            store.fail_trial(failed, "x", steps=[dataclasses.replace(STEPS[0], outcome="maybe")])
        with pytest.raises(StoreError, match="unknown failure class 'network'"):
            store.fail_trial(failed, "x", failure="network")
        assert store.trials("c", status=None)[1].status == "running"  # nothing half-done
        store.fail_trial(failed, "p: not loaded", failure="variant", steps=STEPS[:2])
        stored = store.steps(done)
        assert [(s.position, s.name, s.service, s.outcome) for s in stored] == [
            (0, "apply", None, "ok"), (1, "prove", "p", "failed"), (2, "stress", None, "skipped")]
        assert stored[1].details == STEPS[1].details and stored[1].started_at.tzinfo == UTC
        assert stored[1].duration_s == 0.25 and stored[0].started_at == STEPS[0].started_at
        assert store.campaign_steps("c") == {done: stored, failed: store.steps(failed)}
        assert [t.failure for t in store.trials("c", status=None)] == [None, "variant"]
        with pytest.raises(dataclasses.FrozenInstanceError):
            stored[0].outcome = "failed"  # type: ignore[misc]

    def test_round_trip(self, store: Store) -> None:
        campaign = store.create_campaign("c1", "index-k leak", {"factors": {"index_k": ["fp8"]}},
                                         "campaign.yaml")
        assert campaign.status == "running" and campaign.created_at.tzinfo == UTC
        assert store.get_campaign("c1") == campaign
        assert campaign.spec == {"factors": {"index_k": ["fp8"]}}
        bad, good = store.variant("c1", BAD), store.variant("c1", GOOD)
        assert store.variant("c1", dict(reversed(BAD.items()))) == bad
        assert bad.key == "hicache=on,index_k=bf16" and bad.levels == BAD
        assert store.variants("c1") == [bad, good]

        t_bad = store.start_trial("c1", bad.id, seq=1, pool="pool-a", seed=11)
        t_good = store.start_trial("c1", good.id, seq=0, pool="pool-b", seed=12)
        assert store.trials("c1") == []
        assert [t.status for t in store.trials("c1", status=None)] == ["running", "running"]
        store.finish_trial(t_bad, TIMING, sessions(80, leaks=14), metrics(3000), LOGS,
                           GENERATORS)
        store.finish_trial(t_good, TrialTiming(wall_s=10.0), sessions(80), metrics(5), [])

        good_trial, bad_trial = store.trials("c1")
        assert (good_trial.id, bad_trial.id) == (t_good, t_bad)
        assert bad_trial.levels == BAD and bad_trial.variant_id == bad.id
        assert bad_trial.counts == {"ok": 66, "leak": 14} and bad_trial.sessions == 80
        assert good_trial.counts == {"ok": 80}
        assert bad_trial.events == {"startup": 1, "abort": 1} and good_trial.events == {}
        assert (bad_trial.wall_s, bad_trial.restart_s, bad_trial.workload_s) == (12.5, 3.0, 9.0)
        assert bad_trial.restarts == 2 and good_trial.restarts == 0
        assert good_trial.workload_s is None
        assert bad_trial.pool == "pool-a" and bad_trial.seed == 11 and bad_trial.error is None
        assert bad_trial.finished_at is not None and bad_trial.finished_at >= bad_trial.started_at
        assert store.get_trial(t_bad) == bad_trial

        stored = store.sessions(t_bad)
        assert [s.idx for s in stored] == list(range(80))
        assert stored[0].evidence == "<｜DSML｜invoke" and stored[0].first_bad_turn == 2
        assert stored[79].outcome == "ok" and stored[79].latency_s == pytest.approx(1.29)
        samples = store.metrics(t_bad)
        assert len(samples) == 3000 and samples[3].labels == {"tp_rank": "1"}
        assert samples[3].t == 1.5 and samples[3].name == "sglang:num_running_reqs"
        assert [e.text for e in store.log_events(t_bad)] == [row.text for row in LOGS]
        assert store.log_events(t_good) == []
        ran = store.generators(t_bad)
        assert [(g.position, g.node_id, g.address, g.sessions, g.finished, g.stopped)
                for g in ran] == [(0, NODE_A, "10.0.0.2", 40, 12, True),
                                  (1, NODE_B, "10.0.0.3", 40, 40, False)]
        assert all(g.trial_id == t_bad for g in ran)
        assert store.generators(t_good) == []  # its pool's actor ran the sessions itself

    def test_counts_every_outcome(self, store: Store) -> None:
        store.create_campaign("c", "c", {}, "demo")
        variant = store.variant("c", BAD)
        trial = store.start_trial("c", variant.id, seq=0, pool="p", seed=0)
        rows = [dataclasses.replace(row, outcome=OUTCOMES[row.idx % 7]) for row in sessions(70)]
        store.finish_trial(trial, TIMING, rows, [], [])
        assert store.trials("c")[0].counts == dict.fromkeys(OUTCOMES, 10)

    def test_finish_trial_is_atomic(self, store: Store) -> None:
        store.create_campaign("c", "c", {}, "demo")
        variant = store.variant("c", BAD)
        trial = store.start_trial("c", variant.id, seq=0, pool="p", seed=0)
        broken_session = [*sessions(40), SessionRow(40, "s40", None, 4, None, None, 1.0)]  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="finish trial"):
            store.finish_trial(trial, TIMING, broken_session, metrics(10), LOGS)
        # this one fails last, after the sessions and metrics were already sent
        broken_log = [*LOGS, LogRow("decode", 9, "error", None)]  # type: ignore[arg-type]
        with pytest.raises(StoreError):
            store.finish_trial(trial, TIMING, sessions(80), metrics(10), broken_log)
        # and this one later still, after the logs
        broken_generator = [*GENERATORS, GeneratorRow(NODE_A, None, 1, 1, False)]  # type: ignore[arg-type]
        with pytest.raises(StoreError):
            store.finish_trial(trial, TIMING, sessions(80), metrics(10), LOGS, broken_generator)
        duplicate = [*sessions(3), sessions(3)[0]]
        with pytest.raises(StoreError):
            store.finish_trial(trial, TIMING, duplicate, [], [])

        (still,) = store.trials("c", status=None)
        assert still.status == "running" and still.counts == {} and still.wall_s is None
        assert store.sessions(trial) == [] and store.metrics(trial) == []
        assert store.log_events(trial) == [] and store.generators(trial) == []
        store.finish_trial(trial, TIMING, sessions(80), metrics(10), LOGS)
        assert store.trials("c")[0].counts == {"ok": 80}

    def test_finished_trials_cannot_be_written_again(self, store: Store) -> None:
        store.create_campaign("c", "c", {}, "demo")
        trial = store.start_trial("c", store.variant("c", BAD).id, seq=0, pool="p", seed=0)
        store.finish_trial(trial, TIMING, sessions(2), [], [])
        with pytest.raises(StoreError, match="is done"):
            store.finish_trial(trial, TIMING, sessions(2), [], [])
        with pytest.raises(StoreError, match="is done"):
            store.fail_trial(trial, "late")

    def test_fail_trial(self, store: Store) -> None:
        store.create_campaign("c", "c", {}, "demo")
        trial = store.start_trial("c", store.variant("c", BAD).id, seq=0, pool="p", seed=0)
        store.fail_trial(trial, "ssh: connection reset", TrialTiming(wall_s=4.0, restarts=1))
        assert store.trials("c") == []
        (failed,) = store.trials("c", status="failed")
        assert failed.error == "ssh: connection reset" and failed.restarts == 1
        assert failed.wall_s == 4.0 and failed.finished_at is not None

    def test_discard_unfinished(self, store: Store) -> None:
        store.create_campaign("c", "c", {}, "demo")
        store.create_campaign("other", "o", {}, "demo")
        variant = store.variant("c", BAD)
        done = store.start_trial("c", variant.id, seq=0, pool="p", seed=0)
        store.finish_trial(done, TIMING, sessions(5), [], [])
        running = [store.start_trial("c", variant.id, seq=i, pool="p", seed=i) for i in (1, 2)]
        elsewhere = store.start_trial("other", store.variant("other", BAD).id, 0, "p", 0)

        assert store.discard_unfinished("c") == running
        assert store.discard_unfinished("c") == []
        assert [t.id for t in store.trials("c", status="discarded")] == running
        assert [t.id for t in store.trials("c")] == [done]
        assert store.trials("other", status="running")[0].id == elsewhere
        with pytest.raises(StoreError, match="discarded"):
            store.finish_trial(running[0], TIMING, [], [], [])

    def test_not_found(self, store: Store) -> None:
        with pytest.raises(NotFound, match="no campaign 'nope'"):
            store.get_campaign("nope")
        with pytest.raises(NotFound):
            store.set_campaign_status("nope", "done")
        with pytest.raises(NotFound):
            store.variant("nope", BAD)
        store.create_campaign("c", "c", {}, "demo")
        store.create_campaign("d", "d", {}, "demo")
        with pytest.raises(NotFound, match="no variant"):
            store.start_trial("c", 999, seq=0, pool="p", seed=0)
        with pytest.raises(NotFound, match="no variant"):
            store.start_trial("c", store.variant("d", BAD).id, seq=0, pool="p", seed=0)
        with pytest.raises(NotFound, match="no trial 42"):
            store.finish_trial(42, TIMING, [], [], [])
        with pytest.raises(NotFound):
            store.get_trial(42)
        assert store.trials("nope") == [] and store.sessions(42) == []
        assert store.generators(42) == []

    def test_campaigns(self, store: Store) -> None:
        store.create_campaign("first", "one", {}, "demo")
        store.create_campaign("second", "two", {"x": [1, 2]}, "/tmp/c.yaml")
        with pytest.raises(StoreError, match="already exists"):
            store.create_campaign("first", "again", {}, "demo")
        assert [c.id for c in store.list_campaigns()] == ["second", "first"]

        store.set_campaign_status("first", "interrupted", finished=True)
        assert store.get_campaign("first").finished_at is not None
        store.set_campaign_status("first", "running")
        resumed = store.get_campaign("first")
        assert resumed.status == "running" and resumed.finished_at is None
        with pytest.raises(StoreError, match="unknown campaign status"):
            store.set_campaign_status("first", "finished")

    def test_reopen_is_a_no_op_upgrade_and_keeps_data(self, store: Store, store_url: str) -> None:
        store.create_campaign("c", "c", {}, "demo")
        trial = store.start_trial("c", store.variant("c", BAD).id, seq=0, pool="p", seed=0)
        store.finish_trial(trial, TIMING, sessions(80, leaks=3), metrics(4), LOGS)
        store.close()
        with Store.open(store_url) as again:
            assert current_revision(store_url) == head_revision()
            assert again.trials("c")[0].counts == {"ok": 77, "leak": 3}
            assert len(again.metrics(trial)) == 4

    def test_records_are_frozen(self, store: Store) -> None:
        campaign = store.create_campaign("c", "c", {}, "demo")
        variant = store.variant("c", BAD)
        trial = store.start_trial("c", variant.id, seq=0, pool="p", seed=0)
        store.finish_trial(trial, TIMING, sessions(1), metrics(1), LOGS[:1], GENERATORS[:1])
        values = [campaign, variant, store.trials("c")[0], store.sessions(trial)[0],
                  store.metrics(trial)[0], store.log_events(trial)[0],
                  store.generators(trial)[0]]
        for value in values:
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(value, "id", 5)  # noqa: B010 - the assignment must raise

    def test_what_servers_return_is_kept_alike_on_every_backend(self, store: Store) -> None:
        store.create_campaign("c", "c", {}, "demo")
        variant = store.variant("c", BAD)
        seed = 5000 * 1_000_003 + 7  # workload.seed 5000: past a 32-bit INTEGER
        trial = store.start_trial("c", variant.id, seq=0, pool="p", seed=seed)
        raw = 'x\x00y <｜DSML｜invoke name="f">😀 \u202e</｜DSML｜invoke> ' + "z" * 100_000
        odd = [MetricRow("decode", 0.5, "sglang:cache_hit_rate", {}, float("nan")),
               MetricRow("decode", 1.0, "sglang:token_usage", {}, float("inf")),
               MetricRow("decode", 1.5, "sglang:token_usage", {}, -0.0)]
        store.finish_trial(trial, TIMING, [dataclasses.replace(sessions(1, leaks=1)[0],
                                                               evidence=raw)],
                           odd, [LogRow("decode", 1, "error", "bad\x00byte")])
        assert store.get_trial(trial).seed == seed
        expected = raw.replace("\x00", "\ufffd")  # PostgreSQL refuses NUL in text
        assert store.sessions(trial)[0].evidence == expected
        assert [e.text for e in store.log_events(trial)] == ["bad\ufffdbyte"]
        assert [(m.t, m.value) for m in store.metrics(trial)] == [(1.0, math.inf), (1.5, 0.0)]
        failed = store.start_trial("c", variant.id, seq=1, pool="p", seed=-(2**62))
        store.fail_trial(failed, "health: b'\x00\xff'\x00")
        assert store.get_trial(failed).error == "health: b'\ufffd\xff'\ufffd"
        assert store.get_trial(failed).seed == -(2**62)

    def test_an_older_schema_is_upgraded_with_its_data(self, store: Store, store_url: str) -> None:
        store.close()
        downgrade(store_url, "base")
        upgrade(store_url, "0001")
        engine = create_engine(store_url)
        try:
            with engine.begin() as connection:
                for statement in (
                    "INSERT INTO campaign (id, name, created_at, status, spec_json, source) "
                    "VALUES ('c1', 'old', :at, 'done', '{}', 'test')",
                    "INSERT INTO variant (id, campaign_id, key, levels_json) "
                    "VALUES (1, 'c1', 'a=x', '{\"a\": \"x\"}')",
                    "INSERT INTO trial (id, campaign_id, variant_id, seq, pool, status, "
                    "started_at, restarts, seed) VALUES (1, 'c1', 1, 1, 'p', 'done', :at, 1, 7)",
                    "INSERT INTO session (trial_id, idx, key, outcome, turns, latency_s) "
                    "VALUES (1, 0, 's0', 'leak', 2, 0.5)",
                ):
                    connection.execute(text(statement), {"at": "2026-01-01 00:00:00"})
        finally:
            engine.dispose()
        with Store.open(store_url) as again:
            assert current_revision(store_url) == head_revision()
            [trial] = again.trials("c1")
            assert trial.seed == 7 and trial.stopped_early is False
            assert trial.counts == {"leak": 1}
            assert again.get_campaign("c1").created_at.tzinfo == UTC
        downgrade(store_url, "0001")  # and back: the data stays
        assert current_revision(store_url) == "0001"


@pytest.mark.pure
def test_variant_key_is_canonical_and_unambiguous() -> None:
    assert variant_key({"b": "y", "a": "x"}) == "a=x,b=y"
    assert variant_key({"a": "x,b=y"}) != variant_key({"a": "x", "b": "y"})
    assert variant_key({}) == ""


@pytest.mark.pure
def test_sqlite_file_is_wal_with_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "bisect.db"
    with Store.open(str(path)) as store:
        assert store.url == f"sqlite:///{path}"
        engine = store._engine
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 30000


@pytest.mark.pure
def test_unknown_schema_revision_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "bisect.db"
    Store.open(str(path)).close()
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'from_the_future'"))
    engine.dispose()
    with pytest.raises(StoreError, match="cannot upgrade"):
        Store.open(str(path))


@pytest.mark.pure
def test_the_revision_read_without_alembic_is_alembic_s_head() -> None:
    """``db.revision.HEAD`` spares an up-to-date store alembic: it must name the newest
    migration (a new one fails here until HEAD names it)."""
    assert head_revision() == HEAD


@pytest.mark.pure
def test_a_store_at_head_opens_without_migrating_and_one_behind_is_migrated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "bisect.db")
    Store.open(path).close()
    downgrade(path, "0007")
    calls: list[str] = []
    real = migrate.upgrade_engine

    def counted(engine: Engine) -> None:
        calls.append("upgrade")
        real(engine)

    monkeypatch.setattr(migrate, "upgrade_engine", counted)
    Store.open(path).close()  # one behind: alembic brings it to head
    assert calls == ["upgrade"] and current_revision(path) == HEAD
    Store.open(path).close()  # at head: one query, no migration
    assert calls == ["upgrade"]


# --- a finished campaign, filled through the Store API: the CLI and the report read it ----------

CULPRIT = {"index_k": "bf16", "hicache": "on"}
LEAK = '<｜DSML｜function_calls><｜DSML｜invoke name="read_file">'


def culprit_campaign(store: Store, name: str = "bf16 index keys vs HiCache",
                     evidence: str = LEAK) -> str:
    """A factorial campaign as a real run stores it: 4 variants x 3 trials of 80 sessions;
    ``index_k=bf16 AND hicache=on`` leaks DSML in ~15% of its sessions (one leak's evidence is
    ``evidence``), the others are clean but for an error and a timeout. Its id."""
    campaign_id = create_campaign(store, Campaign.model_validate(campaign_spec(name)), "test")
    seq = 0
    for index_k in ("fp8", "bf16"):
        for hicache in ("off", "on"):
            levels = {"index_k": index_k, "hicache": hicache}
            variant = store.variant(campaign_id, levels)
            for repeat in range(3):
                trial = store.start_trial(campaign_id, variant.id, seq, "pool-1", seed=seq)
                leaks = 11 + repeat if levels == CULPRIT else 0
                rows = sessions(80, leaks=leaks)
                rows[0:leaks] = [dataclasses.replace(row, evidence=evidence if i == 0 else
                                                     f"{LEAK} #{seq}.{i}")
                                 for i, row in enumerate(rows[:leaks])]
                if repeat == 1:
                    rows[-1] = dataclasses.replace(rows[-1], outcome="timeout")
                    rows[-2] = dataclasses.replace(rows[-2], outcome="error")
                store.finish_trial(trial, TrialTiming(wall_s=20.0, restart_s=5.0,
                                                      workload_s=14.0, restarts=1),
                                   rows, metrics(4), LOGS)
                seq += 1
    store.set_campaign_status(campaign_id, "done", finished=True)
    return campaign_id


@pytest.mark.real
def test_the_cli_reads_a_postgresql_store(postgres_url: str, tmp_path: Path) -> None:
    with Store.open(postgres_url) as store:
        campaign_id = culprit_campaign(store)
    runner = CliRunner()
    # both spellings: the explicit driver, and plain postgresql:// (psycopg 3 by default)
    bare = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    result = runner.invoke(app, ["verdict", campaign_id, "--store", postgres_url, "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [CULPRIT]
    assert verdict["cost"]["trials"] == 12
    result = runner.invoke(app, ["ls", "--store", bare, "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert row["id"] == campaign_id and row["status"] == "done" and row["trials"] == 12
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", campaign_id, "--store", bare, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "index_k=bf16" in out.read_text()


def test_show_says_where_each_trial_s_load_ran(store_url: str) -> None:
    spec = {**campaign_spec("spread"), "generators": {"count": 2, "resources": {"loadgen": 1}}}
    spread = [dataclasses.replace(GENERATORS[0], address="[fe80::1]"), GENERATORS[1]]  # markup?
    with Store.open(store_url) as store:
        driven = culprit_campaign(store)  # no generators: every pool's actor ran its own load
        campaign_id = create_campaign(store, Campaign.model_validate(spec), "test")
        variant = store.variant(campaign_id, CULPRIT)
        for seq, generators in ((1, spread), (2, [])):  # 2: as stored before generators were
            trial = store.start_trial(campaign_id, variant.id, seq, "pool-1", seed=seq)
            store.finish_trial(trial, TIMING, sessions(80), [], [], generators)
        failed = store.start_trial(campaign_id, variant.id, 3, "pool-1", seed=3)
        store.fail_trial(failed, "infrastructure error: load generator failed")
    runner = CliRunner()
    shown = runner.invoke(app, ["show", campaign_id, "--store", store_url, "--json"])
    assert shown.exit_code == 0, shown.output
    rows = json.loads(shown.stdout)
    assert rows[0]["generators"] == [
        {"node_id": NODE_A, "address": "[fe80::1]", "sessions": 40, "finished": 12,
         "stopped": True},
        {"node_id": NODE_B, "address": "10.0.0.3", "sessions": 40, "finished": 40,
         "stopped": False}]
    assert rows[1]["generators"] == rows[2]["generators"] == []
    wide = {"COLUMNS": "200"}  # one line a trial
    table = runner.invoke(app, ["show", campaign_id, "--store", store_url], env=wide).stdout
    assert "[fe80::1] 12/40 stopped, 10.0.0.3 40/40 │" in table  # an address is never markup
    assert table.count("not recorded") == 1 and "driver" not in table
    table = runner.invoke(app, ["show", driven, "--store", store_url], env=wide).stdout
    assert table.count("driver") == 12


@pytest.mark.pure
def test_a_missing_driver_is_a_store_error() -> None:
    with pytest.raises(StoreError, match=r"cannot open the store.*No module named"):
        Store.open("mysql+mysqldb://bisect@127.0.0.1/bisect")


@pytest.mark.pure
def test_node_locks_are_rows_until_released(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "locks.db")) as store:
        store.create_campaign("c1", "locks", {}, "test")
        store.lock_taken("c1", "gpu-a")
        store.lock_taken("c1", "gpu-b")
        assert store.held_locks() == [("c1", "gpu-a"), ("c1", "gpu-b")]
        store.lock_released("c1", "gpu-a")
        assert store.held_locks("c1") == [("c1", "gpu-b")]
