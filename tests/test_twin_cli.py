"""The twin as a command: its start (503 until the start-up delay passed), its flags, --help
and --schema, its fault model file's errors named by field and line; and, without a server, how
a rule's conditions compare and the markup a leak carries."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from experiments import agent
from experiments.twin import faults, pool
from experiments.twin.agent_script import build_reply
from experiments.twin.pool import free_port
from tests.support.twins import REPO, get, opening


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "experiments.twin", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=30)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The twin's main() in this process (it returns before serving for these inputs)."""
    from experiments.twin.cli import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.real
def test_health_is_503_until_the_startup_delay_passed(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "twin.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "experiments.twin", "--port", str(port),
             "--twin-startup-delay", "1.0"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        seen: list[int] = []
        generate: list[int] = []
        deadline = time.monotonic() + 20
        while (not seen or seen[-1] != 200) and time.monotonic() < deadline:
            try:
                seen.append(get(f"{url}/health")[0])
                generate.append(get(f"{url}/health_generate")[0])
            except urllib.error.URLError:
                pass  # not listening yet
            time.sleep(0.05)
        assert seen[0] == 503 and seen[-1] == 200, seen
        assert 503 in generate
        assert get(f"{url}/health_generate")[0] == 200
        assert "The server is fired up and ready to roll!" in (tmp_path / "twin.log").read_text()
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


@pytest.mark.pure
def test_example_fault_model_is_valid() -> None:
    model = faults.load(REPO / "experiments" / "twin" / "faults.example.yaml")
    assert model.rules[0].name == "bf16-hicache-race"


@pytest.mark.real
def test_unknown_flag_exits_2() -> None:
    result = run_cli("--no-such-flag")
    assert result.returncode == 2 and "unrecognized arguments: --no-such-flag" in result.stderr


# What only serving needs (launch.py imports it after parsing): ~0.7 s of CPU a start, which
# --help (the preflight's check of every start command) and a bad flag must not pay.
SERVING_ONLY = ("asyncio", "aiohttp", "pydantic", "yaml", "prometheus_client",
                "experiments.twin.faults", "experiments.twin.engine", "experiments.twin.server")


@pytest.mark.real
def test_help_and_a_bad_flag_import_nothing_serving_needs() -> None:
    script = (
        "import contextlib, io, json, sys\n"
        "from experiments.twin.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), "
        "contextlib.redirect_stderr(io.StringIO()):\n"
        "    codes = [main(['--help']), main(['--no-such-flag'])]\n"
        f"loaded = sorted(m for m in sys.modules for name in {SERVING_ONLY!r}\n"
        "                if m == name or m.startswith(name + '.'))\n"
        "print(json.dumps({'codes': codes, 'loaded': loaded}))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"codes": [0, 2], "loaded": []}


@pytest.mark.pure
@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("seed: 7\nrules:\n  - name: x\n    min_inflight: 1\n    probability: 1.5\n"
         "    effect: leak\n", "field rules[0].probability"),
        ("rules:\n  - name: x\n    probability: 0.1\n    effect: leak\n    colour: red\n",
         "field rules[0].colour"),
        ("rules:\n  - name: x\n    probability: 0.1\n    effect: explode\n",
         "field rules[0].effect"),
        ("rules:\n  - name: x\n    when: {flags: {enable-hicache: true}}\n"
         "    probability: 0.1\n    effect: leak\n", "field rules[0].when.flags.enable-hicache"),
        ("rules:\n  - name: x\n    when: {decode: {flags: {cuda-graphs: false}}}\n"
         "    probability: 0.1\n    effect: wedge\n",
         "field rules[0].when.decode.flags.cuda-graphs"),
        ("rules:\n  - name: x\n    scale_with_inflight: {reference: 0}\n"
         "    probability: 0.1\n    effect: leak\n",
         "field rules[0].scale_with_inflight.reference"),
        ("rules:\n  - name: x\n    min_context_tokens: -1\n"
         "    probability: 0.1\n    effect: leak\n", "field rules[0].min_context_tokens"),
        ("rules:\n  - name: x\n    per: turn\n    probability: 0.1\n    effect: wedge\n",
         "field rules[0].per"),
        ("noise: {probability: 0.1, per: round}\n", "field noise.per"),
    ],
)
def test_bad_fault_model_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, _, err = cli(capsys, "--fault-model", str(path), "--twin-startup-delay", "0")
    assert code == 2
    assert str(path) in err and field in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.pure
def test_bad_fault_model_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("seed: 1\nrules:\n  - name: x\n    probability: 2\n    effect: leak\n")
    with pytest.raises(faults.FaultModelError, match=r"line 4, field rules\[0\]\.probability"):
        faults.load(path)


@pytest.mark.pure
def test_help_and_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, help_text, _ = cli(capsys, "--help")
    assert code == 0
    for flag in ("--enable-hierarchical-cache", "--tool-call-parser", "--fault-model",
                 "--twin-seed", "--disaggregation-mode", "--hicache-write-policy",
                 "--disaggregation-bootstrap-port", "--twin-prefill-us-per-token",
                 "--twin-decode-ms-per-token", "--twin-decode-batch-slowdown",
                 "--twin-eager-slowdown", "--twin-hicache-hit-cost", "--twin-latency-ms"):
        assert flag in help_text
    code, schema, _ = cli(capsys, "--schema")
    assert code == 0
    document = json.loads(schema)
    assert {"seed", "rules", "noise"} <= set(document["properties"])


@pytest.mark.pure
def test_conditions_compare_like_the_yaml_reads() -> None:
    model = faults.FaultModel.model_validate({"rules": [{
        "name": "r", "probability": 1.0, "effect": "leak",
        "when": {"env": {"BF16_INDEX_K": 1, "SGLANG_OPT_USE_TOPK_V2": None},
                 "flags": {"enable-hierarchical-cache": True, "hicache_ratio": 2,
                           "tool-call-parser": "deepseekv32"}},
    }]})
    flags = {"enable-hierarchical-cache": True, "hicache-ratio": 2.0,
             "tool-call-parser": "deepseekv32"}

    def hit(env: dict[str, str], **changed: Any) -> bool:
        return faults.decide(model, twin_seed=0, flags={**flags, **changed}, env=env,
                             inflight=1, session_key="k") is not None

    assert hit({"BF16_INDEX_K": "1"})
    assert not hit({"BF16_INDEX_K": "1", "SGLANG_OPT_USE_TOPK_V2": "1"})  # must be unset
    assert not hit({"BF16_INDEX_K": "0"})
    assert not hit({"BF16_INDEX_K": "1"}, **{"enable-hierarchical-cache": False})
    assert not hit({"BF16_INDEX_K": "1"}, **{"hicache-ratio": 3.0})


@pytest.mark.pure
@pytest.mark.parametrize(("parser", "fragment"), [
    ("deepseekv31", "<｜tool▁calls▁begin｜>"),
    ("deepseekv32", "<｜DSML｜function_calls>"),
    ("deepseekv4", "<｜DSML｜tool_calls>"),
])
def test_leak_markup_follows_the_tool_call_parser(parser: str, fragment: str) -> None:
    decision = faults.Decision("r", faults.Effect.LEAK, None)
    reply = build_reply(opening("k", "CAN"), agent.TOOLS, "auto", decision, parser)
    assert reply.tool_calls == [] and reply.finish_reason == "stop"
    assert reply.content is not None and fragment in reply.content and "CAN" in reply.content


@pytest.mark.real
def test_a_free_port_is_below_the_ephemeral_range(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An ephemeral port (what bind(0) hands out) may be taken as an outgoing connection's
    source port before the twin binds it: a twin then dies at start on a loaded machine."""
    start = int(pool.EPHEMERAL.read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(pool.LOWEST <= port < start for port in ports), (ports, start)
    assert len(ports) > 1  # drawn, not one fixed port every server would race for
    # none handed out twice while servers may not have bound theirs yet: 200 draws from the
    # ~12,000 ports would repeat one about 80% of the time (six twins at once once did)
    drawn = [free_port() for _ in range(200)]
    assert len(set(drawn)) == len(drawn)
    # a range that leaves no room below it: the kernel's choice, as before
    no_room = tmp_path / "ip_local_port_range"
    no_room.write_text("1024\t65000\n")
    monkeypatch.setattr(pool, "EPHEMERAL", no_room)
    assert 1024 <= free_port() <= 65000
