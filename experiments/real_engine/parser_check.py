"""The planted fault on vLLM's hermes parser alone, no server: stock parses every call, patched
hands back as content exactly the calls whose arguments hold a "7".

Runs in the engine's venv (``make real-engine-check``): the diff is applied to a copy of the
installed parser with ``patch``, and both modules are imported side by side.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

DIFF = Path(__file__).resolve().parent / "hermes-leak.diff"
NAME = "vllm/tool_parsers/hermes_tool_parser.py"


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def patched_copy(stock: Path, work: Path) -> Path:
    (work / "vllm/tool_parsers").mkdir(parents=True)
    shutil.copy(stock, work / NAME)
    subprocess.run(["patch", "-s", "-p1", "-d", str(work), "-i", str(DIFF)], check=True)
    return work / NAME


def outcomes(module: ModuleType, tokenizer: Any, canaries: list[str]) -> list[bool]:
    """For each canary, whether the parser returned a structured call (True) or content."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}])
    parser = module.Hermes2ProToolParser(tokenizer)
    found = []
    for canary in canaries:
        call = {"name": "read_file", "arguments": {"path": "README.md", "canary": canary}}
        text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        info = parser.extract_tool_calls(text, request)
        assert info.tools_called or info.content == text, info
        found.append(info.tools_called)
    return found


def main() -> None:
    import vllm.tool_parsers.hermes_tool_parser as stock
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
    canaries = ["ABCDEFGHIJ", "K7LMNOPQR1", "STUVWXYZ06", "0123456789", "Z0Z0Z0Z0Z8"]
    with tempfile.TemporaryDirectory() as work:
        leaky = load(patched_copy(Path(stock.__file__), Path(work)), "hermes_leaky")
        got = {"stock": outcomes(stock, tokenizer, canaries),
               "leaky": outcomes(leaky, tokenizer, canaries)}
    want = {"stock": [True] * len(canaries),
            "leaky": ["7" not in c for c in canaries]}
    print(json.dumps({"canaries": canaries, **got}))
    if got != want:
        raise SystemExit(f"the planted fault does not behave as planted: want {want}")


if __name__ == "__main__":
    main()
