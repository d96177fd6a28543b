"""Shared fixtures: real twins over HTTP, one Ray per test run (per worker); the tiers, pure and
real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from experiments.twin.pool import free_port as free_port  # the tests' one free port
from tests.support import cli_tree, network, ray_start, stops, tiers, workers
from tests.support.reaper import reaper, start_time

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster

REPO = Path(__file__).resolve().parent.parent
network.install()  # from here on, a connect that would leave the machine is refused
stops.install()  # SIGTERM and SIGINT end the run with every fixture torn down
cli_tree.install()  # CliRunner.invoke builds bisect's click tree once, not every call


def pytest_configure(config: pytest.Config) -> None:
    workers.configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    workers.unconfigure(config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup``: the tests grouped by what they share (tests/support/workers.py)."""
    return workers.scheduler(config, log) if config.getoption("dist") == "loadgroup" else None


def pytest_sessionstart(session: pytest.Session) -> None:
    stops.watch(session)  # a signal stops the session after the test in hand


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call() -> None:
    # a fixture's ray.init sets a SIGTERM handler of its own (sys.exit): a CI timeout would then
    # fail one test and the run go on, where it must stop with every fixture torn down
    stops.reclaim()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish() -> None:
    stops.finishing()  # before pytest's own hook tears down the session's fixtures


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m pure`` leaves the modules marked real at their top unimported (tiers.only_real)."""
    return True if tiers.only_real(collection_path, config.option.markexpr) else None


@pytest.hookimpl(tryfirst=True)  # every test, before -m or -k deselects any
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test is marked pure or real, once (tests/support/tiers.py): else no test runs."""
    wrong = tiers.untiered(items)
    if wrong:
        raise pytest.UsageError(
            "each test must carry exactly one of the markers pure and real (pytestmark = "
            "pytest.mark.pure or .real at the module's top, or on the test); these do not:\n  "
            + "\n  ".join(wrong))
    tiers.set_up_first(items)
    workers.publish(items)  # under xdist, the groups its scheduler keeps on one worker


@pytest.fixture(autouse=True)
def pure_stays_pure(request: pytest.FixtureRequest) -> Iterator[None]:
    """A pure test that opens a socket or starts a process fails (tests/support/tiers.py).
    Set up before any other fixture of a pure test, of whatever scope."""
    if request.node.get_closest_marker("pure") is None:
        yield
        return
    purity = tiers.Purity(request.node.nodeid)
    with pytest.MonkeyPatch.context() as patch:
        tiers.guard(patch, purity)
        yield
    assert not purity.attempts, f"marked pure, but it {'; '.join(purity.attempts)}"


@pytest.fixture(autouse=True)
def no_traffic_off_the_machine() -> Iterator[None]:
    """Fail the test that tried to connect off the machine (the guard refused the packet)."""
    network.take_refused()
    yield
    refused = network.take_refused()
    assert not refused, f"the test tried to send traffic off the machine: {refused}"


@pytest.fixture(autouse=True)
def fresh_cli_consoles() -> Iterator[None]:
    """Each test's `bisect` commands print through consoles of their own, as a new process's
    do: rich's console fixes its width at its first use (from COLUMNS then), and a test that
    reads a table must not depend on which test of its worker printed first."""
    yield
    common = sys.modules.get("orchestrator.cli.common")
    for console in (getattr(common, "out", None), getattr(common, "err", None)):
        if console is not None:
            vars(console)["_console"] = None


def wait_healthy(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"twin at {url} not healthy after {timeout_s}s")


@pytest.fixture
def environment() -> Iterator[dict[str, str]]:
    """The environment of a `bisect` run in its own process, with a Ray directory of its own
    (Ray's socket paths must stay under 108 bytes: short, in /tmp)."""
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    yield {**os.environ, "RAY_TMPDIR": ray_tmp, "COLUMNS": "200"}
    subprocess.run(["rm", "-rf", ray_tmp], check=False)


TwinFactory = Callable[..., str]


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[TwinFactory]:
    """Start real twin processes: ``url = twin("--enable-hierarchical-cache", env={...})``."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env: dict[str, str] | None = None, startup_delay: float = 0.0) -> str:
        port = free_port()
        log = open(tmp_path / f"twin-{port}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "experiments.twin", "--port", str(port),
             "--twin-startup-delay", str(startup_delay), *args],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
            env={**os.environ, **(env or {})},
        )
        started.append(proc)
        reaper().send(process=proc.pid, start=start_time(proc.pid))  # if this run is killed
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url)
        return url

    yield start
    for proc in started:
        proc.terminate()
    for proc in started:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reaper().send(process_gone=proc.pid)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Cluster]:
    """One local Ray for the whole run, one for each worker under xdist (starting one costs
    seconds and ~450 MiB): a one-node cluster, to which a test may add nodes
    (test_load_generators.py adds a load machine)."""
    import ray
    from ray.cluster_utils import Cluster

    from orchestrator.executor.ray_pool import local_ray_environment

    # Ray's socket paths must stay under 108 bytes: a short private directory of its own.
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    local_ray_environment()  # as the driver's own Ray: loopback only, a token required
    cluster = ray_start.started(Cluster, {"num_cpus": 2, "include_dashboard": False,
                                          "temp_dir": f"{os.environ['RAY_TMPDIR']}/ray"})
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()
    shutil.rmtree(os.environ.pop("RAY_TMPDIR"), ignore_errors=True)


RAY_JOIN = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")


@pytest.fixture
def on_shared_ray(ray_cluster: Cluster) -> Iterator[dict[str, str]]:
    """What a `bisect` process adds to its environment to run on this worker's Ray
    (`--ray-address`'s variable and the token ``ray_cluster`` set here) instead of starting one
    of its own (~5 s on two cores): for the tests that run the console script for what it does
    with a campaign, not for how it starts Ray. A run that joined leaves the cluster's token
    file alone (a driver used to remove it at exit as if its own)."""
    joining = {"RAY_ADDRESS": str(ray_cluster.address),
               **{name: os.environ[name] for name in RAY_JOIN if name in os.environ}}
    yield joining
    token = joining.get("RAY_AUTH_TOKEN_PATH")
    assert token is None or Path(token).is_file(), f"a run that joined Ray removed {token}"


from tests.lab_fixture import lab, systemd_lab, systemd_node  # noqa: E402, F401 - one of each per run
from tests.postgres_fixture import postgres_server, postgres_url, store_url  # noqa: E402, F401 - one real PostgreSQL per run
from tests.support.demo import demo  # noqa: E402, F401 - one demo per run, from the wheel
