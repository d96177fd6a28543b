"""deploy/ for real: the local transport, plain-process services (real child processes, real
process groups, real /proc), rendering a variant into argv/env, and health waits over real HTTP."""

from __future__ import annotations

import http.server
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deploy.health import HealthTimeout, wait_healthy
from deploy.render import LevelSettings, render_service
from deploy.services.base import ServiceConfig
from deploy.services.process import ProcessServiceManager
from deploy.transports.base import TransportError
from deploy.transports.local import LocalTransport
from experiments.twin.pool import free_port

# A service that reports exactly what it received, then waits to be stopped.
CHILD = """\
import json, os, sys, time
print(json.dumps({"argv": sys.argv[1:], "env": os.environ.get("BISECT_TEST_VALUE"),
                  "pid": os.getpid()}), flush=True)
print("ready", flush=True)
time.sleep(300)
"""

# Quoting torture: what a hostile or merely unlucky factor value may contain.
NASTY = [
    "'; touch {dir}/PWNED_x; '",
    "$(touch {dir}/PWNED_y)",
    "`touch {dir}/PWNED_z`",
    "a\nb; touch {dir}/PWNED_n",
    "two words \"double\" 'single' \\back $HOME *",
    "--flag=; rm -rf {dir}/keep &",
]


def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.02)


def process_alive(pid: int) -> bool:
    """A live process, not a zombie (this machine's init reaps orphans only every few seconds)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is alive (not a zombie)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def child_report(manager: ProcessServiceManager, name: str, offset: int = 0) -> dict[str, object]:
    """The first JSON line the child printed after ``offset``, once it is ready."""
    wait_for(lambda: "ready" in manager.read_log(name, offset), what=f"{name} ready")
    first = manager.read_log(name, offset).splitlines()[0]
    report: dict[str, object] = json.loads(first)
    return report


@pytest.fixture
def child(tmp_path: Path) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return [sys.executable, str(script)]


ManagerFactory = Callable[[Path], ProcessServiceManager]


@pytest.fixture
def managers() -> Iterator[ManagerFactory]:
    """Service managers whose services are all stopped at teardown, whatever the test did; any
    process group that ``stop`` leaves behind is killed here and fails the test."""
    made: list[ProcessServiceManager] = []

    def make(workdir: Path) -> ProcessServiceManager:
        made.append(ProcessServiceManager(LocalTransport(), str(workdir)))
        return made[-1]

    yield make
    leaked: list[int] = []
    for mgr in made:
        for pid_file in Path(mgr.workdir).glob("*.pid"):
            pid = int(pid_file.read_text().split()[0])
            mgr.stop(pid_file.name.removesuffix(".pid"))
            if group_alive(pid):
                leaked.append(pid)
                os.killpg(pid, signal.SIGKILL)
    assert not leaked, f"stop() left process groups behind: {leaked}"


@pytest.fixture
def manager(managers: ManagerFactory, tmp_path: Path) -> ProcessServiceManager:
    return managers(tmp_path / "services")


# --- the local transport -----------------------------------------------------------------------


@pytest.mark.real
def test_local_transport_runs_an_argv_and_reports_its_outcome() -> None:
    transport = LocalTransport("here")
    result = transport.run(["sh", "-c", 'echo "out $1"; echo err >&2; exit 3', "sh", "a b"])
    assert (result.returncode, result.stdout, result.stderr) == (3, "out a b\n", "err\n")
    assert not result.ok
    with pytest.raises(TransportError, match="exited 3: err"):
        result.check()
    assert transport.run(["true"]).check().ok


@pytest.mark.real
def test_local_transport_timeout_raises_transport_error() -> None:
    started = time.monotonic()
    with pytest.raises(TransportError, match="timed out"):
        LocalTransport().run(["sleep", "30"], timeout_s=0.3)
    assert time.monotonic() - started < 5


@pytest.mark.real
def test_local_transport_missing_executable_raises_transport_error(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match="cannot run"):
        LocalTransport().run([str(tmp_path / "no-such-program")])


# --- plain-process services --------------------------------------------------------------------


@pytest.mark.real
def test_start_runs_the_exact_argv_and_env_and_logs_them(
    manager: ProcessServiceManager, child: list[str]
) -> None:
    config = ServiceConfig.of("svc", [*child, "--port", "1234", "two words"],
                              {"BISECT_TEST_VALUE": "hello"})
    started = manager.start(config)
    assert started.log_offset == 0
    report = child_report(manager, "svc")
    assert report == {"argv": ["--port", "1234", "two words"], "env": "hello",
                      "pid": started.pid}
    assert manager.pid("svc") == started.pid
    assert manager.is_running("svc")
    assert Path(manager.log_file("svc")).exists()


@pytest.mark.real
def test_second_start_log_offset_points_after_the_first_output(
    manager: ProcessServiceManager, child: list[str]
) -> None:
    first = manager.start(ServiceConfig.of("svc", [*child, "first"], {}))
    child_report(manager, "svc", first.log_offset)
    manager.stop("svc")
    size = Path(manager.log_file("svc")).stat().st_size

    second = manager.start(ServiceConfig.of("svc", [*child, "second"], {}))
    assert second.log_offset == size > 0
    assert child_report(manager, "svc", second.log_offset)["argv"] == ["second"]
    fresh = manager.read_log("svc", second.log_offset)
    assert "first" not in fresh
    assert '"first"' in manager.read_log("svc")  # the whole log keeps both starts


@pytest.mark.real
def test_start_while_running_stops_the_old_instance_first(
    manager: ProcessServiceManager, child: list[str]
) -> None:
    old = manager.start(ServiceConfig.of("svc", [*child, "old"], {}))
    child_report(manager, "svc", old.log_offset)
    new = manager.start(ServiceConfig.of("svc", [*child, "new"], {}))
    assert new.pid != old.pid
    assert not process_alive(old.pid)
    assert child_report(manager, "svc", new.log_offset)["argv"] == ["new"]
    assert manager.is_running("svc") and manager.pid("svc") == new.pid


@pytest.mark.real
def test_stop_kills_the_whole_process_group_including_a_grandchild(
    manager: ProcessServiceManager, tmp_path: Path
) -> None:
    grandchild_file = tmp_path / "grandchild.pid"
    script = f'sleep 300 & echo $! > {grandchild_file}; sleep 300'
    started = manager.start(ServiceConfig.of("svc", ["sh", "-c", script], {}))
    wait_for(lambda: grandchild_file.exists() and grandchild_file.read_text().strip() != "")
    grandchild = int(grandchild_file.read_text())
    assert process_alive(started.pid) and process_alive(grandchild)
    assert os.getpgid(grandchild) == started.pid  # the service leads its own group

    t0 = time.monotonic()
    manager.stop("svc")
    assert time.monotonic() - t0 < 5  # TERM was enough; no waiting out the grace period
    assert not process_alive(started.pid)
    assert not process_alive(grandchild)
    assert not manager.is_running("svc")
    assert manager.pid("svc") is None


@pytest.mark.real
def test_stop_reaches_children_left_behind_by_an_exited_leader(
    manager: ProcessServiceManager, tmp_path: Path
) -> None:
    """A launcher that died still leaves workers holding the GPU and the port: stop them too."""
    orphan_file = tmp_path / "orphan.pid"
    script = f"sleep 300 & echo $! > {orphan_file}; exit 0"
    started = manager.start(ServiceConfig.of("svc", ["sh", "-c", script], {}))
    wait_for(lambda: not process_alive(started.pid), what="the leader to exit")
    orphan = int(orphan_file.read_text())
    assert process_alive(orphan)
    assert not manager.is_running("svc")  # the service itself is gone ...
    manager.stop("svc")
    assert not process_alive(orphan)  # ... and so is what it left behind


@pytest.mark.real
def test_a_leader_that_execs_stays_ours_through_each_exec(
    manager: ProcessServiceManager, tmp_path: Path
) -> None:
    """Inside an exec its environ reads empty: a launcher exec'ing its program (and setsid its
    command, at every start) was "not running" for that moment, a health check's "exited while
    starting". A leader that execs every few ms, asked about all along, is always running."""
    chain = tmp_path / "chain.sh"
    chain.write_text(f'n=$1; [ "$n" -gt 0 ] && {{ sleep 0.003; exec sh {chain} $((n-1)); }}\n'
                     "exec sleep 300\n")
    started = manager.start(ServiceConfig.of("svc", ["sh", str(chain), "2000"], {}))
    seen = [manager.pid("svc") for _ in range(60)]
    assert seen == [started.pid] * 60
    assert Path(f"/proc/{started.pid}/cmdline").read_bytes().startswith(b"sh\0")  # still going


@pytest.mark.real
def test_is_running_is_false_once_the_service_exits(
    manager: ProcessServiceManager,
) -> None:
    manager.start(ServiceConfig.of("svc", ["sh", "-c", "echo bye"], {}))
    wait_for(lambda: not manager.is_running("svc"), timeout_s=1, what="is_running to turn False")
    assert manager.read_log("svc") == "bye\n"


@pytest.mark.real
def test_leftovers_and_leaving_as_found_stop_what_bisect_started(
    manager: ProcessServiceManager, child: list[str]
) -> None:
    # A process service exists only while bisect runs it: whatever the pid file names goes.
    for leave in (lambda: manager.stop_leftover("svc"),
                  lambda: manager.leave_as_found("svc", was_running=False)):
        started = manager.start(ServiceConfig.of("svc", child, {}))
        leave()
        assert not manager.is_running("svc") and not group_alive(started.pid)
        assert manager.pid("svc") is None


@pytest.mark.real
def test_stop_and_inspect_a_never_started_service_are_no_ops(
    manager: ProcessServiceManager,
) -> None:
    manager.stop("ghost")
    assert not manager.is_running("ghost")
    assert manager.pid("ghost") is None
    assert manager.read_log("ghost") == ""


@pytest.mark.real
def test_hostile_values_arrive_verbatim_and_nothing_is_executed(
    manager: ProcessServiceManager, child: list[str], tmp_path: Path
) -> None:
    nasty = [value.format(dir=tmp_path) for value in NASTY]
    (tmp_path / "keep").mkdir()
    name = "svc"
    config = render_service(
        name, [*child, *nasty],
        {"BISECT_TEST_VALUE": nasty[0]},
        [LevelSettings("f", "evil", env={"EVIL": nasty[1], "NL": nasty[3]}, flags=nasty[2:])],
    )
    started = manager.start(config)
    report = child_report(manager, name, started.log_offset)
    assert report["argv"] == [*nasty, *nasty[2:]]
    assert report["env"] == nasty[0]

    cmdline = Path(f"/proc/{started.pid}/cmdline").read_bytes().split(b"\0")[:-1]
    assert [arg.decode() for arg in cmdline] == [*child, *nasty, *nasty[2:]]
    environ = Path(f"/proc/{started.pid}/environ").read_bytes().split(b"\0")
    for key, value in [("BISECT_TEST_VALUE", nasty[0]), ("EVIL", nasty[1]), ("NL", nasty[3])]:
        assert f"{key}={value}".encode() in environ

    manager.stop(name)
    assert not list(tmp_path.glob("PWNED*"))
    assert (tmp_path / "keep").is_dir()


@pytest.mark.real
def test_hostile_service_name_and_workdir_stay_in_their_files(
    managers: ManagerFactory, tmp_path: Path, child: list[str]
) -> None:
    manager = managers(tmp_path / "work dir; touch PWNED_w")
    name = "svc $(touch PWNED_s) `touch PWNED_b`"
    started = manager.start(ServiceConfig.of(name, child, {}))
    assert child_report(manager, name)["pid"] == started.pid
    assert Path(manager.pid_file(name)).read_text().split()[0] == str(started.pid)
    assert manager.is_running(name)
    manager.stop(name)
    assert not manager.is_running(name) and not process_alive(started.pid)
    assert not list(tmp_path.rglob("PWNED*"))
    assert not list(Path.cwd().glob("PWNED*"))


# --- rendering a variant -----------------------------------------------------------------------


@pytest.mark.pure
def test_render_appends_flags_in_factor_order_and_merges_env() -> None:
    levels = [
        LevelSettings("index_k", "bf16", env={"BF16_INDEX_K": "1", "SHARED": "from-index"}),
        LevelSettings("hicache", "on", flags=["--enable-hierarchical-cache", "--hicache-ratio",
                                              "2"]),
        LevelSettings("graph", "off", env={"SHARED": "from-graph"}, flags=["--disable-cuda-graph"]),
    ]
    config = render_service("decode", ["python", "-m", "sglang.launch_server", "--port", "30001"],
                            {"SHARED": "base", "CUDA_VISIBLE_DEVICES": "0"}, levels)
    assert config == ServiceConfig(
        "decode",
        ("python", "-m", "sglang.launch_server", "--port", "30001",
         "--enable-hierarchical-cache", "--hicache-ratio", "2", "--disable-cuda-graph"),
        (("BF16_INDEX_K", "1"), ("CUDA_VISIBLE_DEVICES", "0"), ("SHARED", "from-graph")),
    )


@pytest.mark.pure
def test_render_skips_levels_for_other_services() -> None:
    levels = [
        LevelSettings("hicache", "on", env={"HICACHE": "1"}, flags=["--enable-hierarchical-cache"],
                      services=frozenset({"prefill"})),
        LevelSettings("graph", "off", flags=["--disable-cuda-graph"], services=frozenset()),
        LevelSettings("index_k", "bf16", env={"BF16_INDEX_K": "1"}, services=None),
    ]
    decode = render_service("decode", ["serve"], {}, levels)
    assert decode.argv == ("serve",)
    assert dict(decode.env) == {"BF16_INDEX_K": "1"}
    prefill = render_service("prefill", ["serve"], {}, levels)
    assert prefill.argv == ("serve", "--enable-hierarchical-cache")
    assert dict(prefill.env) == {"BF16_INDEX_K": "1", "HICACHE": "1"}


@pytest.mark.pure
def test_service_config_is_order_independent_in_env() -> None:
    a = ServiceConfig.of("s", ["x"], {"B": "2", "A": "1"})
    b = ServiceConfig.of("s", ("x",), {"A": "1", "B": "2"})
    assert a == b and hash(a) == hash(b)


# --- health waits ------------------------------------------------------------------------------


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if self.path == "/health" else 503
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.mark.real
def test_wait_healthy_returns_quickly_on_200(health_server: str) -> None:
    waited = wait_healthy(f"{health_server}/health", timeout_s=5)
    assert 0 <= waited < 1


@pytest.mark.real
def test_wait_healthy_keeps_reporting_a_non_200(health_server: str) -> None:
    with pytest.raises(HealthTimeout, match="HTTP 503"):
        wait_healthy(f"{health_server}/starting", timeout_s=0.3, interval_s=0.05)


@pytest.mark.real
def test_wait_healthy_fails_fast_when_the_process_exited() -> None:
    started = time.monotonic()
    with pytest.raises(HealthTimeout, match="exited"):
        wait_healthy(f"http://127.0.0.1:{free_port()}/health", timeout_s=30,
                     alive=lambda: False)
    assert time.monotonic() - started < 2


@pytest.mark.real
def test_wait_healthy_times_out() -> None:
    started = time.monotonic()
    with pytest.raises(HealthTimeout, match=r"not healthy after 0\.3s"):
        wait_healthy(f"http://127.0.0.1:{free_port()}/health", timeout_s=0.3, interval_s=0.05,
                     alive=lambda: True)
    assert time.monotonic() - started < 3


@pytest.mark.real
def test_wait_healthy_on_a_real_service(
    manager: ProcessServiceManager, tmp_path: Path
) -> None:
    """The pipeline's path: start a real server process, wait for it, stop it."""
    port = free_port()
    (tmp_path / "health").write_text("ok")
    started = manager.start(ServiceConfig.of(
        "web", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                "--directory", str(tmp_path)], {}))
    wait_healthy(f"http://127.0.0.1:{port}/health", timeout_s=10,
                 alive=lambda: manager.is_running("web"))
    manager.stop("web")
    assert not process_alive(started.pid)
    with pytest.raises(HealthTimeout, match="exited"):
        wait_healthy(f"http://127.0.0.1:{port}/health", timeout_s=10,
                     alive=lambda: manager.is_running("web"))
