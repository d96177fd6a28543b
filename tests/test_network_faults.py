"""Network faults on the way to the servers and the nodes: each is an infrastructure failure.

Between the orchestrator and a twin (the workload's endpoint, the health URL, the metrics URL)
and between the orchestrator and a lab host's sshd sits a fault proxy with toxiproxy's kinds
(tests/support/fault_proxy.py); the lab's veths get a `tc` queueing discipline. Whatever the
fault, no session is counted corrupt: the workload sees errors or timeouts, a deploy that cannot
reach its node fails the trial as an infrastructure error that the driver retries, and a node
that stays unreachable fails the campaign (exit 1, a message) with the node restorable after.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.health import HealthTimeout, wait_healthy
from tests.conftest import free_port
from tests.support.fault_campaigns import (
    TrialBench,
    campaign,
    corrupt,
    outcomes,
    twin_service,
)
from tests.support.fault_proxy import FaultProxy, Toxic

pytestmark = pytest.mark.real

P1, P2 = {"page": "p1"}, {"page": "p2"}


@dataclass
class ProxiedTwin:
    """A twin whose endpoint, health and metrics each go through their own fault proxy."""

    endpoint: FaultProxy
    health: FaultProxy
    metrics: FaultProxy
    bench: TrialBench

    def clean(self) -> None:
        for proxy in (self.endpoint, self.health, self.metrics):
            proxy.clear()
            proxy.up()


# a twin's start on a loaded 2-core machine takes seconds; the health tests wait all of it
HEALTH_WAIT_S = 20


@contextmanager
def proxied_twin(workdir: Path, *, stream: bool) -> Iterator[ProxiedTwin]:
    port = free_port()
    upstream = ("127.0.0.1", port)
    with (FaultProxy(upstream, seed=1) as endpoint, FaultProxy(upstream) as health,
          FaultProxy(upstream) as metrics):
        service = twin_service(port, health=health.url("/health"),
                               metrics=metrics.url("/metrics"),
                               startup_timeout_s=HEALTH_WAIT_S)
        pool = {"name": "p", "endpoint": endpoint.url(), "services": [service]}
        bench = TrialBench(campaign(workdir, [pool], workload={"stream": stream}), "p")
        try:
            assert bench.deploy(P1) == 1
            yield ProxiedTwin(endpoint, health, metrics, bench)
        finally:
            bench.shutdown()


@pytest.fixture(scope="module")
def json_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedTwin]:
    with proxied_twin(tmp_path_factory.mktemp("net"), stream=False) as made:
        yield made


@pytest.fixture(scope="module")
def sse_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedTwin]:
    with proxied_twin(tmp_path_factory.mktemp("net"), stream=True) as made:
        yield made


def _cleaned(made: ProxiedTwin) -> Iterator[ProxiedTwin]:
    made.clean()
    yield made
    made.clean()


@pytest.fixture
def twin(json_twin: ProxiedTwin) -> Iterator[ProxiedTwin]:
    """The twin asked for JSON replies, its paths clean."""
    yield from _cleaned(json_twin)


@pytest.fixture(params=["json", "sse"])
def either_twin(request: pytest.FixtureRequest) -> Iterator[ProxiedTwin]:
    """Each of the twins, asked for JSON replies and for SSE streams."""
    yield from _cleaned(request.getfixturevalue(f"{request.param}_twin"))


def test_a_clean_path_serves_every_session(twin: ProxiedTwin) -> None:
    report = twin.bench.run(P1)
    assert report.error is None and outcomes(report) == ["ok"] * 6
    assert report.timing.restarts == 0  # the same variant again: nothing restarted


@pytest.mark.parametrize("toxic", [
    Toxic("slicer", average_size=7, size_variation=6, delay_us=50),
    Toxic("latency", latency_ms=40, jitter_ms=30),
    Toxic("bandwidth", rate_kbps=200),
    Toxic("slow_close", delay_ms=300),
], ids=lambda t: t.kind)
def test_faults_that_only_slow_the_way_change_no_outcome(either_twin: ProxiedTwin,
                                                         toxic: Toxic) -> None:
    # Bytes cut into 1-13 byte pieces, delayed or throttled are the same bytes: the client's
    # JSON and SSE parsing must judge them exactly as without the fault.
    either_twin.endpoint.add(toxic)
    report = either_twin.bench.run(P1)
    assert report.error is None and outcomes(report) == ["ok"] * 6


@pytest.mark.parametrize("toxic", [
    Toxic("reset_peer"), Toxic("limit_data", bytes=600), Toxic("timeout", timeout_ms=300),
    Toxic("reset_peer", "upstream", timeout_ms=20)], ids=lambda t: f"{t.kind}-{t.direction}")
def test_faults_that_break_the_way_are_errors_never_corruption(either_twin: ProxiedTwin,
                                                               toxic: Toxic) -> None:
    either_twin.endpoint.add(toxic)
    report = either_twin.bench.run(P1)
    assert report.error is None  # the trial ran: its sessions are the record of the fault
    assert set(outcomes(report)) == {"error"} and len(report.sessions) == 6


@pytest.mark.parametrize("toxic", [
    Toxic("timeout", "upstream", timeout_ms=0),  # a hang: the client gives up
    Toxic("latency", latency_ms=5000),
], ids=["timeout_hang", "latency_over_the_timeout"])
def test_faults_that_hold_the_answer_back_are_timeouts_never_corruption(
        twin: ProxiedTwin, toxic: Toxic) -> None:
    twin.endpoint.add(toxic)
    report = twin.bench.run(P1)
    assert report.error is None
    assert set(outcomes(report)) == {"timeout"} and len(report.sessions) == 6


def test_an_endpoint_that_is_down_gives_errors(twin: ProxiedTwin) -> None:
    twin.endpoint.down()
    report = twin.bench.run(P1)
    assert report.error is None and set(outcomes(report)) == {"error"}


def test_a_fault_on_some_connections_only_errs_those(twin: ProxiedTwin) -> None:
    twin.endpoint.add(Toxic("reset_peer", toxicity=0.5))
    report = twin.bench.run(P1)
    assert set(outcomes(report)) <= {"ok", "error"} and corrupt(report) == 0


@pytest.mark.parametrize("toxic", [
    Toxic("timeout", timeout_ms=0), Toxic("reset_peer"), Toxic("limit_data", bytes=100)],
    ids=lambda t: t.kind)
def test_a_broken_metrics_url_is_a_gap_in_the_series_not_a_failed_trial(
        twin: ProxiedTwin, toxic: Toxic) -> None:
    twin.metrics.add(toxic)
    report = twin.bench.run(P1)
    assert report.error is None and outcomes(report) == ["ok"] * 6
    assert report.metrics == []


def _break(health: FaultProxy, fault: str) -> None:
    if fault == "down":
        health.down()
    else:
        health.add(Toxic("timeout", timeout_ms=0) if fault == "hang" else Toxic("reset_peer"))


@pytest.mark.parametrize(("fault", "last"), [
    ("down", "Connection refused"), ("hang", "timed out"), ("reset_peer", "reset")])
def test_the_health_wait_ends_at_its_timeout_naming_the_url_and_the_last_answer(
        twin: ProxiedTwin, fault: str, last: str) -> None:
    """Each way the health URL is out of reach, on the wait itself (the deploy's, below, waits
    HEALTH_WAIT_S: long enough for a twin's start on a loaded machine, once is enough)."""
    _break(twin.health, fault)
    url = twin.health.url("/health")
    with pytest.raises(HealthTimeout) as raised:
        wait_healthy(url, 1.5, interval_s=0.05)
    said = str(raised.value)
    assert said.startswith(f"{url}: not healthy after 1.5s (last: ") and last in said, said


def test_a_health_url_out_of_reach_fails_the_deploy_with_its_reason(twin: ProxiedTwin) -> None:
    _break(twin.health, "reset_peer")
    report = twin.bench.run(P2)  # a restart: the deploy waits on the health URL
    assert report.error is not None and report.sessions == []
    assert twin.health.url("/health") in report.error
    assert f"not healthy after {HEALTH_WAIT_S}s" in report.error
    twin.clean()
    healed = twin.bench.run(P1)  # the heal: the next deploy restarts and serves again
    assert healed.error is None and healed.timing.restarts == 1
    assert outcomes(healed) == ["ok"] * 6
