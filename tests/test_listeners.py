"""Who listens on a server's port (deploy/listeners.py): the proof's check that the server a
deploy started is the one its port answers for. Pure: the command line's port, what a node's
answer means. Real: the node's /proc read by the real script, and a trial whose port another
twin already holds, which stops as a setup error naming that process and leaves it running."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.errors import SetupError
from deploy.listeners import check_port, listeners, parse, port_of, program
from deploy.proof import new_boundary
from deploy.transports.local import LocalTransport
from experiments.twin.pool import free_port
from tests.support.fault_campaigns import TrialBench, campaign, twin_service
from tests.support.twins import wait_healthy

pure, real = pytest.mark.pure, pytest.mark.real


@pure
@pytest.mark.parametrize(("argv", "port"), [
    (["python", "-m", "sglang.launch_server", "--port", "30000"], 30000),
    (["vllm", "serve", "m", "--port=8000"], 8000),
    (["x", "--port", "1", "--port", "2"], 2),  # the last, as argparse takes it
    (["x", "--port"], None),
    (["x", "--port", "http"], None),
    (["x", "--port", "70000"], None),
    (["x", "--disaggregation-bootstrap-port", "8998"], None),
    (["bash", "run.sh"], None),
])
def test_the_port_is_the_one_the_command_line_names(argv: list[str], port: int | None) -> None:
    assert port_of(argv) == port


@pure
def test_a_holder_is_shown_without_its_options_values() -> None:
    assert program([b"/usr/bin/python3", b"-m", b"sglang.launch_server", b"--api-key",
                    b"s3cret", b"--port", b"30000"]) == "/usr/bin/python3 -m sglang.launch_server"
    assert program([]) == "an empty command line"


def _answer(boundary: str, sections: dict[str, str]) -> str:
    return "".join(f"{boundary} {name}\n{text}\n{boundary} end 0\n"
                   for name, text in sections.items())


@pure
@pytest.mark.parametrize(("holders", "others"), [
    ("100 7001\n", []),  # the started process
    ("102 7001\n", []),  # its grandchild (a worker that kept the socket)
    ("100 7001\n200 7002\n", ["process 200 (python -m experiments.twin)"]),  # REUSEPORT
    ("200 7001\n", ["process 200 (python -m experiments.twin)"]),
    ("", ["a process this user cannot see"]),
])
def test_every_listener_must_be_the_started_server_s(holders: str, others: list[str]) -> None:
    boundary = new_boundary()
    inodes = " ".join(sorted({line.split()[1] for line in holders.splitlines()} or {"7001"}))
    argv = "".join(f" {b:02x}" for b in b"python\0-m\0experiments.twin\0--port\0" + b"30000\0")
    stdout = _answer(boundary, {
        "listening": inodes, "holders": holders,
        "tree": "1 0\n100 1\n101 100\n102 101\n200 1\n", "argv200": argv})
    seen = parse(stdout, boundary, 30000, 100)
    assert seen.ours == {100, 101, 102}
    assert seen.others() == others


@pure
def test_nothing_listening_is_not_another_s() -> None:
    boundary = new_boundary()
    seen = parse(_answer(boundary, {"listening": "", "holders": "", "tree": "100 1\n"}),
                 boundary, 30000, 100)
    assert seen.others() == [] and seen.checks() == {"port": 30000, "listening": 0,
                                                     "held_by": []}


@pytest.fixture
def impostor(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A twin nobody asked this campaign to start, on the port the campaign's service names."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "experiments.twin", "--port", str(port),
         "--twin-startup-delay", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        wait_healthy([f"http://127.0.0.1:{port}"], [process])
        yield port, process
    finally:
        process.terminate()
        process.wait(timeout=30)


@real
def test_the_node_says_who_holds_the_port(
        impostor: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, process = impostor
    here = LocalTransport("here")
    assert listeners(here, process.pid, port).checks() == {
        "port": port, "listening": 1, "held_by": [process.pid]}
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(SetupError) as raised:
            check_port(here, stranger.pid, ["sleep", f"--port={port}"], "sglang")
    finally:
        stranger.kill()
        stranger.wait()
    assert (f"port {port}, which its command line names, is held by process {process.pid} "
            f"({sys.executable} -m experiments.twin)") in str(raised.value)


@real
def test_a_port_another_server_holds_stops_the_trial_as_setup(
        tmp_path: Path, impostor: tuple[int, subprocess.Popen[bytes]]) -> None:
    """The impostor answers /health at once, so the deploy's health wait passes; the twin the
    deploy started cannot bind the port. Before the check, the proof or the trial's sessions
    went to the impostor; now the trial fails as setup, naming it, and the impostor runs on."""
    port, process = impostor
    pool = {"name": "p", "endpoint": f"http://127.0.0.1:{port}",
            "services": [twin_service(port)]}
    bench = TrialBench(campaign(tmp_path, [pool]), "p")
    try:
        report = bench.run({"page": "p1"})
    finally:
        bench.shutdown()
    assert report.failure == "setup" and report.sessions == [], report.error
    assert f"port {port}" in (report.error or "") and f"process {process.pid}" in (
        report.error or "")
    assert process.poll() is None  # what the operator started is theirs: left running
