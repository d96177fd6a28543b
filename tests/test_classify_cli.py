"""`bisect classify FILE|-`: one saved response (JSON or SSE) judged like the stress workload;
exit 0 clean, 1 corrupt, 2 unreadable input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from experiments.markup import MarkupFamily, render
from orchestrator.cli import app

pytestmark = pytest.mark.pure

CANARY = "K9"
ARGS = {"path": "a.py", "canary": CANARY}


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def completion(content: str | None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "model": "dsv4",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }


def call(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps(arguments)},
    }


def sse(chunks: list[dict[str, Any]]) -> str:
    body = "".join(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n" for chunk in chunks)
    return ": keep-alive\n\n" + body + "data: [DONE]\n\n"


def delta(payload: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion.chunk",
        "model": "dsv4",
        "choices": [{"index": 0, "delta": payload, "finish_reason": finish}],
    }


def invoke(runner: CliRunner, *args: str, stdin: str | None = None) -> tuple[int, Any, str]:
    result = runner.invoke(app, ["classify", *args], input=stdin)
    report = json.loads(result.stdout) if result.exit_code in (0, 1) else None
    return result.exit_code, report, result.stderr


def test_json_file_ok_and_canary(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(completion(None, [call(ARGS)])))
    code, report, _ = invoke(runner, str(path), "--canary", CANARY)
    assert code == 0
    assert report["file"] == str(path) and report["format"] == "json"
    assert (report["outcome"], report["corrupt"], report["canary_checked"]) == ("ok", False, True)
    assert report["tool_call"]["arguments"] == ARGS
    assert report["leak_form"] is None
    # A wrong canary is lost_plot; without --canary it is not checked.
    code, report, _ = invoke(runner, str(path), "--canary", "OTHER")
    assert (code, report["outcome"], report["corrupt"]) == (1, "lost_plot", True)
    code, report, _ = invoke(runner, str(path))
    assert (code, report["outcome"], report["canary_checked"]) == (0, "ok", False)


def test_json_file_with_a_well_formed_leak(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "leak.json"
    path.write_text(json.dumps(completion(render(MarkupFamily.V4, "read_file", ARGS))))
    code, report, _ = invoke(runner, str(path))
    assert code == 1  # corrupt
    assert (report["outcome"], report["leak_form"], report["family"]) == (
        "leak",
        "well_formed",
        "v4",
    )
    assert report["source"] in ("sglang", "builtin")
    assert report["leak_calls"] == [{"name": "read_file", "arguments": ARGS}]
    assert "｜DSML｜tool_calls" in report["evidence"]


def test_sse_file_with_a_malformed_leak(runner: CliRunner, tmp_path: Path) -> None:
    text = render(MarkupFamily.DSML, "read_file", ARGS)
    cut = text[: len(text) - 30]  # the stream ended inside the block
    chunks = [delta({"role": "assistant"})]
    chunks += [delta({"content": cut[i : i + 7]}) for i in range(0, len(cut), 7)]
    chunks.append(delta({}, finish="length"))
    path = tmp_path / "leak.sse"
    path.write_text(sse(chunks))
    code, report, _ = invoke(runner, str(path))
    assert code == 1
    assert report["format"] == "sse"
    assert (report["outcome"], report["leak_form"], report["family"]) == (
        "leak",
        "malformed",
        "dsml",
    )
    assert report["leak_reason"]


def test_stdin_sse_with_streamed_tool_calls(runner: CliRunner) -> None:
    arguments = json.dumps(ARGS)
    chunks = [
        delta({"role": "assistant", "content": ""}),
        delta(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": arguments[:10]},
                    }
                ]
            }
        ),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": arguments[10:]}}]}),
        delta({}, finish="tool_calls"),
    ]
    code, report, _ = invoke(runner, "-", "--canary", CANARY, stdin=sse(chunks))
    assert code == 0
    assert (report["file"], report["format"], report["outcome"]) == ("<stdin>", "sse", "ok")


def test_stdin_json(runner: CliRunner) -> None:
    code, report, _ = invoke(runner, "-", stdin=json.dumps(completion("I am done.")))
    assert (code, report["outcome"], report["format"]) == (1, "no_tool", "json")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty input"),
        ("hello there", "neither JSON nor an SSE stream"),
        ("[1, 2]", "not a chat completion"),
        ('data: {"choices": [\n\n', "line 1: data is not valid JSON"),
        (": just a comment\n\n", "no 'data:' events"),
    ],
)
def test_bad_input_exits_2_naming_the_file(
    runner: CliRunner, tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(content)
    code, _, stderr = invoke(runner, str(path))
    assert code == 2
    assert str(path) in stderr and message in stderr and "Traceback" not in stderr


def test_unreadable_file_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    code, _, stderr = invoke(runner, str(missing))
    assert code == 2 and str(missing) in stderr
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    code, _, stderr = invoke(runner, str(binary))
    assert code == 2 and str(binary) in stderr


def test_bad_stdin_exits_2(runner: CliRunner) -> None:
    code, _, stderr = invoke(runner, "-", stdin="not json")
    assert code == 2 and "<stdin>" in stderr


def test_a_response_without_choices_is_an_error_outcome(runner: CliRunner) -> None:
    # Valid JSON that is not a completion is still judged (an HTTP error body is evidence).
    code, report, _ = invoke(runner, "-", stdin=json.dumps({"error": {"message": "overloaded"}}))
    assert (code, report["outcome"]) == (0, "error")


def test_a_response_is_judged_against_its_own_request(runner: CliRunner, tmp_path: Path) -> None:
    """--request: the request's own tools and latest canary judge the response; a call of a
    tool the built-in set lacks is fine there, and its canary rides in a string argument."""
    tools = [{"type": "function", "function": {
        "name": "lookup_order", "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string"}}, "required": ["order_id"]}}}]
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model": "m", "tools": tools, "messages": [
        {"role": "user", "content": "Find it. canary=OLD1"},
        {"role": "tool", "tool_call_id": "c0", "content": "not found. canary=NEW2"}]}))
    response = tmp_path / "response.json"
    arguments = json.dumps({"order_id": "A-17 NEW2"})
    ours: dict[str, Any] = {"id": "call_1", "type": "function",
            "function": {"name": "lookup_order", "arguments": arguments}}
    response.write_text(json.dumps(completion(None, [ours])))
    code, report, _ = invoke(runner, str(response), "--request", str(request), "--json")
    assert (code, report["outcome"], report["canary_checked"]) == (0, "ok", True)
    assert report["request"] == str(request)
    # Against the built-in tools the same call is a tool that was never offered.
    code, report, _ = invoke(runner, str(response))
    assert code == 1 and report["corrupt"]
    # The older canary is lost_plot against the request.
    stale = {**ours, "function": {**ours["function"],
                                  "arguments": json.dumps({"order_id": "A-17 OLD1"})}}
    response.write_text(json.dumps(completion(None, [stale])))
    code, report, _ = invoke(runner, str(response), "--request", str(request))
    assert (code, report["outcome"]) == (1, "lost_plot")


def test_a_request_without_tools_exits_2_naming_it(runner: CliRunner, tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model": "m", "messages": []}))
    response = tmp_path / "response.json"
    response.write_text(json.dumps(completion("hi")))
    code, _, stderr = invoke(runner, str(response), "--request", str(request))
    assert code == 2 and str(request) in stderr and "tools" in stderr


# ---- many responses in one call ------------------------------------------------------------


def lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_several_files_and_a_directory(runner: CliRunner, tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps(completion(None, [call(ARGS)])))
    (folder / "b.json").write_text(json.dumps(completion(render(MarkupFamily.V4, "read_file",
                                                                ARGS))))
    (folder / ".hidden").write_text("not a response")
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(completion(None, [call(ARGS)])))
    result = runner.invoke(app, ["classify", str(ok), str(folder), "--json"])
    assert result.exit_code == 1  # b.json leaked
    reports = lines(result.stdout)
    assert [(r["file"], r["line"], r["outcome"]) for r in reports] == [
        (str(ok), None, "ok"), (str(folder / "a.json"), None, "ok"),
        (str(folder / "b.json"), None, "leak")]
    assert "3 judged, 1 corrupt, 0 unreadable" in result.stderr
    # Without --json: a line each, the leak with its label.
    result = runner.invoke(app, ["classify", str(ok), str(folder / "b.json")])
    assert result.stdout.splitlines() == [
        f"{ok}: ok", f"{folder / 'b.json'}: leak: parses as deepseekv4 or deepseekv32"]
    # All clean: 0.
    result = runner.invoke(app, ["classify", str(ok), str(folder / "a.json")])
    assert result.exit_code == 0


def test_json_lines_on_stdin(runner: CliRunner) -> None:
    clean = json.dumps(completion(None, [call(ARGS)]))
    leak = json.dumps(completion(render(MarkupFamily.V31, "read_file", ARGS)))
    result = runner.invoke(app, ["classify", "-", "--json"], input=f"{clean}\n\n{leak}\n")
    assert result.exit_code == 1
    reports = lines(result.stdout)
    assert [(r["file"], r["line"], r["outcome"]) for r in reports] == [
        ("<stdin>", 1, "ok"), ("<stdin>", 3, "leak")]
    assert reports[1]["leak_label"] == "parses as deepseekv31"
    result = runner.invoke(app, ["classify", "-", "--json"], input=f"{clean}\n{clean}\n")
    assert result.exit_code == 0 and len(lines(result.stdout)) == 2


def test_a_bad_line_is_named_and_the_rest_judged(runner: CliRunner, tmp_path: Path) -> None:
    clean = json.dumps(completion(None, [call(ARGS)]))
    result = runner.invoke(app, ["classify", "-", "--json"],
                           input=f'{clean}\n{{"choices": [\n{clean}\n')
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "<stdin>:2: " in result.stderr and "not valid JSON" in result.stderr
    assert [r["line"] for r in lines(result.stdout)] == [1, 3]
    # A file of JSON Lines is read the same way, and one bad file among good ones is named.
    saved = tmp_path / "capture.jsonl"
    saved.write_text(f"{clean}\n[1]\n")
    missing = tmp_path / "missing.json"
    result = runner.invoke(app, ["classify", str(saved), str(missing), "--json"])
    assert result.exit_code == 2
    assert f"{saved}:2: JSON is a list" in result.stderr and str(missing) in result.stderr
    assert "1 judged, 0 corrupt, 2 unreadable" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["classify", str(empty)])
    assert result.exit_code == 2 and f"{empty}: a directory without files" in result.stderr


def test_a_pretty_printed_response_is_one_response(runner: CliRunner) -> None:
    pretty = json.dumps(completion(None, [call(ARGS)]), indent=2)
    code, report, _ = invoke(runner, "-", stdin=pretty)
    assert (code, report["outcome"], report["line"]) == (0, "ok", None)
