"""OpenAI chat-completions shapes: the request the twin accepts and the bodies it sends."""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from experiments.twin.agent_script import Reply


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: ToolFunction


class ChatRequest(BaseModel):
    # Sampling parameters and the like are accepted and ignored, as a twin has no sampler.
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Any = "auto"
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    # Added by the PD router (as sglang_router does): where the prefill's bootstrap server is and
    # which transfer ("room") this request is.
    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None


def error_body(message: str, kind: str, code: int) -> dict[str, Any]:
    """SGLang's flat ``ErrorResponse`` plus OpenAI's nested ``error``, so either reader finds it."""
    inner = {"message": message, "type": kind, "param": None, "code": code}
    return {"object": "error", **inner, "error": inner}


def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in reply.tool_calls
    ]


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion_body(rid: str, model: str, reply: Reply, use: dict[str, int]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content,
                               "reasoning_content": None}
    message["tool_calls"] = _tool_calls(reply) or None
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None,
             "finish_reason": reply.finish_reason, "matched_stop": None}
        ],
        "usage": use,
    }


TOKEN_CHARS = 4  # the twin's tokenizer: 4 characters a token (as estimate_tokens)


def _pieces(text: str) -> list[str]:
    return [text[i : i + TOKEN_CHARS] for i in range(0, len(text), TOKEN_CHARS)]


def token_deltas(reply: Reply) -> list[dict[str, Any]]:
    """One streaming delta per output token: content pieces, then each call's name and pieces.

    Their number is the reply's completion tokens, so streamed and plain replies cost the same.
    """
    deltas: list[dict[str, Any]] = [{"content": piece} for piece in _pieces(reply.content or "")]
    for index, call in enumerate(reply.tool_calls):
        deltas.append({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                       "function": {"name": call.name, "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                   for piece in _pieces(call.arguments)]
    return deltas or [{"content": ""}]


def merge_deltas(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Several tokens' deltas as few as possible (SGLang's --stream-interval: one chunk carries
    several tokens): content joined; pieces of one tool call joined into one delta."""
    merged: list[dict[str, Any]] = []
    for delta in deltas:
        last = merged[-1] if merged else None
        if last is not None and "content" in delta and "content" in last:
            last["content"] += delta["content"]
            continue
        call = (delta.get("tool_calls") or [None])[0]
        last_call = (last.get("tool_calls") or [None])[0] if last is not None else None
        if call is not None and last_call is not None and call["index"] == last_call["index"] \
                and "id" not in call:
            last_call["function"]["arguments"] += call["function"]["arguments"]
            continue
        merged.append(json.loads(json.dumps(delta)))  # a deep copy: merging must not alias
    return merged


class ChunkMaker:
    """SSE chunk bodies of one streamed reply (all share id, model and creation time)."""

    def __init__(self, rid: str, model: str) -> None:
        self.rid, self.model, self.created = rid, model, int(time.time())

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.rid, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def usage(self, use: dict[str, int]) -> dict[str, Any]:
        return {"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [], "usage": use}


def stream_chunks(
    rid: str, model: str, reply: Reply, use: dict[str, int] | None
) -> list[dict[str, Any]]:
    """The SSE events of one reply: role, one event per token, finish, usage (when asked)."""
    maker = ChunkMaker(rid, model)
    chunks = [maker.chunk({"role": "assistant", "content": ""})]
    chunks += [maker.chunk(delta) for delta in token_deltas(reply)]
    chunks.append(maker.chunk({}, reply.finish_reason))
    if use is not None:
        chunks.append(maker.usage(use))
    return chunks


def sse(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"
