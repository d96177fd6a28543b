"""Campaign and fault-model files that used to hang or mislead (issue 11, hole 6): alias bombs,
deep nesting, control bytes, non-JSON tags, huge lines, absurd numbers, file names that look
like rich markup. Each gets one ``FILE:LINE: ...`` line (exit 2 through the CLI), at once; and a
property-based fuzz of the loader allows nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from experiments.campaign import Campaign, CampaignError
from experiments.campaign_load import load_campaign
from experiments.twin import faults
from experiments.yaml_lines import (
    MAX_ALIASES,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_EXPANDED,
    MAX_LINE_CHARS,
    YamlInputError,
    load_yaml,
)
from orchestrator.cli import app
from tests.support.yaml_fuzz import VALID, aliased_factors, campaign_texts, load_outcome

BISECT = str(Path(sys.executable).parent / "bisect")


def write(tmp_path: Path, text: str | bytes, name: str = "campaign.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def refusal(path: Path) -> str:
    """The one-line CampaignError of loading ``path``, checked to name the file first."""
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    message = str(info.value)
    assert len(message.splitlines()) == 1, message[:2000]
    assert message.startswith(f"{path}:"), message
    return message


def line_of(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if needle in line)


# --- aliases -------------------------------------------------------------------------------------


@pytest.mark.pure
def test_aliased_factors_that_would_expand_to_millions_are_refused_unexpanded(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, aliased_factors(200))  # 8 million words
    message = refusal(path)
    assert f"expand to more than {MAX_EXPANDED} values" in message


@pytest.mark.pure
def test_more_aliases_than_the_cap_are_refused_on_the_first_one_past_it(tmp_path: Path) -> None:
    markers = ", ".join(["*w"] * (MAX_ALIASES + 1))
    text = VALID.replace("off:\n", f"off: {{log_markers: [&w x, {markers}]}}\n")
    message = refusal(write(tmp_path, text))
    assert message.startswith(f"{tmp_path / 'campaign.yaml'}:{line_of(text, '&w x')}: more "
                              f"than {MAX_ALIASES} aliases"), message


@pytest.mark.pure
def test_a_value_that_contains_itself_is_refused(tmp_path: Path) -> None:
    text = VALID.replace("fp8: {env: {BF16_INDEX_K: 0}}", "fp8: {pre: &r [*r]}")
    message = refusal(write(tmp_path, text))
    assert "recursive value" in message and f":{line_of(text, '&r')}:" in message


@pytest.mark.pure
def test_aliases_and_merges_within_the_bounds_still_load(tmp_path: Path) -> None:
    text = VALID.replace("pools:", "pools:\n  - &pool {name: pool-b, endpoint: "
                         "http://127.0.0.1:30001, services: &svcs [{name: s2, node: gpu-a, "
                         "start: serve, health_url: 'http://127.0.0.1:30001/health'}]}")
    text = text.replace("bf16: {env: {BF16_INDEX_K: 1}}", "bf16: &lvl {env: {BF16_INDEX_K: 1}}"
                        "\n      fp16: {<<: *lvl, flags: --fp16}")
    campaign = load_campaign(write(tmp_path, text))
    assert [pool.name for pool in campaign.pools] == ["pool-b", "pd"]
    assert campaign.factor("index_k").level("fp16").env == {"BF16_INDEX_K": "1"}
    assert campaign.factor("index_k").level("fp16").flags == ["--fp16"]


# --- nesting, bytes, tags ----------------------------------------------------------------------


@pytest.mark.pure
@pytest.mark.parametrize(("nesting", "lines_down"), [
    ("[" * 500 + "]" * 500, 0),
    ("{a: " * 500 + "1" + "}" * 500, 0),
    # one level a line, under the top-level mapping: the first too deep is MAX_DEPTH lines down
    ("\n" + "".join(" " * (2 * level) + "-\n" for level in range(500)), MAX_DEPTH),
], ids=["flow-list", "flow-map", "block"])
def test_nesting_500_deep_names_the_file_and_line(tmp_path: Path, nesting: str,
                                                  lines_down: int) -> None:
    text = VALID + "extra: " + nesting + "\n"
    message = refusal(write(tmp_path, text))
    line = line_of(text, "extra:") + lines_down
    assert message == f"{tmp_path / 'campaign.yaml'}:{line}: nested more than {MAX_DEPTH} deep"


@pytest.mark.pure
def test_a_nul_byte_names_the_file_and_line(tmp_path: Path) -> None:
    text = VALID.replace("name: gpu-a", "name: gpu\0a", 1)
    message = refusal(write(tmp_path, text))
    assert message == (f"{tmp_path / 'campaign.yaml'}:{line_of(text, 'gpu')}: control "
                       "character U+0000: YAML text may not contain it")


@pytest.mark.pure
@pytest.mark.parametrize("escape", ["\\0", "\\x1b[2J", "\\x9b"])
def test_an_escaped_control_character_in_a_string_is_refused(tmp_path: Path,
                                                             escape: str) -> None:
    text = VALID.replace("{CUDA_VISIBLE_DEVICES: 0}", f'{{CUDA_VISIBLE_DEVICES: "0{escape}"}}')
    message = refusal(write(tmp_path, text))
    assert f":{line_of(text, 'CUDA')}: pools[0].services[0].env.CUDA_VISIBLE_DEVICES: control " \
           "character" in message, message


@pytest.mark.pure
@pytest.mark.parametrize(("value", "problem"), [
    ("!!timestamp 2001-12-14", "a date or time is not allowed here"),
    ("!!timestamp 2001-13-45", "a date or time is not allowed here"),
    ("!!binary aGVsbG8=", "binary data is not allowed here"),
    ("!!set {a, b}", "a set is not allowed here"),
    ("!!omap [a: 1]", "an ordered mapping is not allowed here"),
    ("!!python/object/apply:os.system [true]", "a list tagged tag:yaml.org,2002:python/object"),
    ("!!int 0x", "'0x' is not a valid int"),
    ("!!int ''", "'' is not a valid int"),
    ("!!bool maybe", "'maybe' is not a valid bool"),
    ("1:2:3:4:5:6:7:8:9:10:11:12:13:14:15:16:17:18:19:20:21:22:23:24:25:26:27:28:29:30:31:32:"
     "33:34:35:36:37:38:39:40:41:42:43:44:45:46:47:48:49:50", "is too large a number"),
])
def test_non_json_values_are_refused_with_file_line_and_field(tmp_path: Path, value: str,
                                                              problem: str) -> None:
    text = VALID.replace("name: fuzzed", f"name: {value}")
    message = refusal(write(tmp_path, text))
    assert message.startswith(f"{tmp_path / 'campaign.yaml'}:1: name: "), message
    assert problem in message, message


@pytest.mark.pure
def test_a_plain_date_is_a_string_as_in_yaml_1_2(tmp_path: Path) -> None:
    text = VALID.replace("name: fuzzed", "name: 2001-12-14").replace("fp8:", "2024-01-01:")
    campaign = load_campaign(write(tmp_path, text))
    assert campaign.name == "2001-12-14"
    assert campaign.level_names()["index_k"] == ["2024-01-01", "bf16"]


# --- size ----------------------------------------------------------------------------------------


@pytest.mark.pure
def test_a_10_mb_line_is_refused_by_its_size(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("name: fuzzed", "name: " + "x" * 10_000_000))
    assert refusal(path) == f"{path}: more than the {MAX_BYTES} bytes a file may have"


@pytest.mark.pure
def test_a_file_past_the_size_cap_is_refused_even_if_every_line_is_short(tmp_path: Path) -> None:
    path = write(tmp_path, VALID + "# a comment line\n" * (MAX_BYTES // 16))
    assert refusal(path) == f"{path}: more than the {MAX_BYTES} bytes a file may have"


@pytest.mark.pure
def test_a_line_past_the_length_cap_names_its_line(tmp_path: Path) -> None:
    text = VALID.replace("startup_timeout_s: 600", "log_markers: [" + "x" * MAX_LINE_CHARS + "]")
    message = refusal(write(tmp_path, text))
    assert message == (f"{tmp_path / 'campaign.yaml'}:{line_of(text, 'log_markers')}: a line of "
                       f"more than {MAX_LINE_CHARS} characters")


# --- numbers -------------------------------------------------------------------------------------


@pytest.mark.pure
@pytest.mark.parametrize(("old", "new", "field"), [
    ("sessions: 60", "sessions: 1000000000000", "workload.sessions"),
    ("rounds: 4", "rounds: 1000000000", "workload.rounds"),
    ("timeout_s: 30", "timeout_s: .inf", "workload.timeout_s"),
    ("timeout_s: 30", "timeout_s: 1e30", "workload.timeout_s"),
    ("seed: 7", "seed: 100000000000000000000000000000", "workload.seed"),
    ("gpus: 16", "gpus: 1000000000000000000000000", "cost.gpus"),
    ("restart_s: 90", "restart_s: .inf", "cost.restart_s"),
    ("repeats: 3", "repeats: 100000000", "strategy.repeats"),
    ("startup_timeout_s: 600", "startup_timeout_s: .inf",
     "pools[0].services[0].startup_timeout_s"),
    ("seed: 7}", "seed: 7, max_concurrency: 10000000000}", "workload.max_concurrency"),
    ("seed: 7}", "seed: 7, context: {end_tokens: 100000000000}}", "workload.context.end_tokens"),
    ("seed: 7}", "seed: 7, arrival: poisson, request_rate: .inf}", "workload.request_rate"),
])
def test_absurd_numbers_are_named_by_field(tmp_path: Path, old: str, new: str,
                                           field: str) -> None:
    text = VALID.replace(old, new, 1)
    message = refusal(write(tmp_path, text))
    assert message.startswith(f"{tmp_path / 'campaign.yaml'}:{line_of(text, new)}: {field}: "), \
        message


@pytest.mark.pure
def test_numbers_at_their_bounds_still_load(tmp_path: Path) -> None:
    text = VALID.replace("sessions: 60", "sessions: 100000").replace(
        "timeout_s: 30", "timeout_s: 86400").replace("gpus: 16", "gpus: 100000")
    campaign = load_campaign(write(tmp_path, text))
    assert campaign.workload.sessions == 100_000 and campaign.workload.timeout_s == 86_400
    assert campaign.cost.gpus == 100_000


@pytest.mark.pure
def test_the_schema_states_the_bounds_and_is_a_valid_json_schema() -> None:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    workload = schema["$defs"]["WorkloadSpec"]["properties"]
    assert workload["sessions"]["maximum"] == 100_000
    assert workload["timeout_s"]["maximum"] == 86_400


# --- through the CLI ---------------------------------------------------------------------------


@pytest.mark.real
@pytest.mark.parametrize("name", ["bomb", "deep", "nul", "tag"])
def test_the_console_script_exits_2_with_one_line(tmp_path: Path, name: str) -> None:
    text = {"bomb": aliased_factors(200), "deep": VALID + "x: " + "[" * 1000 + "]" * 1000,
            "nul": VALID + "x: \0\n", "tag": VALID.replace("name: fuzzed", "name: !!timestamp "
                                                                           "2001-13-45")}[name]
    path = write(tmp_path, text)
    done = subprocess.run([BISECT, "validate", str(path)], capture_output=True, text=True,
                          check=False, timeout=120)  # a hang guard, not a speed test
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"error: {path}:"), done.stderr


@pytest.mark.pure
def test_a_file_name_that_looks_like_markup_is_printed_as_it_is(tmp_path: Path) -> None:
    path = write(tmp_path, VALID, name="[bold]campaign.yaml")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{path}: ok"), result.stdout


@pytest.mark.pure
def test_a_lab_directory_that_looks_like_markup_is_printed_as_it_is(tmp_path: Path) -> None:
    directory = tmp_path / "[bold]lab"
    result = CliRunner().invoke(app, ["lab", "status", "--dir", str(directory)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"lab {directory}: absent"), result.stdout


# --- the fault model -----------------------------------------------------------------------------


@pytest.mark.pure
@pytest.mark.parametrize(("text", "problem"), [
    ("rules: " + "[" * 600 + "]" * 600, f"nested more than {MAX_DEPTH} deep"),
    ("seed: 1\nrules: []\nx: \0", "control character U+0000"),
    ("l0: &l0 [a, a, a, a, a, a, a, a, a, a]\n" + "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9)) + "rules: *l8",
     "expand to more than"),
    ("seed: !!timestamp 2001-12-14", "a date or time is not allowed"),
])
def test_a_hostile_fault_model_names_the_file_and_line(tmp_path: Path, text: str,
                                                       problem: str) -> None:
    path = write(tmp_path, text, name="faults.yaml")
    with pytest.raises(faults.FaultModelError) as info:
        faults.load(path)
    message = str(info.value)
    assert message.startswith(f"fault model {path}:") and problem in message, message
    assert len(message.splitlines()) == 1


@pytest.mark.pure
def test_an_absurd_fault_model_number_is_named_by_field(tmp_path: Path) -> None:
    path = write(tmp_path, "rules:\n  - name: x\n    min_inflight: 1000000000000\n"
                           "    probability: 0.5\n    effect: leak\n", name="faults.yaml")
    with pytest.raises(faults.FaultModelError, match=r"line 3, field rules\[0\]\.min_inflight"):
        faults.load(path)


# --- the property --------------------------------------------------------------------------------


# A deadline far above the slowest input (~0.5 s): a guard against hangs, not a speed test.
# Hypothesis's default count of inputs (300 took 4.5 s of the pure tier): the counted fuzz run,
# 10,000 inputs, is bench/fuzz_campaign.py's (RELIABILITY.md "Fuzzing").
@pytest.mark.pure
@settings(max_examples=100, deadline=timedelta(seconds=30), database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(content=campaign_texts())
def test_the_loader_gives_a_campaign_or_a_file_named_error(
    tmp_path_factory: pytest.TempPathFactory, content: str | bytes
) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzzed.yaml"
    outcome = load_outcome(content, path)  # any other exception fails the test
    assert isinstance(outcome, Campaign | CampaignError)



_TEXT = st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=12)
_SCALARS = (st.none() | st.booleans() | st.integers(-(2**200), 2**200)
            | st.floats(allow_nan=False) | _TEXT)


def _raw(key: object) -> str:
    """A key as the file spells it: PyYAML writes True as `true` and quotes the text 'true'."""
    return str(key).lower() if isinstance(key, bool) else str(key)


# Keys whose spellings differ: the loader refuses `true` beside 'true', or `1` beside "1", as
# one key written twice (they would become one level name), which PyYAML itself keeps apart.
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    _TEXT | st.integers() | st.booleans(), inner, max_size=4).filter(
        lambda d: len({_raw(k) for k in d}) == len(d)), max_leaves=25)


@pytest.mark.pure
@settings(max_examples=100, deadline=timedelta(seconds=30), database=None)
@given(shared=_VALUES, other=_VALUES, flow=st.sampled_from([None, True, False]))
def test_what_pyyaml_writes_the_bounded_loader_reads_back(shared: object, other: object,
                                                          flow: bool | None) -> None:
    """Plain values (one of them twice: PyYAML writes it once with an anchor and an alias)
    come back as they went in, as PyYAML itself reads them."""
    data = {"first": shared, "other": other, "again": [shared, other, shared]}
    text = yaml.safe_dump(data, default_flow_style=flow, sort_keys=False, allow_unicode=True)
    loaded = load_yaml(text, "round-trip.yaml").data
    assert json.dumps(loaded) == json.dumps(data) == json.dumps(yaml.safe_load(text))


@pytest.mark.pure
def test_two_spellings_of_one_key_are_refused_as_a_duplicate() -> None:
    # PyYAML keeps `true` and 'true' (a bool and a text) apart; as level names they would be one
    for first, second in (("'true'", "true"), ('"1"', "1")):
        with pytest.raises(YamlInputError) as refused:
            load_yaml(f"levels:\n  {first}: a\n  {second}: b\n", "twice.yaml")
        assert str(refused.value).startswith("twice.yaml:3: duplicate key ")
        assert str(refused.value).endswith("at levels (first on line 2)")


@pytest.mark.pure
def test_a_full_factorial_too_large_to_ever_end_is_refused(tmp_path: Path) -> None:
    factors = "".join(f"  - {{name: f{i}, levels: {{a: {{}}, b: {{}}}}}}\n" for i in range(13))
    head = VALID.split("factors:\n", 1)[0]
    path = write(tmp_path, head + "factors:\n" + factors)
    message = refusal(path)
    assert "factors: a full factorial of these 13 factors has 8,192 variants" in message
    assert "design: fractional" in message
    write(tmp_path, head + "factors:\n" + factors.replace("  - {name: f12,", "#"))
    assert len(load_campaign(tmp_path / "campaign.yaml").factors) == 12  # 4,096: still runs
