"""OpenAI chat-completions shapes: the request the twin accepts and the bodies it sends."""

from __future__ import annotations

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


def _pieces(text: str, count: int = 3) -> list[str]:
    step = max(1, -(-len(text) // count))
    return [text[i : i + step] for i in range(0, len(text), step)] or [""]


def stream_chunks(
    rid: str, model: str, reply: Reply, use: dict[str, int] | None
) -> list[dict[str, Any]]:
    """The SSE events of one reply: role, content pieces or tool-call pieces, finish, usage."""
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    if reply.content:
        chunks += [chunk({"content": piece}) for piece in _pieces(reply.content)]
    for index, call in enumerate(reply.tool_calls):
        head = {"index": index, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""}}
        chunks.append(chunk({"tool_calls": [head]}))
        chunks += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(call.arguments)
        ]
    chunks.append(chunk({}, reply.finish_reason))
    if use is not None:
        chunks.append({"id": rid, "object": "chat.completion.chunk", "created": created,
                       "model": model, "choices": [], "usage": use})
    return chunks
