"""What a server owes the workload: bytes that decode, and a reply of the OpenAI schema's shape.

Where the line runs between a broken server and a corrupted model output:

- **Broken reply (``error``)**: everything the server's own code builds. The body must be UTF-8
  and standard JSON (RFC 8259: no NaN, no Infinity, no number that overflows a double, no lone
  surrogate); the completion must have the schema's types: ``choices`` a non-empty list of
  objects, ``message`` (``delta`` in a stream) an object, ``content`` and ``reasoning_content``
  strings or null, ``tool_calls`` a list (or null) of objects,
  each with a string ``id`` and a ``function`` object whose ``name`` and ``arguments`` are
  strings (``type``, when given, a string). None of this is the
  model's doing: a tokenizer cannot emit a JSON list where the server's parser puts a name, so a
  violation is infrastructure evidence, never counted as corruption. Only the fields the
  judgement reads are checked (not ``usage``, ``finish_reason``, ``model``): a server that
  differs from OpenAI in what nobody judges is not broken for the workload.
- **Corruption (``leak``, ``no_tool``, ``bad_args``, ``lost_plot``)**: what the model wrote,
  carried in a well-formed reply: markup in a content string, no call at all, a name string that
  is no offered tool, an ``arguments`` string that is not a JSON object matching the tool's
  schema (empty included), a wrong canary. These are judged by ``classify.classify_turn`` only
  once the shape checks below pass.

Pure: no I/O. ``decode_json`` is the one JSON reader of server output (bodies and SSE events);
``completion_problem`` checks a whole reply; a stream's chunks are checked as they are folded
(``sse.StreamAccumulator.feed``: fields may be absent or null there, given they have their type;
a stream's ``index`` an integer).
"""

from __future__ import annotations

import reprlib
from typing import Any

import orjson

_NEAR = 40  # characters of context shown on each side of where decoding failed
# orjson writes at most 254 levels; past that (a reply may nest 1,024) a bounded repr shows it.
_DEEP = reprlib.Repr()  # 3.11 takes no keyword arguments: the limits are set below
_DEEP.maxlevel, _DEEP.maxdict, _DEEP.maxlist, _DEEP.maxstring = 8, 20, 20, 500


class BrokenReply(ValueError):
    """The server's reply breaks the protocol: its bytes, its JSON or the schema's types."""


def decode_json(data: bytes, what: str = "body") -> Any:
    """``data`` as JSON, strictly (orjson: UTF-8, RFC 8259); BrokenReply saying what and where.

    No lenient fallback: what orjson refuses (NaN, 1e400, invalid UTF-8, a lone surrogate,
    nesting past 1,024) no OpenAI-compatible server sends when it works."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BrokenReply(json_problem(data, exc, what)) from None


def shown(value: Any) -> str:
    """A decoded reply (or a part) as compact JSON for evidence, however deep it nests."""
    try:
        return orjson.dumps(value, default=str).decode()
    except orjson.JSONEncodeError:
        return _DEEP.repr(value)


def json_problem(data: bytes, exc: orjson.JSONDecodeError, what: str) -> str:
    """Why ``data`` did not decode (``decode_json``'s sentence, for a caller of orjson's own)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as bad:
        raw = data[max(0, bad.start - _NEAR) : bad.start + 8]
        return f"{what} is not valid UTF-8 (byte {bad.start}: {raw!r})"
    near = text[max(0, exc.pos - _NEAR) : exc.pos + _NEAR]
    return f"{what} is not valid JSON ({exc.msg} at character {exc.pos}: {near!r})"


def _typed(value: Any, kind: type | tuple[type, ...], nullable: bool = True) -> bool:
    if value is None:
        return nullable
    return isinstance(value, kind) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def wrong(where: str, value: Any, expected: str) -> str:
    """The sentence for a field of the wrong type: ``where`` is VALUE's type, not EXPECTED."""
    return f"{where} is {_type_name(value)}, not {expected}"


def _text_fields(holder: dict[str, Any], where: str, names: tuple[str, ...]) -> str | None:
    for name in names:
        value = holder.get(name)
        if not _typed(value, str):
            return wrong(f"{where}.{name}", value, "a string or null")
    return None


def completion_problem(response: Any) -> str | None:
    """Why ``response`` is not a chat.completion of the schema's types, or None (first choice)."""
    if not isinstance(response, dict):
        return wrong("the reply", response, "an object")
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        shown = "an empty list" if choices == [] else _type_name(choices)
        return f"choices is {shown}, not a non-empty list"
    choice = choices[0]
    if not isinstance(choice, dict):
        return wrong("choices[0]", choice, "an object")
    message = choice.get("message")
    if not isinstance(message, dict):
        return wrong("choices[0].message", message, "an object")
    problem = _text_fields(message, "message", ("content", "reasoning_content"))
    if problem:
        return problem
    calls = message.get("tool_calls")
    if not _typed(calls, list):
        return wrong("message.tool_calls", calls, "a list or null")
    for number, call in enumerate(calls or ()):
        problem = _call_problem(call, f"tool_calls[{number}]")
        if problem:
            return problem
    return None


def _call_problem(call: Any, where: str) -> str | None:
    if not isinstance(call, dict):
        return wrong(where, call, "an object")
    problem = _text_fields(call, where, ("id", "type"))
    if problem:
        return problem
    function = call.get("function")
    if not isinstance(function, dict):
        return wrong(f"{where}.function", function, "an object")
    problem = _text_fields(function, f"{where}.function", ("name", "arguments"))
    if problem:
        return problem
    for name, value in (("id", call.get("id")), ("function.name", function.get("name")),
                        ("function.arguments", function.get("arguments"))):
        if value is None:
            return f"{where}.{name} is missing"
    return None
