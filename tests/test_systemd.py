"""The systemd service manager against real systemd: a lab host that is a container with systemd
252 as PID 1, reached over real SSH. Variants become drop-ins on an operator's unit; they must
arrive byte-exact, run nothing, replace each other, log per start, and leave the unit exactly as
it was. Plus the quoting rules on their own, and a systemd lab that leaves nothing behind."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploy.errors import SetupError
from deploy.health import wait_healthy
from deploy.lab import Lab, lab_status, load_lab
from deploy.lab.net import default_prefix, owned
from deploy.lab.systemd_host import CGROUP_PREFIX, cgroup2_root
from deploy.lab.units import install_unit, service_unit
from deploy.services.base import ServiceConfig
from deploy.services.systemd import (
    UNIT_DIR,
    SystemdServiceManager,
    VariantNotApplied,
    render_dropin,
    render_env_file,
    unit_quote,
)
from deploy.transports.ssh import SSHTransport
from orchestrator.cli import app

needs_root = pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"),
                                reason="a systemd lab host needs root")
PY = sys.executable  # absolute: systemd resolves bare names in its own PATH, not the venv's
PORT = 30000
HOSTILE = ["'; touch /tmp/PWNED_q; '", "$(touch /tmp/PWNED_d)", "`touch /tmp/PWNED_b`",
           "${HOME} $HOME $$", "%h %n %%", "two  words", 'a "double" and \'single\'',
           "back\\slash \\n \\x41", "", ";", "semi; touch /tmp/PWNED_s", "tab\there",
           "line\nbreak", "ünïcode ☃", "-", "--flag=x y"]
SLEEPER = [PY, "-c", "import sys, time; print('argv', sys.argv[1:], flush=True); time.sleep(600)"]


# -- the quoting on its own (no root needed) --

@pytest.mark.pure
def test_unit_quote_escapes_what_systemd_interprets() -> None:
    assert unit_quote('a "b" \\c %h $X', expand_dollar=True) == '"a \\"b\\" \\\\c %%h $$X"'
    assert unit_quote("$X %h", expand_dollar=False) == '"$X %%h"'  # Environment= keeps $
    assert unit_quote("a\nb\tc\x01", expand_dollar=False) == '"a\\nb\\tc\\x01"'


@pytest.mark.pure
def test_render_dropin_resets_execstart_and_refuses_what_systemd_cannot_hold() -> None:
    config = ServiceConfig.of("s", ["/bin/x", "a b"], {"K": "v %"})
    text = render_dropin(config, "/run/e")
    assert text.splitlines()[-3:] == ["EnvironmentFile=/run/e", "ExecStart=",
                                      'ExecStart="/bin/x" "a b"']
    assert "v %" not in text  # values live in the environment file, not in the unit
    assert render_env_file(config) == "K='v %'\n"
    assert "ExecStart" not in render_dropin(ServiceConfig.of("s", [], {"K": "v"}), "/run/e")
    assert "EnvironmentFile" not in render_dropin(ServiceConfig.of("s", ["/bin/x"], {}), "/e")
    with pytest.raises(ValueError, match="absolute path"):
        render_dropin(ServiceConfig.of("s", ["-/bin/x"], {}), "/run/e")
    with pytest.raises(ValueError, match="environment variable name"):
        render_env_file(ServiceConfig.of("s", ["/bin/x"], {"A-B": "1"}))
    with pytest.raises(ValueError, match="control characters"):
        render_env_file(ServiceConfig.of("s", ["/bin/x"], {"A": "\x1b[0m"}))
    manager = SystemdServiceManager(None, unit_prefix="sglang-")  # type: ignore[arg-type]
    assert manager.unit("prefill") == "sglang-prefill.service"
    with pytest.raises(ValueError):
        manager.unit("../../etc/passwd")


# -- against a real systemd --

@pytest.fixture(scope="module")
def twin_unit(systemd_lab: Lab, systemd_node: SSHTransport) -> str:
    """The operator's unit: a twin on the host's address. Returns its `systemctl cat`."""
    argv = twin_argv(systemd_lab)
    install_unit(systemd_node, "twin.service",
                 service_unit(argv, description="twin (an SGLang node)"))
    return SystemdServiceManager(systemd_node).describe("twin")


@pytest.fixture
def manager(systemd_node: SSHTransport, twin_unit: str) -> Iterator[SystemdServiceManager]:
    made = SystemdServiceManager(systemd_node)
    yield made
    made.stop("twin")
    made.remove_dropin("twin")


def twin_argv(lab: Lab, *flags: str) -> list[str]:
    # healthy as soon as it listens (its default waits 1 s first): the tests wait on it often
    return [PY, "-m", "experiments.twin", "--host", lab.host(1).address, "--port", str(PORT),
            "--twin-startup-delay", "0", *flags]


@pytest.mark.real
@needs_root
def test_the_host_runs_systemd_as_pid_1_over_ssh(systemd_lab: Lab,
                                                  systemd_node: SSHTransport) -> None:
    out = systemd_node.run([
        "sh", "-c", 'readlink /proc/1/exe; hostname; test -x "$1" && echo sees-venv; '
        "systemctl is-system-running || true", "sh", PY]).check().stdout.split()
    assert out[0].endswith("/systemd") and out[1] == "lab-1" and out[2] == "sees-venv"
    assert out[3] in ("running", "degraded")
    status = lab_status(systemd_lab.directory)
    assert status.state == "up" and status.hosts[0].systemd and status.hosts[0].sshd


@pytest.mark.real
@needs_root
def test_variants_start_exactly_replace_each_other_and_log_per_start(
    systemd_lab: Lab, manager: SystemdServiceManager
) -> None:
    url = f"http://{systemd_lab.host(1).address}:{PORT}"
    first = ServiceConfig.of("twin", twin_argv(systemd_lab, "--enable-hierarchical-cache"),
                             {"BF16_INDEX_K": "1", "ONLY_FIRST": "yes"})
    a = manager.start(first)
    wait_healthy(f"{url}/health", 30, alive=lambda: manager.is_running("twin"))
    argv, env = manager.process(a.pid)
    assert argv == list(first.argv) and manager.main_pid("twin") == a.pid
    assert env["BF16_INDEX_K"] == "1" and env["ONLY_FIRST"] == "yes"
    assert env["PYTHONUNBUFFERED"] == "1"  # the unit's own environment stays underneath
    first_log = manager.read_log("twin", a.log_offset)
    assert first_log.count("The server is fired up and ready to roll!") == 1

    second = ServiceConfig.of("twin", twin_argv(systemd_lab, "--disable-cuda-graph"),
                              {"BF16_INDEX_K": "0"})
    b = manager.start(second)
    wait_healthy(f"{url}/health", 30, alive=lambda: manager.is_running("twin"))
    argv, env = manager.process(b.pid)
    assert b.pid != a.pid and argv == list(second.argv)
    assert env["BF16_INDEX_K"] == "0" and "ONLY_FIRST" not in env
    log = manager.read_log("twin", b.log_offset)
    assert log.count("The server is fired up and ready to roll!") == 1
    assert "disable_cuda_graph=True" in log and "enable_hierarchical_cache=True" not in log
    # Like a file offset: adding what was read moves past it.
    assert manager.read_log("twin", b.log_offset + len(log.encode())) == ""

    manager.stop("twin")
    assert not manager.is_running("twin")
    assert "Stopped twin.service" in manager.read_log("twin", b.log_offset + len(log.encode()))


@pytest.mark.real
@needs_root
def test_hostile_values_arrive_verbatim_and_run_nothing(
    systemd_lab: Lab, systemd_node: SSHTransport, manager: SystemdServiceManager
) -> None:
    env = {f"HOSTILE_{i}": value for i, value in enumerate(HOSTILE) if "\n" not in value}
    env["HOSTILE_NL"] = "line\nbreak"  # newlines are allowed in values, escaped as \n
    config = ServiceConfig.of("twin", [*SLEEPER, *HOSTILE], env)
    started = manager.start(config)
    argv, seen = manager.process(started.pid)
    assert argv == list(config.argv)
    assert {key: seen.get(key) for key in env} == env
    assert "argv" in manager.read_log("twin", started.log_offset)
    pwned = systemd_node.run(["sh", "-c", "ls /tmp/PWNED_* 2>/dev/null || true"]).check().stdout
    assert pwned == "" and not list(Path("/tmp").glob("PWNED_*"))


@pytest.mark.real
@needs_root
def test_removing_the_dropin_restores_the_unit_exactly(
    systemd_node: SSHTransport, twin_unit: str, manager: SystemdServiceManager
) -> None:
    # A bare command name is resolved on the node, as a plain-process start would run it.
    started = manager.start(ServiceConfig.of("twin", ["sleep", "600"], {"X": "1"}))
    argv, _ = manager.process(started.pid)
    assert argv[0].startswith("/") and argv[0].endswith("/sleep") and argv[1:] == ["600"]
    with pytest.raises(SetupError, match="not a command"):
        manager.start(ServiceConfig.of("twin", ["no-such-command"], {}))
    assert "zz-bisect.conf" in manager.describe("twin")
    # One an earlier bisect left under /etc (it wrote its drop-ins there) goes too.
    legacy = "/etc/systemd/system/twin.service.d"
    systemd_node.run(["sh", "-c", f"mkdir -p {legacy} && echo '[Service]' > {legacy}/zz-bisect.conf"
              " && systemctl daemon-reload"]).check()
    manager.remove_dropin("twin", restart=True)
    assert manager.describe("twin") == twin_unit
    for directory in (f"{UNIT_DIR}/twin.service.d", legacy):
        assert systemd_node.run(["test", "-e", directory]).returncode == 1
    _, env = manager.process(manager.main_pid("twin"))  # restarted: the operator's config again
    assert "X" not in env and env["PYTHONUNBUFFERED"] == "1"


@pytest.mark.real
@needs_root
def test_leaving_a_unit_as_found_keeps_a_running_one_running_and_a_stopped_one_stopped(
    systemd_lab: Lab, systemd_node: SSHTransport, twin_unit: str, manager: SystemdServiceManager
) -> None:
    url = f"http://{systemd_lab.host(1).address}:{PORT}"
    manager.stop_leftover("twin")  # the operator's unit is never a leftover: untouched
    systemd_node.run(["systemctl", "start", "twin.service"]).check()  # the operator's, running
    manager.stop_leftover("twin")
    operators = manager.main_pid("twin")
    assert manager.is_running("twin") and operators > 0
    manager.start(ServiceConfig.of("twin", twin_argv(systemd_lab, "--disable-cuda-graph"),
                                   {"X": "1"}))
    manager.leave_as_found("twin", was_running=True)
    wait_healthy(f"{url}/health", 30, alive=lambda: manager.is_running("twin"))
    assert manager.describe("twin") == twin_unit  # no drop-in: the operator's unit exactly
    argv, env = manager.process(manager.main_pid("twin"))
    assert manager.main_pid("twin") != operators  # started again, not a variant left running
    assert argv == twin_argv(systemd_lab) and "X" not in env and env["PYTHONUNBUFFERED"] == "1"

    manager.stop("twin")  # not running before this campaign: not running after it
    manager.start(ServiceConfig.of("twin", SLEEPER, {"X": "2"}))
    manager.leave_as_found("twin", was_running=False)
    assert not manager.is_running("twin") and manager.describe("twin") == twin_unit
    assert systemd_node.run(["test", "-e", f"{UNIT_DIR}/twin.service.d"]).returncode == 1


@pytest.mark.real
@needs_root
def test_a_missing_unit_or_an_overriding_environment_is_refused(
    systemd_lab: Lab, systemd_node: SSHTransport, twin_unit: str
) -> None:
    manager = SystemdServiceManager(systemd_node)
    with pytest.raises(SetupError, match="not installed"):
        manager.start(ServiceConfig.of("ghost", SLEEPER, {}))
    assert systemd_node.run(["test", "-e", f"{UNIT_DIR}/ghost.service.d"]).returncode == 1
    # The operator's own EnvironmentFile= is read before the variant's: the variant wins.
    systemd_node.run(["sh", "-c", "echo BF16_INDEX_K=0 > /etc/default/pinned"]).check()
    install_unit(systemd_node, "pinned.service", service_unit(SLEEPER, description="pinned")
                 + "EnvironmentFile=/etc/default/pinned\n")
    try:
        started = manager.start(ServiceConfig.of("pinned", SLEEPER, {"BF16_INDEX_K": "1"}))
        assert manager.process(started.pid)[1]["BF16_INDEX_K"] == "1"
    finally:
        manager.stop("pinned")
        manager.remove_dropin("pinned")
    # UnsetEnvironment= is applied last: the variant would silently not be applied.
    install_unit(systemd_node, "unset.service", service_unit(SLEEPER, description="unset")
                 + "UnsetEnvironment=BF16_INDEX_K\n")
    try:
        with pytest.raises(VariantNotApplied, match="BF16_INDEX_K"):
            manager.start(ServiceConfig.of("unset", SLEEPER, {"BF16_INDEX_K": "1"}))
    finally:
        manager.stop("unset")
        manager.remove_dropin("unset")


@pytest.mark.real
@needs_root
def test_the_variants_environment_is_in_no_unit_property_and_never_on_disk(
    systemd_lab: Lab, systemd_node: SSHTransport, manager: SystemdServiceManager
) -> None:
    # Only a file written since the secret was made can hold it: those are searched (the
    # host's /etc and /var are the machine's, with gigabytes of caches written long before).
    since = "/tmp/bisect-secret-since"
    systemd_node.run(["sh", "-c", 'touch -d "@$(($(date +%s) - 2))" "$1"', "sh", since]).check()

    def files_holding(secret: str, *directories: str) -> str:
        return systemd_node.run(["find", *directories, "-type", "f", "-newer", since, "-exec",
                                 "grep", "-l", "--", secret, "{}", "+"]).stdout

    secret = "s3cr3t-" + os.urandom(8).hex()
    started = manager.start(ServiceConfig.of("twin", SLEEPER, {"API_TOKEN": secret}))
    try:
        assert manager.process(started.pid)[1]["API_TOKEN"] == secret
        # What any user of the node may read over D-Bus: the unit's properties.
        shown = systemd_node.run(["systemctl", "show", "twin.service"]).check().stdout
        assert secret not in shown and f"{UNIT_DIR}/twin.service.d/zz-bisect.env" in shown
        assert files_holding(secret, "/etc", "/var", "/usr/lib/systemd") == ""
        # (the search finds what is there: the environment file, in memory under /run)
        assert files_holding(secret, UNIT_DIR).split() == [
            f"{UNIT_DIR}/twin.service.d/zz-bisect.env"]
        mode = systemd_node.run(["stat", "-c", "%a", f"{UNIT_DIR}/twin.service.d/zz-bisect.env"])
        assert mode.check().stdout.strip() == "600"
    finally:
        manager.remove_dropin("twin", restart=True)
    assert systemd_node.run(["test", "-e", f"{UNIT_DIR}/twin.service.d"]).returncode == 1


# -- the lab itself --

def mount_namespaces_and_pids() -> set[tuple[int, int]]:
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            found.add((os.stat(proc / "ns/mnt").st_ino, os.stat(proc / "ns/pid").st_ino))
        except OSError:
            continue
    return found


@pytest.mark.real
@needs_root
def test_lab_up_systemd_from_the_cli_and_down_leaves_nothing(tmp_path: Path) -> None:
    runner = CliRunner()
    directory = (tmp_path / "lab").resolve()
    up = runner.invoke(app, ["lab", "up", "--systemd", "--dir", str(directory), "--hosts", "1"])
    try:
        assert up.exit_code == 0, up.output
        assert "sglang.service on lab-1" in up.stdout
        shown = runner.invoke(app, ["lab", "status", "--dir", str(directory)]).stdout
        assert "systemd ok" in shown
        state = json.loads(runner.invoke(
            app, ["lab", "status", "--dir", str(directory), "--json"]).stdout)
        assert state["state"] == "up" and state["hosts"][0]["systemd"] is True
        lab = load_lab(directory)
        assert lab is not None and lab.systemd
        init = lab.host(1).init_pid
        namespaces = tuple(os.stat(f"/proc/{init}/ns/{kind}").st_ino for kind in ("mnt", "pid"))
        transport = SSHTransport(lab.target(1))
        try:  # a service running inside, as a campaign would leave it
            transport.run(["systemctl", "start", "sglang.service"]).check()
        finally:
            transport.close()
        assert str(directory) not in Path("/proc/self/mountinfo").read_text()
    finally:
        down = runner.invoke(app, ["lab", "down", "--dir", str(directory)])
    assert down.exit_code == 0, down.output
    deadline = time.monotonic() + 5
    while namespaces in mount_namespaces_and_pids():  # the last process of the container goes
        assert time.monotonic() < deadline, "a process still holds the container's namespaces"
        time.sleep(0.05)
    assert str(directory) not in Path("/proc/self/mountinfo").read_text()
    prefix = default_prefix(str(directory))
    assert owned(prefix) == ([], [])
    assert not [p for p in Path(cgroup2_root()).iterdir() if p.name.startswith(
        f"{CGROUP_PREFIX}{prefix}-")]
    assert lab_status(directory).state == "down"


@pytest.mark.real
@needs_root
def test_a_campaign_through_systemd_units_finds_the_culprit_and_restores_the_unit(
        systemd_lab: Lab, systemd_node: SSHTransport, twin_unit: str, ray_cluster: None,
        tmp_path: Path) -> None:
    from db.store import Store
    from experiments.campaign import Campaign
    from orchestrator.executor.driver import run_campaign
    from orchestrator.stored import create_campaign

    host = systemd_lab.host(1)
    faults = Path(host.workdir) / "faults.yaml"  # the container's /tmp is its own: use workdir
    faults.write_text("rules: [{name: race, when: {env: {BF16_INDEX_K: '1'}, flags: "
                      "{enable-hierarchical-cache: true}}, probability: 0.5, effect: leak}]\n")
    base = f"http://{host.address}:{PORT}"
    campaign = Campaign.model_validate({
        "name": "through systemd",
        "nodes": [systemd_lab.node(1)],
        "pools": [{"name": "p", "endpoint": base, "services": [{
            "name": "twin", "node": host.name, "manager": "systemd", "unit": "twin.service",
            "start": twin_argv(systemd_lab, "--fault-model", str(faults),
                               "--twin-startup-delay", "0.2", "--twin-latency-ms", "5"),
            "health_url": f"{base}/health", "startup_timeout_s": 60,
            "log_markers": ["The server is fired up and ready to roll!"]}]}],
        "factors": [
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": "0"}},
                                           "bf16": {"env": {"BF16_INDEX_K": "1"}}}},
            {"name": "hicache", "levels": {"off": {}, "on": {
                "flags": ["--enable-hierarchical-cache"],
                "log_markers": ["host memory for hierarchical KV cache"]}}},
        ],
        "workload": {"sessions": 20, "rounds": 2, "timeout_s": 20},
        "known_good": {"index_k": "fp8", "hicache": "on"},
        "known_bad": {"index_k": "bf16", "hicache": "on"},
    })
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "test")
        verdict = run_campaign(store, campaign_id).to_json()
    assert verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [{"index_k": "bf16", "hicache": "on"}]
    manager = SystemdServiceManager(systemd_node)
    assert manager.describe("twin") == twin_unit  # the drop-in is gone: the operator's unit
    assert not manager.is_running("twin")  # it was not running before the campaign


@pytest.mark.real
@needs_root
def test_a_unit_that_unsets_the_variant_s_env_makes_it_unresolvable_not_a_stopped_run(
        systemd_lab: Lab, systemd_node: SSHTransport, ray_cluster: None, tmp_path: Path) -> None:
    """The operator's own UnsetEnvironment= beats the variant: a variant failure (evidence),
    recorded once per attempt, never retried as infrastructure until the run stops. So is a
    value systemd cannot hold (a control character), never a crashed pool."""
    from db.store import Store
    from experiments.campaign import Campaign
    from orchestrator.executor.driver import run_campaign
    from orchestrator.stored import MAX_FAILED_ATTEMPTS, create_campaign

    host = systemd_lab.host(1)
    argv = [PY, "-m", "experiments.twin", "--host", host.address, "--port", str(PORT + 1)]
    install_unit(systemd_node, "unsetk.service",
                 service_unit(argv, description="unsets the variant")
                 + "UnsetEnvironment=BF16_INDEX_K\n")
    base = f"http://{host.address}:{PORT + 1}"
    campaign = Campaign.model_validate({
        "name": "unset by the unit",
        "nodes": [systemd_lab.node(1)],
        "pools": [{"name": "p", "endpoint": base, "services": [{
            "name": "unsetk", "node": host.name, "manager": "systemd", "unit": "unsetk.service",
            "start": argv, "health_url": f"{base}/health", "startup_timeout_s": 60}]}],
        "factors": [{"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": "0"}},
                                                   "bf16": {"env": {"BF16_INDEX_K": "1"}},
                                                   "esc": {"env": {"BF16_INDEX_K": "\x1b[0m"}}}}],
        "workload": {"sessions": 4, "rounds": 1, "timeout_s": 10},
        "strategy": {"kind": "factorial", "repeats": 1},
    })
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "test")
        verdict = run_campaign(store, campaign_id).to_json()  # no RunFailed: the run ends
        trials = store.trials(campaign_id, status=None)
        steps = {t.id: store.steps(t.id) for t in trials}
    assert len(trials) == 3 * MAX_FAILED_ATTEMPTS  # once per attempt, never retried more
    assert all(t.status == "failed" and t.failure == "variant" for t in trials)
    unset = [t for t in trials if t.levels["index_k"] != "esc"]
    assert all("BF16_INDEX_K" in (t.error or "") and "UnsetEnvironment=" in (t.error or "")
               for t in unset)
    assert all("control characters" in (t.error or "") for t in trials if t not in unset)
    assert sorted(u["levels"]["index_k"] for u in verdict["unresolvable"]) == [
        "bf16", "esc", "fp8"]
    assert all(u["attempts"] == MAX_FAILED_ATTEMPTS for u in verdict["unresolvable"])
    for trial in trials:
        restart = next(s for s in steps[trial.id] if s.name == "restart")
        assert restart.outcome == "failed" and restart.details["failure"] == "variant"
    assert SystemdServiceManager(systemd_node).describe("unsetk").count("zz-bisect") == 0
