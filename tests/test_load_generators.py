"""Load generators as Ray actors on another machine of the cluster: a second Ray node on this
machine advertises the `loadgen` resource (and a node label), as a load machine would after
`ray start --address … --resources '{"loadgen": 4}'`; real twins serve the sessions."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray
import yaml
from ray.cluster_utils import Cluster
from typer.testing import CliRunner

from db.store import Store
from experiments.campaign import Campaign, CampaignError
from experiments.campaign_load import parse_campaign
from experiments.workload.spec import WorkloadSpec
from experiments.yaml_lines import load_yaml
from orchestrator.cli import app
from orchestrator.core.stats.compare import StopWhenFailing
from orchestrator.core.verdict import Status
from orchestrator.demo import twin_pool
from orchestrator.executor.base import TrialOrder, TrialReport
from orchestrator.executor.driver import RunFailed, run_campaign
from orchestrator.executor.load_generators import split, unplaceable
from orchestrator.executor.ray_pool import PoolActors
from orchestrator.executor.trial import INFRA_ERROR
from orchestrator.stored import create_campaign, verdict_of

LOADGEN = 4  # what the load machine advertises: two pools of two generators each
LABEL = {"bisect-role": "load"}
BAD = {"index_k": "bf16", "hicache": "on"}
STOP = StopWhenFailing(prior=(0, 0), good=(0, 40), alpha=0.01)  # 7 corrupt of 40 decide


def faults(wedge_the_rest: bool) -> dict[str, Any]:
    """Half the sessions of the bad variant leak; with ``wedge_the_rest`` the others hang
    until the client gives up, so a run cannot end before its early stop or a kill."""
    when = {"env": {"BF16_INDEX_K": "1"}, "flags": {"enable-hierarchical-cache": True}}
    rules: list[dict[str, Any]] = [{"name": "race", "when": when, "min_inflight": 1,
                                    "probability": 0.5, "effect": "leak", "markup": "dsml"}]
    if wedge_the_rest:
        rules.append({"name": "hang", "when": when, "probability": 1.0, "effect": "wedge"})
    return {"seed": 3, "rules": rules}


def campaign_data(workdir: Path, *, pools: int = 1, wedge_the_rest: bool = False,
                  workload: dict[str, Any] | None = None,
                  generators: dict[str, Any] | None = None) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    fault_model = workdir / "faults.yaml"
    fault_model.write_text(yaml.safe_dump(faults(wedge_the_rest)))
    data: dict[str, Any] = {
        "name": "load generators",
        "nodes": [{"name": "here", "workdir": str(workdir / "services")}],
        "pools": [twin_pool(f"p{i}", "here", fault_model, latency_ms=5) for i in range(pools)],
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": 0}},
                                           "bf16": {"env": {"BF16_INDEX_K": 1}}}},
            {"name": "hicache", "levels": {"off": None,
                                           "on": {"flags": "--enable-hierarchical-cache"}}},
        ],
        "workload": workload or {"sessions": 20, "rounds": 2, "timeout_s": 20, "seed": 5},
        "strategy": {"kind": "factorial", "repeats": 2},
    }
    if generators is not None:
        data["generators"] = generators
    return data


@pytest.fixture(autouse=True)
def builtin_triage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leaks judged by the built-in parser: these tests judge where the load ran, not the
    triage, and each generator would import SGLang's detectors and torch (~500 MiB and seconds
    each). The driver's setting travels to the generators (``driver_settings``)."""
    monkeypatch.setenv("BISECT_TRIAGE", "builtin")


@pytest.fixture(scope="module")
def load_machine(ray_cluster: Cluster) -> Iterator[str]:
    """A second Ray node, as `ray start --address … --resources '{"loadgen": 4}' --labels …`
    starts it on a load machine; no CPUs of its own to reserve. Yields its node id."""
    node = ray_cluster.add_node(num_cpus=0, resources={"loadgen": LOADGEN}, labels=LABEL)
    ray_cluster.wait_for_nodes()
    yield str(node.node_id)
    ray_cluster.remove_node(node)


def address(node_id: str) -> str:
    """The IP address Ray knows the node by."""
    return str(next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id))


def trials(data: dict[str, Any], *orders: TrialOrder,
           during: Callable[[Campaign], None] | None = None) -> tuple[list[TrialReport], str]:
    """Run the orders one after the other on one pool actor of the campaign's first pool, as
    the driver does; ``during`` runs while the first one runs. Also: the pool actor's node."""
    campaign = Campaign.model_validate(data)
    pool = campaign.pools[0].name
    actors = PoolActors(campaign.model_dump(mode="json"), [pool])
    reports: list[TrialReport] = []
    try:
        for order in orders:
            actors.submit(pool, order)
            if during is not None and not reports:
                during(campaign)
            reports.append(actors.next_report()[1])
        where = actors.actors[pool].__ray_call__.remote(
            lambda _: ray.get_runtime_context().get_node_id())
        node = str(ray.get(where))
    finally:
        actors.shutdown()
    return reports, node


@pytest.mark.pure
def test_sessions_are_dealt_disjointly_and_the_cap_is_shared() -> None:
    spec = WorkloadSpec(sessions=10, max_concurrency=5)
    shares = split(spec, 3)
    indices = [i for share in shares for i in share.indices]
    assert sorted(indices) == list(range(10)) and len(set(indices)) == 10
    assert [s.indices for s in shares] == [(0, 3, 6, 9), (1, 4, 7), (2, 5, 8)]
    assert [s.spec.max_concurrency for s in shares] == [2, 2, 1]
    assert all(s.spec.sessions == 10 and s.spec.seed == spec.seed for s in shares)
    assert len(split(WorkloadSpec(sessions=2), 4)) == 2  # never a generator without sessions
    assert len(split(WorkloadSpec(sessions=9, max_concurrency=1), 3)) == 1  # one at a time


@pytest.mark.real
def test_generators_in_a_campaign_file_are_validated(tmp_path: Path) -> None:
    data = campaign_data(tmp_path, generators={"count": 2, "resources": {"CPU": 1}})
    text = yaml.safe_dump(data, sort_keys=False)
    with pytest.raises(CampaignError, match=r"c\.yaml:\d+: generators\.resources: .*num_cpus"):
        parse_campaign(load_yaml(text, "c.yaml"))
    data["generators"] = {"count": 0}
    with pytest.raises(CampaignError, match=r"generators\.count"):
        parse_campaign(load_yaml(yaml.safe_dump(data), "c.yaml"))
    data["generators"] = {"count": 2, "resources": {"loadgen": 1}, "labels": LABEL}
    campaign = parse_campaign(load_yaml(yaml.safe_dump(data), "c.yaml"))
    assert campaign.generators is not None and campaign.generators.count == 2
    assert Campaign.model_validate(campaign_data(tmp_path)).generators is None  # the default


@pytest.mark.real
def test_a_cluster_that_cannot_place_the_generators_is_refused(load_machine: str,
                                                              tmp_path: Path) -> None:
    campaign = Campaign.model_validate(campaign_data(
        tmp_path, pools=2, generators={"count": 2, "resources": {"loadgen": 1}}))
    assert unplaceable(campaign.generators, 2) is None
    assert "loadgen: 6 wanted, 4 in the cluster" in (unplaceable(campaign.generators, 3) or "")
    wrong = Campaign.model_validate(campaign_data(
        tmp_path, generators={"count": 1, "resources": {"gpuload": 1}, "labels": {"x": "y"}}))
    reason = unplaceable(wrong.generators, 1) or ""
    assert "gpuload: 1 wanted, 0 in the cluster" in reason and "labels" in reason
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, wrong, "test")
        with pytest.raises(RunFailed, match="cannot place the load generators"):
            run_campaign(store, campaign_id)
        assert store.get_campaign(campaign_id).status == "failed"
        assert store.trials(campaign_id, status=None) == []  # nothing was started


def _sessions(store: Store, campaign_id: str) -> dict[int, tuple[Any, ...]]:
    """Every trial by its sequence number: its variant, seed and sessions, as stored."""
    return {
        t.seq: (tuple(sorted(t.levels.items())), t.seed, [
            (s.idx, s.key, s.outcome, s.turns, s.first_bad_turn, s.evidence)
            for s in sorted(store.sessions(t.id), key=lambda s: s.idx)])
        for t in store.trials(campaign_id)
    }


def _shown(db: Path, campaign_id: str) -> tuple[list[dict[str, Any]], str]:
    """`bisect show`: its JSON rows and its table, one line a trial."""
    runner = CliRunner()
    rows = runner.invoke(app, ["show", campaign_id, "--store", str(db), "--json"]).stdout
    table = runner.invoke(app, ["show", campaign_id, "--store", str(db)],
                          env={"COLUMNS": "250"}).stdout
    return json.loads(rows), table


@pytest.mark.real
def test_a_campaign_with_two_generators_runs_the_same_sessions(
        load_machine: str, tmp_path: Path) -> None:
    results, shown = [], []
    # One pool, two generators on the load machine.
    for generators in (None, {"count": 2, "resources": {"loadgen": 1}}):
        workdir = tmp_path / ("spread" if generators else "alone")
        campaign = Campaign.model_validate(campaign_data(workdir, generators=generators))
        with Store.open(str(workdir / "bisect.db")) as store:
            campaign_id = create_campaign(store, campaign, "test")
            run_campaign(store, campaign_id)
            results.append((_sessions(store, campaign_id),
                            verdict_of(store, campaign_id).to_json()))
            stored = [store.generators(t.id) for t in store.trials(campaign_id)]
        shown.append((stored, *_shown(workdir / "bisect.db", campaign_id)))
    (alone, alone_verdict), (spread, spread_verdict) = results
    assert len(alone) == 8 and spread == alone  # the same keys (so canaries), outcomes, evidence
    assert all(len(sessions) == 20 for _, _, sessions in spread.values())
    assert alone_verdict["status"] == spread_verdict["status"] == Status.CULPRIT
    assert [c["factors"] for c in spread_verdict["culprits"]] == [BAD]
    assert spread_verdict["culprits"] == alone_verdict["culprits"]
    assert spread_verdict["variants"] == alone_verdict["variants"]

    # Where the load ran is stored with every trial, and `bisect show` lists it.
    (alone_stored, alone_rows, alone_table), (stored, rows, table) = shown
    assert alone_stored == [[]] * 8 and all(r["generators"] == [] for r in alone_rows)
    assert alone_table.count(" driver ") == 8
    there = address(load_machine)
    for ran in stored:  # each generator ran its 10 of the 20 sessions on the load machine
        assert [(g.position, g.node_id, g.address, g.sessions, g.finished, g.stopped)
                for g in ran] == [(0, load_machine, there, 10, 10, False),
                                  (1, load_machine, there, 10, 10, False)]
    assert len(rows) == 8 and all(r["generators"] == [
        {"node_id": load_machine, "address": there, "sessions": 10, "finished": 10,
         "stopped": False}] * 2 for r in rows)
    assert table.count(f" {there} 10/10, {there} 10/10 ") == 8


@pytest.mark.real
def test_early_stop_stops_every_generator(load_machine: str, tmp_path: Path) -> None:
    # Half the sessions leak at once, the others hang for the whole timeout: the stop rule
    # decides on the leaks while every generator still has hanging sessions to give up.
    workload = {"sessions": 40, "rounds": 2, "timeout_s": 120, "seed": 5}
    data = campaign_data(tmp_path, wedge_the_rest=True, workload=workload,
                         generators={"count": 2, "labels": LABEL})  # placed by node label
    [first], pool_node = trials(data, TrialOrder(1, BAD, seed=5, stop_rule=STOP))
    assert pool_node == ray.get_runtime_context().get_node_id() != load_machine  # the driver's
    assert [g.node_id for g in first.generators] == [load_machine, load_machine]
    assert [g.address for g in first.generators] == [address(load_machine)] * 2
    assert first.error is None and first.timing.stopped_early
    assert len(first.sessions) == 7  # 7 leaks of 40 decide it; nothing after is kept
    assert all(s.outcome == "leak" for s in first.sessions)
    assert len({s.key for s in first.sessions}) == 7
    assert [g.stopped for g in first.generators] == [True, True]
    assert all(g.finished < g.sessions == 20 for g in first.generators)
    assert {s.key for s in first.sessions} <= {f"s5-{i}" for i in range(40)}


def _in_flight(url: str) -> float:
    """Requests the twin is serving now (0 until it is up)."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return 0
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("sglang:num_running_reqs"))


def _generator_processes() -> dict[int, psutil.Process]:
    """This run's generator actors: under its own Ray (the raylets are this process's
    children), never another run's on a shared machine, which a kill would break."""
    found = {}
    for process in psutil.Process().children(recursive=True):
        try:
            cmdline = process.cmdline()
        except psutil.Error:
            continue  # gone already
        if cmdline and cmdline[0].startswith("ray::LoadGenerator"):
            found[process.pid] = process
    return found


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.1)


@pytest.mark.real
def test_a_killed_generator_is_an_infrastructure_failure(load_machine: str,
                                                         tmp_path: Path) -> None:
    workload = {"sessions": 40, "rounds": 2, "timeout_s": 120, "seed": 5}
    data = campaign_data(tmp_path, wedge_the_rest=True, workload=workload,
                         generators={"count": 2, "resources": {"loadgen": 1}})
    before = set(_generator_processes())
    killed: list[int] = []

    def kill_one(campaign: Campaign) -> None:
        def spawned() -> list[int]:
            return sorted(set(_generator_processes()) - before)

        url = campaign.pools[0].endpoint
        _until(lambda: len(spawned()) == 2, "two generators started")
        # Not the deploy's one /health_generate request: the workload's hung sessions.
        _until(lambda: _in_flight(url) > 5, "the workload running")
        victim = spawned()[0]
        os.kill(victim, signal.SIGKILL)
        killed.append(victim)

    (first, second), _ = trials(data, TrialOrder(1, BAD, seed=5),
                                TrialOrder(2, BAD, seed=5, stop_rule=STOP), during=kill_one)
    assert killed
    assert first.error is not None and first.error.startswith(INFRA_ERROR)
    assert "load generator" in first.error
    assert first.sessions == [] and first.generators == ()  # nothing of it is judged
    # The pool goes on with fresh generators on the load machine.
    assert second.error is None and len(second.sessions) == 7
    assert {g.node_id for g in second.generators} == {load_machine}
