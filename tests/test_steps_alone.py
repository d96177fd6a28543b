"""Each step of a trial alone: built with what it needs, run with the pool's parts, read back
from itself; what it leaves running on the pool is its ``settle``. The service manager and the
transport are protocols with two real implementations each (process and systemd, local and
SSH): the pure tests use small fakes of them; the last test runs the deploy steps of one real
twin with the real ones, without the runner."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from deploy.errors import SetupError
from deploy.services.base import ServiceConfig, Started
from deploy.services.factory import manager_for
from deploy.transports.base import CommandResult, TransportError
from deploy.transports.factory import Transports
from experiments.campaign import Campaign
from experiments.secrets import SecretValues
from orchestrator.executor.base import TrialOrder
from orchestrator.executor.source_changes import SourceChanges
from orchestrator.executor.steps.base import (
    DeployFailed,
    Details,
    PoolParts,
    Running,
    Step,
    run_chain,
)
from orchestrator.executor.steps.chain import TrialSteps
from orchestrator.executor.steps.deploy import Apply, Health, Prove, Restart
from orchestrator.executor.steps.workload import Collect
from tests.conftest import free_port
from tests.support.fault_campaigns import twin_service

NODE_CLOCK = 1_700_000_000.25
ROUTER_ONLY: dict[str, Any] = {"name": "route", "services": ["router"], "levels": {
    "rr": {"flags": ["--policy", "round_robin"]}, "ca": {"flags": ["--policy", "cache_aware"]}}}


class Manager:
    """A service manager that starts nothing: it remembers what runs and what each log holds."""

    def __init__(self) -> None:
        self.running: dict[str, ServiceConfig] = {}
        self.logs: dict[str, str] = {}
        self.calls: list[str] = []
        self.refuse = False

    def start(self, config: ServiceConfig) -> Started:
        self.calls.append(f"start {config.name}")
        if self.refuse:
            raise ValueError("a newline in the environment")
        self.running[config.name] = config
        return Started(4000 + len(self.calls), len(self.logs.get(config.name, "").encode()))

    def stop(self, name: str) -> None:
        self.calls.append(f"stop {name}")
        self.running.pop(name, None)

    def is_running(self, name: str) -> bool:
        return name in self.running

    def read_log(self, name: str, offset: int = 0) -> str:
        return self.logs.get(name, "").encode()[offset:].decode()

    def stop_leftover(self, name: str) -> None:  # before and after a campaign: not a step's
        raise AssertionError("no step stops a leftover")

    def leave_as_found(self, name: str, was_running: bool) -> None:
        raise AssertionError("no step leaves a service as found")


class Clock:
    """A transport that answers ``date`` only (all that a restart asks of the node)."""

    node = "here"

    def run(self, argv: Sequence[str], *, timeout_s: float = 60.0) -> CommandResult:
        assert list(argv) == ["date", "+%s.%N"], argv
        return CommandResult(tuple(argv), 0, f"{NODE_CLOCK}\n", "")

    def close(self) -> None:
        pass


def parts(tmp_path: Path, manager: Manager, server_engine: str = "sglang") -> PoolParts:
    """A pool of a server (of ``server_engine``) and its router on one local node; the factor
    touches the router."""
    def service(name: str, port: int) -> dict[str, Any]:
        return {"name": name, "node": "here", "start": ["serve", "--port", str(port)],
                "health_url": f"http://127.0.0.1:{port}/health",
                "engine": server_engine if name == "server" else "sglang"}

    campaign = Campaign.model_validate({
        "name": "alone", "nodes": [{"name": "here", "workdir": str(tmp_path)}],
        "pools": [{"name": "p", "endpoint": "http://127.0.0.1:9001/v1",
                   "services": [service("server", 9000), service("router", 9001)]}],
        "factors": [ROUTER_ONLY], "workload": {"sessions": 1, "rounds": 1},
        "strategy": {"kind": "factorial", "repeats": 1}})
    pool = campaign.pools[0]
    return PoolParts(campaign, pool, SecretValues({}), {"here": Clock()},
                     {"server": manager, "router": manager},
                     SourceChanges(campaign, pool, Transports(campaign.nodes)))  # nothing to move


def trial(parts: PoolParts, running: Running, policy: str) -> TrialSteps:
    return TrialSteps.of(TrialOrder(1, {"route": policy}, 7), parts.pool.services, running)


@pytest.mark.pure
def test_apply_restarts_only_what_the_variant_changes(tmp_path: Path) -> None:
    manager = Manager()
    pool = parts(tmp_path, manager)
    first = Apply({"route": "rr"}, {})
    assert asyncio.run(first.run(pool)) == {"files_changed_on": [],
                                            "restarting": ["router", "server"]}
    assert first.configs["router"].argv[-2:] == ("--policy", "round_robin")
    manager.running = dict(first.configs)

    second = Apply({"route": "ca"}, first.configs)  # what the first trial proved
    assert asyncio.run(second.run(pool))["restarting"] == ["router"]
    assert second.configs["server"] == first.configs["server"] and not second.stopped
    del manager.running["server"]  # it died meanwhile: restarted, whatever the variant
    assert asyncio.run(Apply({"route": "rr"}, first.configs).run(pool))["restarting"] == [
        "server"]
    assert manager.calls == []  # no files move: nothing stopped


@pytest.mark.pure
def test_a_trial_restarts_proves_and_keeps_what_it_proved(tmp_path: Path) -> None:
    """Each step reads only the steps before it; ``running`` changes as each one settles."""
    manager = Manager()
    pool = parts(tmp_path, manager)
    running = Running()
    steps = trial(pool, running, "rr")
    rows, failed = asyncio.run(run_chain(steps.deploy[:2], pool, running))  # apply, restart
    assert failed is None and [r.outcome for r in rows] == ["ok", "ok"]
    restart = steps.services[0][0]
    assert rows[1].details == {"pid": 4001, "deployed_at": NODE_CLOCK}
    assert restart.started == Started(4001, 0) and restart.deployed_at == NODE_CLOCK
    assert running == Running({}, {"server": 0})  # started, not proven yet

    prove = steps.services[0][2]
    prove.proven = steps.apply.configs["server"]  # as a proof that passed leaves it
    prove.settle(running)
    assert running.configs == {"server": steps.apply.configs["server"]}
    assert steps.restarts == 1


@pytest.mark.pure
def test_a_step_of_an_unchanged_service_is_skipped(tmp_path: Path) -> None:
    manager = Manager()
    pool = parts(tmp_path, manager)
    apply = Apply({"route": "rr"}, {})
    asyncio.run(apply.run(pool))
    manager.running = dict(apply.configs)
    running = Running(dict(apply.configs), {"server": 10, "router": 3})
    steps = trial(pool, running, "ca")
    server: list[Step] = [steps.apply, *steps.services[0]]
    rows, failed = asyncio.run(run_chain(server, pool, running))
    assert failed is None and rows[0].details["restarting"] == ["router"]
    assert [(r.name, r.service, r.outcome, r.details) for r in rows[1:]] == [
        (name, "server", "skipped", {"reason": "the variant leaves it unchanged"})
        for name in ("restart", "health", "prove")]
    assert running == Running(dict(apply.configs), {"server": 10, "router": 3})  # as it was
    assert manager.calls == []


@pytest.mark.pure
def test_a_restart_the_manager_refuses_fails_the_variant(tmp_path: Path) -> None:
    manager = Manager()
    manager.refuse = True
    pool = parts(tmp_path, manager)
    old = Apply({"route": "rr"}, {})
    asyncio.run(old.run(pool))
    running = Running(dict(old.configs), {"server": 5})
    steps = trial(pool, running, "rr")
    rows, failed = asyncio.run(run_chain(steps.steps, pool, running))
    assert isinstance(failed, DeployFailed)
    assert [(r.name, r.outcome) for r in rows[:3]] == [
        ("apply", "ok"), ("restart", "failed"), ("health", "skipped")]
    assert rows[1].details == {"error": "server: cannot apply the variant: a newline in the "
                                        "environment", "failure": "variant"}
    assert {r.outcome for r in rows[2:]} == {"skipped"} and steps.result is None
    # Its old process may be gone: restarted at the next trial whatever it asks.
    assert running == Running({"router": old.configs["router"]}, {"server": 5})


@pytest.mark.pure
def test_collect_reads_each_log_from_where_it_was_left(tmp_path: Path) -> None:
    manager = Manager()
    pool = parts(tmp_path, manager)
    before = "Traceback (most recent call last)\n"
    manager.logs = {"server": before + "x\nWaitingForInput\n",
                    "router": "restarted\nAborted by AbortReq\n"}
    apply = Apply({"route": "rr"}, {})
    restart = Restart(pool.pool.services[1], apply)
    restart.started = Started(9, len("restarted\n"))  # this trial restarted the router
    collect = Collect({"server": len(before.encode())}, {"router": restart})
    assert asyncio.run(collect.run(pool)) == {"log_events": 2}
    assert [(row.service, row.line_no, row.kind) for row in collect.logs] == [
        ("server", 2, "wedge"), ("router", 1, "abort")]
    assert collect.performance is None  # no stress in this chain
    running = Running({}, {"server": 0, "router": 0})
    collect.settle(running)
    assert running.log_read == {"server": len(manager.logs["server"]),
                                "router": len(manager.logs["router"])}


@pytest.mark.pure
def test_collect_reads_each_log_with_its_own_engines_wedge_signs(tmp_path: Path) -> None:
    manager = Manager()
    pool = parts(tmp_path, manager, server_engine="vllm")
    parser_error = "(APIServer pid=1) ERROR 12-06 16:46:44 [hermes_tool_parser.py:117] Error " \
                   "in extracting tool call from response.\n"
    manager.logs = {"server": parser_error + "(APIServer pid=1) ERROR 12-06 16:50:01 "
                              "[async_llm.py:410] EngineDeadError: EngineCore encountered an "
                              "issue.\n",
                    "router": parser_error}
    collect = Collect({"server": 0, "router": 0}, {})
    assert asyncio.run(collect.run(pool)) == {"log_events": 2}
    assert [(row.service, row.line_no, row.kind) for row in collect.logs] == [
        ("server", 2, "wedge"), ("router", 1, "error")]


class Raises:
    """A step that fails with ``error`` and remembers being settled."""

    def __init__(self, error: Exception) -> None:
        self.error, self.settled = error, False
        self.name, self.service = "raises", None

    async def run(self, parts: PoolParts) -> Details:
        raise self.error

    def settle(self, running: Running) -> None:
        self.settled = True


@pytest.mark.pure
@pytest.mark.parametrize(("error", "failure"), [
    (TransportError("ssh: connection reset"), "infrastructure"),
    (SetupError("here: unit sglang.service is not installed"), "setup"),
    (DeployFailed("p: not loaded", {"problems": ["a marker"]}), "variant"),
])
def test_a_failure_s_class_is_its_type(tmp_path: Path, error: Exception, failure: str) -> None:
    step, after = Raises(error), Raises(RuntimeError("never run"))
    chain: list[Step] = [step, after]
    rows, failed = asyncio.run(run_chain(chain, parts(tmp_path, Manager()), Running()))
    assert failed is error and step.settled and not after.settled
    assert rows[0].details == {"error": str(error), "failure": failure,
                               **getattr(error, "details", {})}
    assert (rows[1].outcome, rows[1].details) == ("skipped", {"reason": "an earlier step failed"})


@pytest.mark.real
def test_the_deploy_steps_of_one_real_twin_alone(tmp_path: Path) -> None:
    """Restart, health and prove of one twin, with the process manager and the local transport;
    a second prove, of a marker the twin never logs, fails as the variant's."""
    spec = twin_service(free_port(), startup_timeout_s=30)
    campaign = Campaign.model_validate({
        "name": "alone", "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [{"name": "p", "endpoint": spec["health_url"].replace("/health", "/v1"),
                   "services": [spec]}],
        "factors": [{"name": "page", "levels": {"p1": {"flags": ["--page-size", "1"]},
                                                "p2": {"flags": ["--page-size", "2"],
                                                       "log_markers": ["never logged"]}}}],
        "workload": {"sessions": 1, "rounds": 1}, "strategy": {"kind": "factorial"}})
    pool, transports = campaign.pools[0], Transports(campaign.nodes)
    service = pool.services[0]
    parts = PoolParts(campaign, pool, SecretValues({}), transports,
                      {service.name: manager_for("process", transports["here"],
                                                 service=service.name,
                                                 workdir=str(tmp_path / "services"))},
                      SourceChanges(campaign, pool, transports))
    try:
        apply = Apply({"page": "p1"}, {})
        restart = Restart(service, apply)
        prove = Prove(service, apply, restart)
        steps: list[Step] = [apply, restart, Health(service, apply, restart), prove]
        details = [asyncio.run(step.run(parts)) for step in steps]
        assert details[3]["checks"]["argv"][0] == sys.executable
        assert details[3]["checks"]["markers"] == {"The server is fired up and ready to roll!":
                                                   True}
        assert prove.proven == apply.configs[service.name]

        again = Apply({"page": "p2"}, {service.name: apply.configs[service.name]})
        restart = Restart(service, again)
        redeploy: list[Step] = [again, restart, Health(service, again, restart)]
        for step in redeploy:
            asyncio.run(step.run(parts))
        with pytest.raises(DeployFailed, match="never logged"):
            asyncio.run(Prove(service, again, restart).run(parts))
    finally:
        parts.managers[service.name].stop(service.name)
        transports.close()
