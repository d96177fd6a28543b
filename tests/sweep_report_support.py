"""A sweep's store for the sweep report tests, made once per test session without Ray: each run
goes through the parts `bisect sweep` is made of (``Sweeps``' lock and rows, the nodes' real
facts from ``read_facts``, the run's campaign from ``run._start_campaign`` with the baseline's
trials and the build factor, the sweep strategy proposing every trial, its verdict, the hunt's
real ``hunt_campaign`` and ``expand_commits`` over a real git tree); only the trials' sessions
are written through the Store API instead of by twins, so that their rates are known exactly.

The sweep ``nightly``, runs 1 to 6:
1. the first run: no baseline, every variant new; accepted
2. clean against run 1; accepted (the baseline of run 5)
3. skipped: another run held the lock (its reason is hostile text)
4. missed: no run at its scheduled time
5. three new commits (the middle one, whose subject is hostile, brings the race back): the
   risky variant regresses on corruption, confirmed against the baseline's commit put back;
   a node fact changed (hostile text); a variant added; the hunt names the hostile commit
6. a run whose campaign this version cannot read again (its stored spec broken): the report
   falls back on the run's stored result
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from db import SessionRow, Store, TrialTiming
from db.sweeps import SweepRunRecord, Sweeps
from experiments.sweep import Sweep, load_sweep
from orchestrator.core.evidence import failing_for
from orchestrator.core.strategies.base import Status
from orchestrator.core.strategies.registry import strategy_for
from orchestrator.stored import campaign_of, create_campaign, evidence, verdict_of
from orchestrator.sweeps.run import _start_campaign, read_facts
from tests.sweep_support import HOSTILE_SUBJECT, commit_faults, sweep_file

SWEEP = "nightly"
HOSTILE_FACT = '<img src=x onerror="window.PWNED=2"> ]]> {{ range(7) }}'
HOSTILE_REASON = "held by <script>window.PWNED=3</script> ]]> {{ range(7) }}"
SESSIONS = 24
RACE_LEAKS = 14  # of 24 sessions: the race, where it is back (58%)
THRESHOLDS = {"corruption": 0.15, "wedging": 0.15, "throughput": 0.15, "p99_latency": 0.25}
TIMING = TrialTiming(wall_s=20.0, restart_s=5.0, workload_s=14.0, restarts=1)

Outcome = Callable[[Mapping[str, str], int], tuple[int, int]]  # levels, seq -> (leaks, errors)


@dataclass(frozen=True)
class SweepStore:
    db_path: Path
    tree: Path
    good: str  # the baseline's commit
    bad: str  # the first bad commit (its subject HOSTILE_SUBJECT)
    head: str  # the commit run 5 ran on
    runs: dict[int, SweepRunRecord]  # by seq, as each run ended
    hunt_campaign: str

    @property
    def store_arg(self) -> str:
        return str(self.db_path)


def _performance(seq: int) -> dict[str, Any]:
    """A trial's figures as StressResult.performance gives them, within 1% run to run."""
    jitter = 1 + ((seq * 7) % 5 - 2) / 400
    p99 = 850.0 * jitter
    return {"wall_s": 14.0, "requests": SESSIONS, "completed": SESSIONS,
            "output_tokens": 14000, "good_sessions": SESSIONS, "request_throughput": 1.7,
            "output_throughput": 1000.0 * jitter, "goodput": 1.7,
            "ttft": {"p50_ms": 80.0, "p90_ms": 120.0, "p99_ms": 150.0}, "tpot": None,
            "itl": None, "e2e": {"p50_ms": 400.0, "p90_ms": 700.0, "p99_ms": p99}}


def _sessions(leaks: int, errors: int) -> list[SessionRow]:
    return [SessionRow(idx=i, key=f"s{i}",
                       outcome="leak" if i < leaks else "error" if i < leaks + errors else "ok",
                       turns=2, first_bad_turn=1 if i < leaks else None,
                       evidence="<｜DSML｜invoke" if i < leaks else None, latency_s=0.4)
            for i in range(SESSIONS)]


def drive(store: Store, campaign_id: str, outcome: Outcome, limit: int = 200) -> None:
    """Every trial the campaign's strategy asks for, stored as done with ``outcome``'s
    sessions, until it asks for none; then the campaign is done."""
    campaign = campaign_of(store, campaign_id)
    strategy = strategy_for(campaign)
    failing = failing_for(campaign.strategy.target)
    pool = campaign.pools[0].name
    seq = 0
    while True:
        done = evidence(store.trials(campaign_id, status=None), failing,
                        campaign.workload.sessions)
        wanted = strategy.propose(done, [])
        if not wanted:
            break
        for levels in wanted:
            assert seq < limit, "the strategy kept asking for trials"
            variant = store.variant(campaign_id, dict(levels))
            trial = store.start_trial(campaign_id, variant.id, seq, pool, seed=seq)
            leaks, errors = outcome(levels, seq)
            store.finish_trial(trial, TIMING, _sessions(leaks, errors), [], [],
                               performance=_performance(seq))
            seq += 1
    store.set_campaign_status(campaign_id, "done", finished=True)


def sweep_run(store: Store, sweep: Sweep, source: str, outcome: Outcome, *,
              accept: bool = False, fact_edits: Mapping[str, Any] | None = None,
              hunt: Callable[[SweepRunRecord, dict[str, Any]], dict[str, Any]] | None = None,
              ) -> SweepRunRecord:
    """One run as ``orchestrator.sweeps.run.run_sweep`` makes it, its trials by ``drive``."""
    sweeps = Sweeps(store)
    sweeps.ensure(sweep.name)
    baseline = sweeps.baseline(sweep.name)
    run = sweeps.start_run(sweep.name, baseline_run_id=baseline.id if baseline else None)
    facts = read_facts(sweep)
    for node in facts:
        facts[node].update(fact_edits or {})
    sweeps.set_facts(run.id, facts)
    campaign_id, changes = _start_campaign(store, sweeps, sweep, source, run, baseline, facts,
                                           lambda _: None, False)
    drive(store, campaign_id, outcome)
    verdict = verdict_of(store, campaign_id)
    status = {Status.CULPRIT: "regression", Status.NO_CULPRIT: "clean"}.get(verdict.status,
                                                                            "inconclusive")
    result = {"campaign": campaign_id, "reason": verdict.reason,
              **(verdict.finding_json("sweep") or {}), **changes}
    if hunt is not None:
        result["hunt"] = hunt(run, result)
    sweeps.finish_run(run.id, status, result, result.get("reason"))
    if accept:
        sweeps.accept(run.id)
    return sweeps.get_run(run.id)


def _hunt(store: Store, sweep: Sweep, good: str, bad: str, first_bad: str,
          ) -> Callable[[SweepRunRecord, dict[str, Any]], dict[str, Any]]:
    """The hunt as ``orchestrator.sweeps.hunt.hunt_commits`` runs it, its trials by ``drive``:
    from ``first_bad`` on, HiCache leaks."""
    from orchestrator.executor.commit_range import expand_commits
    from orchestrator.sweeps.hunt import hunt_campaign

    def run_hunt(run: SweepRunRecord, result: dict[str, Any]) -> dict[str, Any]:
        variant = next(v for v in result["variants"] if v["regressed"])
        campaign = expand_commits(hunt_campaign(sweep, variant["levels"], "corruption", good,
                                                bad))
        assert campaign.commits is not None
        order = list(campaign.commits.resolved)
        broken = order.index(first_bad[:12])
        campaign_id = create_campaign(store, campaign, f"sweep {sweep.name} run {run.seq}")
        Sweeps(store).add_hunt(run.id, campaign_id, good, bad)
        drive(store, campaign_id, lambda levels, seq: (
            RACE_LEAKS if order.index(levels["commit"]) >= broken else 0, 0))
        verdict = verdict_of(store, campaign_id)
        found = dict(verdict.finding_json("commits") or {})
        return {"status": verdict.status.value, "reason": verdict.reason,
                "campaign": campaign_id, "variant": variant["name"], "metric": "corruption",
                "good": good, "bad": bad, "first_bad": found.get("first_bad", []),
                "posterior": found.get("posterior")}
    return run_hunt


def clean_outcome(levels: Mapping[str, str], seq: int) -> tuple[int, int]:
    return 0, 1 if seq % 3 == 0 else 0


def race_outcome(levels: Mapping[str, str], seq: int) -> tuple[int, int]:
    """The race is back with HiCache, on the current build only (the baseline's build put
    back has it fixed)."""
    raced = levels.get("hicache") == "on" and levels.get("build", "current") == "current"
    return (RACE_LEAKS if raced else 0), (1 if seq % 3 == 0 else 0)


def make_sweep_store(workdir: Path) -> SweepStore:
    tree = workdir / "src"
    good = commit_faults(tree, 0.0, "the fixed pool sizing")
    path = sweep_file(workdir, tree, hunt=True, sessions=SESSIONS, thresholds=THRESHOLDS,
                      variants={"production": {"hicache": "off", "chunk": "small"},
                                "hicache-on": {"hicache": "on", "chunk": "small"}})
    data = yaml.safe_load(path.read_text())
    data["factors"].append({"name": "chunk", "levels": {
        "small": None, "big": {"flags": ["--chunked-prefill-size", "16384"]}}})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    db_path = workdir / "bisect.db"
    runs: dict[int, SweepRunRecord] = {}
    with Store.open(str(db_path)) as store:
        sweep = load_sweep(path)
        source = path.read_text()
        runs[1] = sweep_run(store, sweep, source, clean_outcome, accept=True)
        runs[2] = sweep_run(store, sweep, source, clean_outcome, accept=True)
        sweeps = Sweeps(store)
        runs[3] = sweeps.record_skipped(SWEEP, trigger="schedule", schedule="nightly-2am",
                                        reason=HOSTILE_REASON)
        runs[4] = sweeps.record_missed(SWEEP, schedule="nightly-2am",
                                       slot=datetime.now(UTC) - timedelta(hours=1))
        commit_faults(tree, 0.0, "refactor the scheduler")
        bad = commit_faults(tree, 0.6, HOSTILE_SUBJECT)
        head = commit_faults(tree, 0.6, "docs")
        data = yaml.safe_load(path.read_text())
        data["variants"]["chunk-big"] = {"hicache": "off", "chunk": "big"}  # added since
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        sweep = load_sweep(path)
        runs[5] = sweep_run(store, sweep, path.read_text(), race_outcome,
                            fact_edits={"server_version": HOSTILE_FACT},
                            hunt=_hunt(store, sweep, good, head, bad))
        [hunt] = sweeps.hunts(runs[5].id)
        runs[6] = sweep_run(store, sweep, path.read_text(), race_outcome)
    _break_spec(db_path, runs[6])
    return SweepStore(db_path, tree, good, bad, head, runs, hunt.campaign_id)


def _break_spec(db_path: Path, run: SweepRunRecord) -> None:
    """Run 6's campaign as a later version might have stored it: a spec this one cannot read."""
    with sqlite3.connect(db_path) as connection:
        connection.execute("UPDATE campaign SET spec_json = ? WHERE id = ?",
                           ('{"name": "from a later bisect", "strategy": {"kind": "newer"}}',
                            run.campaign_id))


_MADE: list[SweepStore] = []


@pytest.fixture(scope="session", name="sweep_store")
def sweep_store_fixture(tmp_path_factory: pytest.TempPathFactory) -> SweepStore:
    if not _MADE:
        _MADE.append(make_sweep_store(tmp_path_factory.mktemp("sweep-report")))
    return _MADE[0]

