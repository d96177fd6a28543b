"""`bisect classify` through the real console script, on the whole triage corpus in one call:
SGLang's detectors judge it (not the built-in parser), neither torch nor transformers is
imported on the way (``python -X importtime`` lists every module), and every label is the one
triage gives in process, which test_triage_parsers.py checks against SGLang's own detectors.
And one response's quick start: neither rich nor, unless it leaks, pydantic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.workload.triage import ENV, triage_leak
from orchestrator.cli import MODULES
from tests.corpus_markup import CORPUS
from tests.support.cli import CLEAN_ENV

pytestmark = pytest.mark.real

HEAVY = ("torch", "transformers", "triton", "openai")


def completion(content: str) -> dict[str, object]:
    return {"object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": content},
         "finish_reason": "stop"}]}


def test_classify_imports_no_torch_and_keeps_the_labels() -> None:
    names = list(CORPUS)
    stdin = "".join(json.dumps(completion(CORPUS[name])) + "\n" for name in names)
    env = {**CLEAN_ENV, ENV: "sglang"}  # SGLang's detectors or a failure: never the built-in
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from orchestrator.cli import main; main()",
         "classify", "-", "--json"],
        input=stdin, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 1, done.stderr[-2000:]  # nearly every corpus text is a leak
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    # (importlib.import_module is not timed: the modules the detectors import by statement are.)
    assert "sglang.srt.function_call.base_format_detector" in imported
    assert not {module for module in imported if module.split(".")[0] in HEAVY}
    # nor the other commands' modules (orchestrator/cli/__init__.py: only the one asked for)
    assert not {f"orchestrator.cli.{m}" for m in MODULES if m != "classify_view"} & imported
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    assert [report["line"] for report in reports] == list(range(1, len(names) + 1))
    os.environ.pop(ENV, None)
    for name, report in zip(names, reports, strict=True):
        expected = triage_leak(CORPUS[name], backend="sglang")
        if expected.family is None:  # cut before its first tag: no markup, no leak
            assert report["outcome"] != "leak", name
            continue
        assert report["outcome"] == "leak", name
        assert (report["leak_form"], report["leak_label"]) == (expected.form, expected.label), name
        if expected.family != "think":
            assert report["source"] == "sglang", name


def test_one_response_is_judged_without_rich_and_without_pydantic_unless_it_leaks(
        tmp_path: Path) -> None:
    # Issue 31's start: typer's coercion of its arguments without pydantic
    # (orchestrator/cli/coercion.py), the consoles made only when they print; a leak's triage
    # needs pydantic for SGLang's own request models.
    imported: dict[str, set[str]] = {}
    for name, content in (("plain", "no markup here"), ("leak", CORPUS["v31"])):
        (tmp_path / f"{name}.json").write_text(json.dumps(completion(content)))
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "from orchestrator.cli import main; main()",
             "classify", str(tmp_path / f"{name}.json")],
            capture_output=True, text=True, env={**CLEAN_ENV, ENV: "sglang"}, timeout=120,
            check=False)
        assert done.returncode == 1, done.stderr[-2000:]  # no tool call, or a leak
        assert json.loads(done.stdout)["outcome"] == ("leak" if name == "leak" else "no_tool")
        imported[name] = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                          for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "typer" in imported["plain"] and not {"pydantic", "rich"} & imported["plain"]
    assert "pydantic" in imported["leak"] and "rich" not in imported["leak"]
