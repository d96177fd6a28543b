"""The campaign file: a realistic valid file, and every kind of bad input giving one clear
``file:line: field: problem`` message (exit code 2 through the CLI, never a traceback)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.campaign import Campaign, CampaignError
from experiments.campaign_load import load_campaign
from experiments.strategy_config import FactorialConfig
from orchestrator.cli import app

pytestmark = pytest.mark.pure

GOOD = """\
# The seed investigation: bf16 index keys and HiCache under load.
name: DeepSeek tool-call leaks under load
nodes:
  - name: gpu-a
    transport: local
    workdir: {workdir}
pools:
  - name: pd
    endpoint: http://127.0.0.1:30000
    services:
      - name: sglang
        node: gpu-a
        start: python -m sglang.launch_server --model-path "/models/DeepSeek V4" --port 30000
        env:
          CUDA_VISIBLE_DEVICES: 0
          SGLANG_ENABLE_JIT_DEEPGEMM: true
          SGLANG_DISABLE_X: false
          MEM_FRACTION: 0.85
        health_url: http://127.0.0.1:30000/health
        startup_timeout_s: 600
factors:
  - name: index_k
    levels:
      fp8: {{env: {{BF16_INDEX_K: 0}}}}
      bf16: {{env: {{BF16_INDEX_K: 1}}}}
  - name: hicache
    services: [sglang]
    levels:
      off:
      on:
        flags: --enable-hierarchical-cache --hicache-ratio 2 --hicache-note 'two words'
  - name: verbose
    levels:
      no: {{}}
      yes: {{flags: [--log-level, debug]}}
workload: {{sessions: 60, rounds: 4, timeout_s: 30, seed: 7}}
strategy: {{kind: factorial, repeats: 3, alpha: 0.01}}
cost: {{restart_s: 90, workload_s: 485, gpus: 16}}
known_good: {{index_k: fp8, hicache: on, verbose: no}}
known_bad: {{index_k: bf16, hicache: on, verbose: no}}
"""


def good_text(tmp_path: Path) -> str:
    return GOOD.format(workdir=tmp_path / "services")


def write(tmp_path: Path, text: str, name: str = "campaign.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """The 1-based line of the ``occurrence``-th line containing ``needle``."""
    hits = [number for number, line in enumerate(text.splitlines(), 1) if needle in line]
    return hits[occurrence - 1]


def edited(tmp_path: Path, old: str, new: str, count: int = 1) -> tuple[Path, str]:
    """The good campaign with one edit, written to a file; returns the path and the text."""
    text = good_text(tmp_path)
    assert text.count(old) >= count, old
    text = text.replace(old, new, count)
    return write(tmp_path, text), text


def error_of(path: Path) -> str:
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    return str(info.value)


# --- a valid file ------------------------------------------------------------------------------


def test_a_realistic_campaign_loads(tmp_path: Path) -> None:
    campaign = load_campaign(write(tmp_path, good_text(tmp_path)))
    assert isinstance(campaign, Campaign)
    assert campaign.nodes[0].workdir == str(tmp_path / "services")
    service = campaign.pools[0].services[0]
    assert service.start == ["python", "-m", "sglang.launch_server",
                             "--model-path", "/models/DeepSeek V4", "--port", "30000"]
    # YAML ints, bools and floats become the strings a process environment holds.
    assert service.env == {"CUDA_VISIBLE_DEVICES": "0", "SGLANG_ENABLE_JIT_DEEPGEMM": "1",
                           "SGLANG_DISABLE_X": "0", "MEM_FRACTION": "0.85"}
    assert service.startup_timeout_s == 600
    # YAML 1.2: on/off/yes/no are level names, not booleans.
    assert campaign.level_names() == {"index_k": ["fp8", "bf16"], "hicache": ["off", "on"],
                                      "verbose": ["no", "yes"]}
    assert campaign.factor("index_k").level("bf16").env == {"BF16_INDEX_K": "1"}
    hicache = campaign.factor("hicache")
    assert hicache.services == ["sglang"]
    assert hicache.level("off").flags == [] and hicache.level("off").env == {}
    assert hicache.level("on").flags == ["--enable-hierarchical-cache", "--hicache-ratio", "2",
                                         "--hicache-note", "two words"]
    assert campaign.factor("verbose").level("yes").flags == ["--log-level", "debug"]
    assert campaign.known_good == {"index_k": "fp8", "hicache": "on", "verbose": "no"}
    assert campaign.known_bad == {"index_k": "bf16", "hicache": "on", "verbose": "no"}
    assert isinstance(campaign.strategy, FactorialConfig)
    assert campaign.workload.sessions == 60 and campaign.strategy.repeats == 3
    assert campaign.cost.gpus == 16


def test_defaults_fill_a_minimal_campaign(tmp_path: Path) -> None:
    path = write(tmp_path, f"""\
name: minimal
nodes: [{{name: local, workdir: {tmp_path}}}]
pools:
  - name: p
    endpoint: http://127.0.0.1:1
    services: [{{name: s, node: local, start: [serve, --port, "1"], health_url: http://x/h}}]
factors: [{{name: f, levels: {{a: , b: {{flags: [--b]}}}}}}]
""")
    campaign = load_campaign(path)
    assert campaign.pools[0].services[0].start == ["serve", "--port", "1"]
    assert campaign.strategy_kind == "factorial" and campaign.known_bad is None
    assert campaign.workload.sessions == 80 and campaign.cost.workload_s == 485


def test_true_and_false_stay_booleans_only_in_their_yaml_1_2_spelling(tmp_path: Path) -> None:
    path, _ = edited(tmp_path, "SGLANG_DISABLE_X: false", "SGLANG_DISABLE_X: 'off'")
    assert load_campaign(path).pools[0].services[0].env["SGLANG_DISABLE_X"] == "off"


# --- bad input: one clear message naming file, line and field ----------------------------------


def assert_names(message: str, path: Path, line: int, field: str) -> None:
    assert message.startswith(f"{path}:{line}: {field}"), message
    assert "Traceback" not in message


def test_yaml_syntax_error_names_its_line(tmp_path: Path) -> None:
    path, text = edited(tmp_path, "strategy: {kind: factorial, repeats: 3, alpha: 0.01}",
                        "strategy: {kind: factorial, repeats: 3, alpha: 0.01")
    message = error_of(path)
    assert message.startswith(f"{path}:{line_of(text, 'cost:')}: YAML syntax error"), message


def test_tab_indentation_names_its_line(tmp_path: Path) -> None:
    path, text = edited(tmp_path, "  - name: pd\n", "\t- name: pd\n")
    message = error_of(path)
    assert message.startswith(f"{path}:{line_of(text, '- name: pd')}: YAML syntax error"), message


def test_duplicate_level_names_the_second_one(tmp_path: Path) -> None:
    path, text = edited(tmp_path, "      bf16: {env: {BF16_INDEX_K: 1}}\n",
                        "      bf16: {env: {BF16_INDEX_K: 1}}\n      fp8: {}\n")
    message = error_of(path)
    second = line_of(text, "fp8:", 2)
    assert message == (f"{path}:{second}: duplicate key 'fp8' at factors[0].levels "
                       f"(first on line {line_of(text, 'fp8:')})")


def test_duplicate_top_level_key(tmp_path: Path) -> None:
    text = good_text(tmp_path) + "name: again\n"
    message = error_of(write(tmp_path, text))
    assert "duplicate key 'name' at top level" in message
    assert message.startswith(f"{tmp_path / 'campaign.yaml'}:{line_of(text, 'name: again')}:")


def test_duplicate_factor_name(tmp_path: Path) -> None:
    path, text = edited(tmp_path, "  - name: verbose", "  - name: index_k")
    message = error_of(path)
    assert_names(message, path, line_of(text, "- name: index_k", 2), "factors[2].name")
    assert "duplicate factor name 'index_k'" in message
    assert "has no level" not in message  # no misleading echo from the duplicate's levels


def test_unknown_factor_in_known_bad(tmp_path: Path) -> None:
    path, text = edited(tmp_path, "known_bad: {index_k: bf16, hicache: on",
                        "known_bad: {index_k: bf16, hicach: on")
    message = error_of(path)
    assert_names(message, path, line_of(text, "known_bad:"), "known_bad.hicach")
    assert "unknown factor 'hicach'" in message
    assert "\n" not in message


def test_unknown_level_in_known_good(tmp_path: Path) -> None:
    path, text = edited(tmp_path, "known_good: {index_k: fp8,", "known_good: {index_k: fp16,")
    message = error_of(path)
    assert_names(message, path, line_of(text, "known_good:"), "known_good.index_k")
    assert "no level 'fp16' (levels: fp8, bf16)" in message
    assert "\n" not in message


def test_missing_start_names_the_service_line(tmp_path: Path) -> None:
    text = re.sub(r"\n        start: [^\n]*", "", good_text(tmp_path))
    path = write(tmp_path, text)
    message = error_of(path)
    assert_names(message, path, line_of(text, "- name: sglang"), "pools[0].services[0].start")
    assert "missing" in message
    assert "\n" not in message


def test_unsplittable_start_string(tmp_path: Path) -> None:
    path, text = edited(tmp_path, '"/models/DeepSeek V4"', '"/models/DeepSeek V4')
    message = error_of(path)
    assert_names(message, path, line_of(text, "start:"), "pools[0].services[0].start")
    assert "No closing quotation" in message


def test_unknown_node_of_a_service(tmp_path: Path) -> None:
    path, text = edited(tmp_path, "node: gpu-a", "node: gpu-b")
    message = error_of(path)
    assert_names(message, path, line_of(text, "node: gpu-b"), "pools[0].services[0].node")
    assert "unknown node 'gpu-b'" in message


def test_unknown_service_in_a_factor(tmp_path: Path) -> None:
    path, text = edited(tmp_path, "services: [sglang]", "services: [sglang, router]")
    message = error_of(path)
    assert_names(message, path, line_of(text, "services: [sglang, router]"),
                 "factors[1].services[1]")
    assert "unknown service 'router'" in message


def test_unknown_top_level_key(tmp_path: Path) -> None:
    text = good_text(tmp_path) + "colour: blue\n"
    path = write(tmp_path, text)
    message = error_of(path)
    assert_names(message, path, line_of(text, "colour:"), "colour")
    assert "Extra inputs are not permitted" in message


def test_unknown_nested_key(tmp_path: Path) -> None:
    path, text = edited(tmp_path, "      on:\n", "      on:\n        envv: {A: 1}\n")
    message = error_of(path)
    assert_names(message, path, line_of(text, "envv:"), "factors[1].levels.on.envv")


def test_factor_with_a_single_level(tmp_path: Path) -> None:
    path, text = edited(tmp_path, "      fp8: {env: {BF16_INDEX_K: 0}}\n", "")
    message = error_of(path)
    assert_names(message, path, line_of(text, "levels:"), "factors[0].levels")
    assert "at least 2" in message


@pytest.mark.parametrize(
    ("text", "found", "line"),
    [("- name: a\n- name: b\n", "list", ":1"), ("just a string\n", "str", ":1"),
     ("", "an empty document", ""), ("# only a comment\n", "an empty document", "")],
    ids=["list", "scalar", "empty", "comment"],
)
def test_a_document_that_is_not_a_mapping(
    tmp_path: Path, text: str, found: str, line: str
) -> None:
    path = write(tmp_path, text)
    assert error_of(path) == f"{path}{line}: a campaign file must be a YAML mapping (found {found})"


def test_a_self_referencing_alias_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = write(tmp_path, "name: &loop [*loop]\n")
    message = error_of(path)
    assert message.startswith(f"{path}:1: name:"), message


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_an_unreadable_path(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nope.yaml"
    if kind == "directory":
        path.mkdir()
    message = error_of(path)
    assert message.startswith(f"{path}: cannot read: "), message
    assert "\n" not in message


def test_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    assert error_of(path) == f"{path}: not a UTF-8 text file"


# --- through the CLI ---------------------------------------------------------------------------


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_cli_validate_a_good_file(tmp_path: Path, runner: CliRunner) -> None:
    path = write(tmp_path, good_text(tmp_path))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{path}: ok" in result.stdout
    assert "3 factors, 8 variants, 1 pool(s)" in result.stdout


def test_cli_validate_a_bad_file_exits_2_without_traceback(
    tmp_path: Path, runner: CliRunner
) -> None:
    path, text = edited(tmp_path, "node: gpu-a", "node: gpu-b")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{path}:{line_of(text, 'node: gpu-b')}: pools[0].services[0].node" in result.stderr
    assert "unknown node 'gpu-b'" in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert isinstance(result.exception, SystemExit)


def test_cli_validate_a_missing_file_exits_2(tmp_path: Path, runner: CliRunner) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path / "absent.yaml")])
    assert result.exit_code == 2
    assert "cannot read" in result.stderr and "Traceback" not in result.output


def test_cli_run_a_bad_file_exits_2_and_starts_nothing(
    tmp_path: Path, runner: CliRunner
) -> None:
    path, _ = edited(tmp_path, "known_good: {index_k: fp8,", "known_good: {index_k: fp16,")
    store = tmp_path / "store.db"
    result = runner.invoke(app, ["run", str(path), "--store", str(store)])
    assert result.exit_code == 2, result.output
    assert f"{path}:" in result.stderr and "known_good.index_k" in result.stderr
    assert "Traceback" not in result.output
    assert not store.exists()  # nothing started: no store, no campaign
    assert not (tmp_path / "services").exists()  # and no service workdir


def test_cli_prints_user_text_in_errors_verbatim(tmp_path: Path, runner: CliRunner) -> None:
    path, _ = edited(tmp_path, "services: [sglang]", "services: [sglang, 'x[/red]y']")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "unknown service 'x[/red]y'" in result.stderr


def test_cli_schema_is_json_with_factors(runner: CliRunner) -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert "factors" in schema["properties"]
    assert set(schema["required"]) >= {"name", "nodes", "pools"}
    assert "commits" in schema["properties"]


def test_numeric_level_names_are_names(tmp_path: Path) -> None:
    path = tmp_path / "tp.yaml"
    path.write_text(
        "name: tp\n"
        "nodes: [{name: n, workdir: /tmp/x}]\n"
        "pools: [{name: p, endpoint: 'http://127.0.0.1:1',\n"
        "         services: [{name: s, node: n, start: server, health_url: 'http://h'}]}]\n"
        "factors:\n"
        "  - name: tp\n"
        "    levels: {4: {flags: --tp 4}, 8: {flags: --tp 8}}\n"
        "known_bad: {tp: 8}\n"
    )
    campaign = load_campaign(path)
    assert list(campaign.factors[0].levels) == ["4", "8"]
    assert campaign.known_bad == {"tp": "8"}


def test_adaptive_needs_known_good_and_known_bad(tmp_path: Path) -> None:
    path = write(tmp_path, f"""\
name: adaptive
nodes: [{{name: local, workdir: {tmp_path}}}]
pools:
  - name: p
    endpoint: http://127.0.0.1:1
    services: [{{name: s, node: local, start: serve, health_url: http://x/h}}]
factors: [{{name: f, levels: {{a: , b: }}}}, {{name: g, levels: {{x: , y: }}}}]
strategy: {{kind: adaptive}}
known_good: {{f: a}}
""")
    with pytest.raises(CampaignError) as error:
        load_campaign(path)
    message = str(error.value)
    assert f"{path}:9: known_good: the adaptive strategy needs a level for every factor" in message
    assert "(missing: g)" in message
    assert "known_bad: the adaptive strategy needs" in message
