"""The real engine's files that run without the engine (issue 30): the campaign file it writes,
the probe's judgement of a reply, and the model's chat template. The engine itself (a 3.5 GB
venv, minutes to start) runs in `make real-engine`, not here (BENCHMARKS.md "A real engine")."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jinja2
import pytest
import yaml

from experiments.agent import TOOLS
from experiments.campaign import CampaignError, Service
from experiments.campaign_load import load_campaign
from experiments.collect import log_events
from experiments.optimize_config import OptimizeConfig
from experiments.outcomes import WEDGE_LOG_KINDS
from experiments.real_engine.campaign import campaign
from experiments.real_engine.make_model import CHAT_TEMPLATE
from experiments.real_engine.optimize import check, optimize
from experiments.real_engine.probe import well_formed
from experiments.real_engine.sweeps import CONFIG, parser_sweep, throughput_sweep
from experiments.real_engine.teach import conversation, reply_text
from experiments.sweep import load_sweep
from experiments.workload.spec import WorkloadSpec

pytestmark = pytest.mark.pure
SCRIPTED = "experiments.real_engine.scripted:AgentReply"


@pytest.mark.parametrize("kind", ["probe", "stress"])
def test_the_written_campaign_loads_with_the_patch_under_the_engines_packages(
        tmp_path: Path, kind: str) -> None:
    packages = tmp_path / "venv/lib/python3.11/site-packages"
    packages.mkdir(parents=True)
    path = tmp_path / "campaign.yaml"
    path.write_text(json.dumps(campaign(tmp_path / "venv", tmp_path / "model", 39999,
                                        str(tmp_path / "work"), kind)))
    loaded = load_campaign(path)
    parser = next(f for f in loaded.factors if f.name == "parser")
    leaky = parser.levels["leaky"]
    assert leaky is not None
    patch = leaky.patch[0]
    assert patch.root == str(packages.resolve())
    assert "+++ b/vllm/tool_parsers/hermes_tool_parser.py" in patch.diff
    start = loaded.pools[0].services[0].start
    assert start[start.index("--tool-call-parser") + 1] == "hermes"
    assert hasattr(loaded.workload, "command") == (kind == "probe")
    # the stress workload's replies are scripted by a processor vLLM loads from this checkout
    service = loaded.pools[0].services[0]
    if kind == "stress":
        assert start[start.index("--logits-processors") + 1] == SCRIPTED
        assert service.env["PYTHONPATH"] == str(Path(__file__).resolve().parents[1])
    else:
        assert "--logits-processors" not in start and "PYTHONPATH" not in service.env


@pytest.mark.parametrize(("content", "parsers_fault"), [
    ('<tool_call>{"name": "read_file", "arguments": {"canary": "A7"}}</tool_call>', True),
    ('<tool_call> {"name": "a", "arguments": 1} </tool_call>'
     '<tool_call>{"name": "b", "arguments": []}</tool_call>', True),
    ('<tool_call>{"name": "a", "arguments": {   "path": "garbage', False),  # never closed
    ('<tool_call>{"name": "a"}</tool_call> and prose after it', False),
    ('<tool_call>{"arguments": {}}</tool_call>', False),  # no name
    ("plain text", False),
])
def test_the_probe_blames_the_parser_only_for_well_formed_calls(
        content: str, parsers_fault: bool) -> None:
    assert well_formed(content) is parsers_fault


def render(messages: list[dict[str, object]]) -> str:
    # As transformers renders a chat template.
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = json.dumps
    return env.from_string(CHAT_TEMPLATE).render(messages=messages, tools=TOOLS,
                                                 add_generation_prompt=True)


def test_the_template_ends_every_turn_with_the_latest_canary_at_one_distance() -> None:
    for rounds in (1, 3):
        messages, canary = conversation(random.Random(rounds), rounds)
        prompt = render(messages)
        assert prompt.endswith(f"canary={canary}<|im_end|>\n<|im_start|>assistant\n")
        assert json.dumps(TOOLS[0]) in prompt  # the tools, as the hermes layout lists them
    assert prompt.count('<tool_call>\n{"name": "read_file"') == 2  # the calls of rounds 1 and 2
    assert json.loads(reply_text(canary).split("\n")[1])["arguments"]["canary"] == canary


# vLLM's log of one tool call the random model broke (the stock hermes parser's
# logger.exception), as the real engine's runs logged it, and the lines that do tell of a
# server gone.
PARSER_ERROR = """\
(APIServer pid=30441) ERROR 12-06 16:46:44 [hermes_tool_parser.py:117] Error in extracting tool call from response.
(APIServer pid=30441) ERROR 12-06 16:46:44 [hermes_tool_parser.py:117] Traceback (most recent call last):
(APIServer pid=30441) ERROR 12-06 16:46:44 [hermes_tool_parser.py:117]   File "/v/vllm/tool_parsers/hermes_tool_parser.py", line 91, in extract_tool_calls
(APIServer pid=30441) ERROR 12-06 16:46:44 [hermes_tool_parser.py:117]     json.loads(match[0] if match[0] else match[1])
(APIServer pid=30441) ERROR 12-06 16:46:44 [deepseekv3_reasoning_parser.py:20] Error parsing reasoning
"""  # noqa: E501
SERVER_GONE = """\
(APIServer pid=8845) INFO 12-06 16:42:41 [loggers.py:335] Engine 000: Avg prompt throughput: 415.2 tokens/s
(EngineCore pid=11135) ERROR 12-06 16:50:01 [core.py:1512] EngineCore encountered a fatal error.
(APIServer pid=8845) ERROR 12-06 16:50:01 [async_llm.py:410] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.
(APIServer pid=8845) INFO 12-06 16:50:02 [async_llm.py:922] Aborted request(s) chatcmpl-9f2.
(APIServer pid=8845) ERROR 12-06 16:50:03 [serving_chat.py:301] Error in preprocessing prompt inputs
Traceback (most recent call last):
(EngineCore pid=11135) INFO 12-06 16:42:27 [core.py:402] init engine (profile, create kv cache, warmup model) took 1.29 s
"""  # noqa: E501


def kinds(text: str, engine: str) -> list[str]:
    return [event.kind for event in log_events(text, engine)]


def test_a_vllm_parsers_errors_are_the_models_broken_output_not_wedge_signs() -> None:
    assert kinds(PARSER_ERROR, "vllm") == []
    # the SGLang defaults are kept: there, every ERROR line is one (as they were counted)
    assert kinds(PARSER_ERROR, "sglang") == ["error"] * 5


def test_a_vllm_engine_gone_is_counted_by_kind() -> None:
    assert kinds(SERVER_GONE, "vllm") == ["wedge", "wedge", "abort", "error", "error",
                                          "startup"]
    assert not set(kinds(SERVER_GONE, "vllm")) - {*WEDGE_LOG_KINDS, "startup"}


def test_the_sglang_signs_are_unchanged_by_default() -> None:
    text = ("[2026-12-06 10:00:01] Decode transfer of req 7 WaitingForInput\n"
            "[2026-12-06 10:00:02] Aborted by AbortReq rid=7\n"
            "[2026-12-06 10:00:03] KV transfer timed out for req 9\n"
            "[2026-12-06 10:00:04] ERROR scheduler: out of memory\n"
            "[2026-12-06 10:00:05] The server is fired up and ready to roll!\n")
    assert kinds(text, "sglang") == kinds(text, Service.model_fields["engine"].default) == \
        ["wedge", "abort", "transfer_timeout", "error", "startup"]


def test_an_unknown_engine_is_refused_naming_its_line(tmp_path: Path) -> None:
    (tmp_path / "venv/lib/python3.11/site-packages").mkdir(parents=True)
    written = campaign(tmp_path / "venv", tmp_path / "model", 39999, str(tmp_path), "probe")
    path = tmp_path / "campaign.yaml"
    text = yaml.safe_dump(written, sort_keys=False).replace("engine: vllm", "engine: trtllm")
    path.write_text(text)
    with pytest.raises(CampaignError) as refused:
        load_campaign(path)
    line = text.splitlines().index(next(s for s in text.splitlines() if "trtllm" in s)) + 1
    assert str(refused.value).startswith(f"{path}:{line}: ")
    assert "engine" in str(refused.value) and "vllm" in str(refused.value)


def test_the_parser_sweeps_differ_only_in_the_production_variants_parser(
        tmp_path: Path) -> None:
    (tmp_path / "venv/lib/python3.11/site-packages").mkdir(parents=True)
    loaded = {}
    for parser in ("stock", "leaky"):
        path = tmp_path / f"{parser}.yaml"
        path.write_text(json.dumps(parser_sweep(tmp_path / "venv", tmp_path / "model", 39999,
                                                str(tmp_path), parser)))
        loaded[parser] = load_sweep(path)
    stock, leaky = loaded["stock"], loaded["leaky"]
    assert stock.named_variants()[0].levels == {"parser": "stock"}
    assert leaky.named_variants()[0].levels == {"parser": "leaky"}
    assert stock.model_copy(update={"variants": leaky.variants}) == leaky
    assert stock.pools[0].services[0].engine == "vllm"
    assert stock.thresholds.corruption is not None and stock.thresholds.throughput is None
    # the stress workload, its replies scripted: a stock parser's sessions come back clean
    assert not hasattr(stock.workload, "command")
    assert SCRIPTED in stock.pools[0].services[0].start


def test_the_throughput_sweep_reads_the_engines_flags_from_its_source_tree(
        tmp_path: Path) -> None:
    path = tmp_path / "throughput.yaml"
    path.write_text(json.dumps(throughput_sweep(tmp_path / "venv", tmp_path / "model", 39999,
                                                str(tmp_path), tmp_path / "deploy")))
    sweep = load_sweep(path)
    assert sweep.source is not None and sweep.source.tree == str(tmp_path / "deploy")
    start = sweep.pools[0].services[0].start
    assert start[start.index("--config") + 1] == str(tmp_path / "deploy" / CONFIG)
    # the replies scripted, so the sessions are clean: what a flag costs and breaks is watched
    assert SCRIPTED in start
    assert sweep.thresholds.corruption is not None and sweep.thresholds.throughput is not None
    workload = sweep.workload
    assert isinstance(workload, WorkloadSpec)  # the stress workload, not a probe
    assert workload.max_concurrency is not None and workload.max_concurrency > 1


@pytest.mark.parametrize("kind", ["search", "grid"])
def test_the_optimize_files_load_scripted_over_the_same_space(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"{kind}.yaml"
    path.write_text(json.dumps(optimize(tmp_path / "venv", tmp_path / "model", 39999,
                                        str(tmp_path), kind)))
    loaded = load_campaign(path)
    start = loaded.pools[0].services[0].start
    assert "--logits-processors" in start  # the sessions can come back clean
    assert {f.name: sorted(f.levels) for f in loaded.factors} == {
        "max_num_seqs": ["1", "256", "4"], "eager": ["off", "on"]}
    assert isinstance(loaded.strategy, OptimizeConfig)
    assert loaded.strategy.sampler == ("grid" if kind == "grid" else "tpe")


def _verdict(best: dict[str, str] | None, values: dict[tuple[str, str], list[float]]
             ) -> dict[str, object]:
    rows = [{"levels": {"max_num_seqs": n, "eager": e},
             "objectives": [{"metric": "output_throughput", "values": v}]}
            for (n, e), v in values.items()]
    return {"optimize": {"best": best, "ranked": rows, "rejected": [], "unproven": []}}


def test_the_check_holds_the_answer_to_the_grids_fastest_on_the_grids_own_trials() -> None:
    grid = _verdict({"max_num_seqs": "256", "eager": "off"}, {
        ("256", "off"): [1000.0, 1100.0], ("256", "on"): [980.0, 1000.0],
        ("1", "on"): [300.0, 310.0], ("4", "on"): [1040.0]})
    assert check(_verdict({"max_num_seqs": "256", "eager": "off"}, {}), grid)[0]
    ok, lines = check(_verdict({"max_num_seqs": "256", "eager": "on"}, {}), grid)
    assert ok and "not shown slower" in lines[-1]  # 94% of the fastest, within its noise
    assert "<- the search" in lines[2] and "<- the grid best" in lines[0]
    ok, lines = check(_verdict({"max_num_seqs": "1", "eager": "on"}, {}), grid)
    assert not ok and "shown slower" in lines[-1]
    assert check(_verdict(None, {}), grid)[0] is False
    assert check(_verdict({"max_num_seqs": "4", "eager": "off"}, {}), grid)[0] is False
    assert check(_verdict({"max_num_seqs": "4", "eager": "on"}, {}), grid)[0] is False  # 1 trial
