"""The real engine's files that run without the engine (issue 30): the campaign file it writes,
the probe's judgement of a reply, and the model's chat template. The engine itself (a 3.5 GB
venv, minutes to start) runs in `make real-engine`, not here (BENCHMARKS.md "A real engine")."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jinja2
import pytest

from experiments.agent import TOOLS
from experiments.campaign import load_campaign
from experiments.real_engine.campaign import campaign
from experiments.real_engine.make_model import CHAT_TEMPLATE
from experiments.real_engine.probe import well_formed
from experiments.real_engine.teach import conversation, reply_text

pytestmark = pytest.mark.pure


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
    patch = parser.levels["leaky"].patch[0]
    assert patch.root == str(packages.resolve())
    assert "+++ b/vllm/tool_parsers/hermes_tool_parser.py" in patch.diff
    start = loaded.pools[0].services[0].start
    assert start[start.index("--tool-call-parser") + 1] == "hermes"
    assert hasattr(loaded.workload, "command") == (kind == "probe")


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
