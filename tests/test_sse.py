"""StreamAccumulator and parse_sse_text: SSE chunks folded into one chat.completion."""

from __future__ import annotations

import json
from typing import Any

import pytest

from experiments.workload.sse import SSEError, StreamAccumulator, parse_sse_text

pytestmark = pytest.mark.pure


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "dsv4",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    body.update(extra)
    return body


def tool_stream() -> list[dict[str, Any]]:
    """Two parallel calls, arguments split across deltas, then a usage-only final chunk."""
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "think "}),
        chunk({"reasoning_content": "harder"}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": '}}]}),
        chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "call_b", "function": {"name": "ls", "arguments": "{}"}}
                ]
            }
        ),
        # A lax server repeating empty id/name must not erase the first ones.
        chunk(
            {"tool_calls": [{"index": 0, "id": "", "function": {"name": "", "arguments": '"a"}'}}]}
        ),
        chunk({}, finish="tool_calls"),
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "dsv4",
            "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
    ]


def test_tool_calls_accumulate_by_index() -> None:
    acc = StreamAccumulator()
    for item in tool_stream():
        acc.feed(item)
    result = acc.result()
    assert result["id"] == "chatcmpl-1"
    assert result["object"] == "chat.completion"
    assert result["model"] == "dsv4"
    assert result["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    choice = result["choices"][0]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["role"] == "assistant"
    assert message["content"] is None  # empty content next to calls is null, as non-streaming
    assert message["reasoning_content"] == "think harder"
    assert message["tool_calls"] == [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a"}'},
        },
        {"id": "call_b", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
    ]


def test_content_only_stream_has_no_tool_calls_key() -> None:
    acc = StreamAccumulator()
    acc.feed(chunk({"role": "assistant"}))
    acc.feed(chunk({"content": "Hello, "}))
    acc.feed(chunk({"content": "world"}, finish="stop"))
    message = acc.result()["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "Hello, world"}
    assert acc.result()["usage"] is None


def test_leaked_markup_stays_in_content() -> None:
    acc = StreamAccumulator()
    for piece in ["<｜DSML｜function", "_calls><｜DSML｜invoke name=", '"ls"></｜DSML｜invoke>']:
        acc.feed(chunk({"content": piece}))
    acc.feed(chunk({}, finish="stop"))
    assert acc.result()["choices"][0]["message"]["content"] == (
        '<｜DSML｜function_calls><｜DSML｜invoke name="ls"></｜DSML｜invoke>'
    )


def as_sse(chunks: list[dict[str, Any]]) -> str:
    lines = [": keep-alive", ""]
    for item in chunks:
        lines += [f"data: {json.dumps(item, ensure_ascii=False)}", ""]
    lines += ["data: [DONE]", ""]
    return "\r\n".join(lines)  # servers send CRLF; splitlines must cope


def test_parse_sse_text_matches_the_accumulator() -> None:
    acc = StreamAccumulator()
    for item in tool_stream():
        acc.feed(item)
    assert parse_sse_text(as_sse(tool_stream())) == acc.result()


def test_parse_sse_text_without_space_after_colon_and_other_fields() -> None:
    text = 'event: message\nid: 3\ndata:{"id":"x","choices":[{"delta":{"content":"hi"}}]}\n\n'
    assert parse_sse_text(text)["choices"][0]["message"]["content"] == "hi"


def test_malformed_json_names_the_line() -> None:
    text = 'data: {"id": "x", "choices": []}\n\ndata: {"id": oops\n\ndata: [DONE]\n'
    with pytest.raises(SSEError, match=r"line 3: data is not valid JSON"):
        parse_sse_text(text)


def test_non_object_data_is_an_error() -> None:
    with pytest.raises(SSEError, match=r"line 1: data is not a JSON object"):
        parse_sse_text("data: [1, 2]\n\n")


@pytest.mark.parametrize("text", ["", "\n\n", ": only a comment\n", "data: [DONE]\n\n"])
def test_no_data_is_an_error(text: str) -> None:
    with pytest.raises(SSEError, match="no 'data:' events"):
        parse_sse_text(text)


def test_sse_error_is_a_value_error() -> None:
    assert issubclass(SSEError, ValueError)
