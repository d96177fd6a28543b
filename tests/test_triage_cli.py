"""``--tool-call-parser`` of ``bisect classify`` and ``bisect stress``: leaks triaged against the
server's parser (a parser mismatch said as such), or against every detector without it. Both
through the real console script."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiments.markup import MarkupFamily, render
from tests.support.agent_server import AgentServer, completion
from tests.support.cli import bisect, served

pytestmark = pytest.mark.real

ARGS = {"path": "a.py", "canary": "K9"}
V31 = render(MarkupFamily.V31, "read_file", ARGS)
MISMATCH = "parser mismatch: parses as deepseekv31, the server runs deepseekv3"


def classify(path: Path, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    result = bisect("classify", str(path), *args)
    report = json.loads(result.stdout) if result.returncode in (0, 1) else None
    return result.returncode, report, result.stderr


def test_classify_against_the_servers_parser(tmp_path: Path) -> None:
    path = tmp_path / "leak.json"
    path.write_text(json.dumps(completion(V31)))
    code, report, _ = classify(path, "--tool-call-parser", "deepseekv3")
    assert code == 1 and report is not None
    assert (report["outcome"], report["leak_form"], report["tool_call_parser"]) == (
        "leak", "parser_mismatch", "deepseekv3")
    assert report["leak_label"] == MISMATCH and report["parsed_as"] == ["deepseekv31"]
    assert report["leak_calls"] == [{"name": "read_file", "arguments": ARGS}]
    # Its own parser: well-formed, the server's parser failed on markup it reads.
    _, report, _ = classify(path, "--tool-call-parser", "deepseekv31")
    assert report is not None and report["leak_form"] == "well_formed"
    assert report["leak_label"] == "parses as deepseekv31, the server's parser"
    # Not known: every detector asked.
    _, report, _ = classify(path)
    assert report is not None and report["tool_call_parser"] is None
    assert (report["leak_form"], report["leak_label"]) == ("well_formed", "parses as deepseekv31")


def test_an_unknown_parser_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "leak.json"
    path.write_text(json.dumps(completion(V31)))
    code, _, stderr = classify(path, "--tool-call-parser", "qwen25")
    assert code == 2 and "does not judge against" in stderr and "deepseekv31" in stderr


def test_stress_counts_leaks_by_triage_label() -> None:
    async def leak_v31(key: str, turn: int, canary: str) -> dict[str, Any] | None:
        if int(key.split("-")[1]) % 2:
            return None
        return completion(render(MarkupFamily.V31, "read_file", {"path": "a", "canary": canary}))

    with served(AgentServer(leak_v31, models=["m"])) as url:
        args = ["stress", url, "--sessions", "6", "--rounds", "1"]
        done = bisect(*args, "--json", "--tool-call-parser", "deepseekv3")
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["counts"]["leak"] == 3 and summary["tool_call_parser"] == "deepseekv3"
        assert summary["leak_triage"] == {MISMATCH: 3}
        done = bisect(*args)  # unknown parser; the table, and the triage on stderr
        assert done.returncode == 0, done.stderr
        assert "leak triage: 3 × parses as deepseekv31" in done.stderr
        done = bisect(*args, "--tool-call-parser", "nope")
        assert done.returncode == 2 and "not a parser sglang knows" in done.stderr
