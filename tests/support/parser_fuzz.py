"""Property-based fuzzing of every parser of server output: strategies and the properties each
parser must keep, shared by test_broken_replies.py (a hundred inputs each) and
bench/fuzz_parsers.py (>= 10,000 each, counted for RELIABILITY.md).

Each ``Target`` pairs a hypothesis strategy of hostile inputs (mutations of valid output, not
only noise: a fuzzer that only sends random bytes never gets past the first ``{``) with a
``check`` that feeds one input to the parser and asserts what it promises. An AssertionError is
a broken promise; any other exception escaping ``check`` is a traceback the parser let out.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from deploy.preflight import help_flags
from experiments.agent import TOOLS
from experiments.collect import KEPT_METRICS, MAX_EVENT_TEXT, log_events, parse_metrics
from experiments.outcomes import Outcome
from experiments.workload.classify import EVIDENCE_LIMIT, TurnVerdict, classify_turn
from experiments.workload.client import read_sse
from experiments.workload.reply import BrokenReply, completion_problem, decode_json
from experiments.workload.saved import SavedResponseError, classify_saved
from experiments.workload.sse import SSEError, parse_sse_text

CANARY = "CANARY0001"
_SLOT = "\u0000SLOT\u0000"  # a JSON string value replaced by a raw token after encoding
# Raw tokens no server may send: each makes the whole body a broken reply.
BROKEN_TOKENS = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b'"\\ud800"', b'"caf\xe9"',
                 b'"\xed\xa0\x80"', b"[" * 1100 + b"]" * 1100]
_WRONG_TYPES: list[Any] = [[], {}, 7, 1.5, True, [["x"]], {"a": "b"}]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@dataclass(frozen=True)
class Target:
    name: str
    inputs: st.SearchStrategy[Any]
    check: Callable[[Any], None]


def _run(awaitable: Any) -> Any:
    return asyncio.run(awaitable)


# -- chat completion JSON (reply.decode_json + classify.classify_turn, as post_turn reads a body)

def completion(content: Any = None, arguments: Any = None, name: Any = "read_file") -> Any:
    if arguments is None:
        arguments = json.dumps({"path": "a.py", "canary": CANARY})
    call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"id": "c", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": content,
                                     "tool_calls": [call]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


# Where a wrong type makes the reply broken (reply.py's line), as paths into completion().
TYPED_PATHS: list[tuple[Any, ...]] = [
    ("choices",), ("choices", 0), ("choices", 0, "message"),
    ("choices", 0, "message", "tool_calls"), ("choices", 0, "message", "tool_calls", 0),
    ("choices", 0, "message", "tool_calls", 0, "id"),
    ("choices", 0, "message", "tool_calls", 0, "function"),
    ("choices", 0, "message", "tool_calls", 0, "function", "name"),
    ("choices", 0, "message", "tool_calls", 0, "function", "arguments"),
]
_ANY_PATHS = [*TYPED_PATHS, ("choices", 0, "message", "content"), ("usage", "prompt_tokens"),
              ("id",), ("model",), ("choices", 0, "finish_reason")]


def _put(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    holder = document
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    return document


def _wrong_type(path: tuple[Any, ...], value: Any) -> bool:
    """The oracle, written apart from reply.py: what the schema says each typed path holds."""
    if path == ("choices",):
        return not isinstance(value, list) or not value
    if path[-1] == "tool_calls":
        return value is not None and not isinstance(value, list)
    if path[-1] in ("id", "name", "arguments"):
        return not isinstance(value, str)
    return not isinstance(value, dict)


@st.composite
def completion_bodies(draw: st.DrawFn) -> tuple[bytes, bool]:
    """(body bytes, whether it must be an ``error``): valid replies with one field replaced,
    a raw token no JSON has, noise spliced in, or cut short."""
    content = draw(st.none() | st.text(max_size=30) | st.sampled_from(
        ["<｜DSML｜invoke", "</think> x", "<tool_call>", "y" * 5000]))
    arguments = draw(st.none() | st.text(max_size=30) | st.sampled_from(
        ['{"path": "a", "canary": ', '{"path": NaN, "canary": "x"}', "", "[]", "[" * 5000,
         '{"path": "a", "canary": "WRONG00000"}']))
    name = draw(st.sampled_from(["read_file", "delete_repo", "", "n" * 5000]))
    document = completion(content, arguments, name)
    must_fail = False
    kind = draw(st.sampled_from(["field", "token", "splice", "cut", "plain"]))
    if kind == "field":
        path = draw(st.sampled_from(TYPED_PATHS))
        value = draw(st.sampled_from(_WRONG_TYPES) | json_values)
        _put(document, path, value)
        must_fail = _wrong_type(path, value)
    elif kind == "token":
        _put(document, draw(st.sampled_from(_ANY_PATHS)), _SLOT)
    data = json.dumps(document).encode()
    if kind == "token":
        data = data.replace(json.dumps(_SLOT).encode(), draw(st.sampled_from(BROKEN_TOKENS)))
        must_fail = True
    elif kind == "splice":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(max_size=8)) + data[at:]
    elif kind == "cut":
        data = data[: draw(st.integers(0, len(data)))]
    return data, must_fail


def _bounded(verdict: TurnVerdict) -> None:
    assert verdict.outcome in Outcome
    assert verdict.evidence is None or len(verdict.evidence) <= EVIDENCE_LIMIT, "evidence grows"


def check_completion(case: tuple[bytes, bool]) -> None:
    data, must_fail = case
    try:
        document = decode_json(data)
    except BrokenReply as exc:
        assert str(exc)
        return
    verdict = classify_turn(document, CANARY, TOOLS)
    _bounded(verdict)
    if must_fail or completion_problem(document) is not None:
        assert verdict.outcome is Outcome.ERROR, (verdict, data[:300])


# -- SSE, as the live reader reads it (client.read_sse), in pieces cut anywhere

class Pieces:
    """A response body that arrives in the given pieces."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = list(pieces)

    async def read_some(self) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


def _chunk(delta: Any) -> Any:
    return {"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


_VALID_DELTAS: list[Any] = [
    {"role": "assistant", "content": ""}, {"content": "let me look. "},
    {"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                     "function": {"name": "read_file", "arguments": ""}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '{"path": "a", '}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": f'"canary": "{CANARY}"}}'}}]},
]
_ODD_DELTAS: list[Any] = [
    {"content": "<｜DSML｜invoke"}, {"tool_calls": [{"index": 0, "function": {"name": []}}]},
    {"content": 5}, {"tool_calls": {}}, {}, None, {"tool_calls": [{"index": "0"}]},
    {"tool_calls": [{"index": 1, "id": "call_1", "function": {"name": "nope"}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": 7}}]},
]


@st.composite
def _event(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["odd", "any", "raw", "token", "comment", "done"]))
    if kind == "odd":
        return json.dumps(_chunk(draw(st.sampled_from(_ODD_DELTAS)))).encode()
    if kind == "any":
        return json.dumps(_chunk(draw(json_values))).encode()
    if kind == "raw":
        return draw(st.binary(max_size=20))
    if kind == "token":
        return (b'{"choices": [{"delta": {"content": %s}}]}'
                % draw(st.sampled_from(BROKEN_TOKENS)))
    return b": keep-alive" if kind == "comment" else b"[DONE]"


@st.composite
def sse_streams(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """(the whole stream, the same bytes cut into pieces): a valid stream of one call, with a
    few events replaced, dropped or added, and noise spliced in."""
    events = [json.dumps(_chunk(delta)).encode() for delta in _VALID_DELTAS] + [b"[DONE]"]
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(events)))
        change = draw(st.sampled_from(["replace", "insert", "drop"]))
        if change == "drop" and at < len(events):
            del events[at]
        elif change == "replace" and at < len(events):
            events[at] = draw(_event())
        else:
            events.insert(at, draw(_event()))
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    stream = b"".join((b"" if e.startswith(b":") else b"data: ") + e + newline * 2
                      for e in events)
    if draw(st.integers(0, 3)) == 0:
        at = draw(st.integers(0, len(stream)))
        stream = stream[:at] + draw(st.binary(max_size=6)) + stream[at:]
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    return stream, [piece for piece in pieces if piece]


def _comparable(answer: Any) -> Any:
    return (answer.outcome, answer.evidence) if isinstance(answer, TurnVerdict) else answer


def check_sse(case: tuple[bytes, list[bytes]]) -> None:
    stream, pieces = case
    whole = _run(read_sse(Pieces([stream] if stream else [])))
    cut = _run(read_sse(Pieces(pieces)))
    assert _comparable(cut) == _comparable(whole), "the answer depends on where reads cut"
    if isinstance(whole, TurnVerdict):
        _bounded(whole)
        assert whole.outcome is Outcome.ERROR
    else:
        _bounded(classify_turn(whole, CANARY, TOOLS))
    try:  # the saved-stream reader (bisect classify) on the same bytes
        parse_sse_text(stream.decode("utf-8", "replace"))
    except SSEError as exc:
        assert str(exc)


def check_saved(text: str) -> None:
    try:
        report = classify_saved(text, CANARY)
    except SavedResponseError as exc:
        assert str(exc)
        return
    assert report["outcome"] in {o.value for o in Outcome}


# -- Prometheus text (experiments/collect.parse_metrics)

_METRIC_LINES = [
    "# HELP sglang:num_running_reqs Running requests.", "# TYPE sglang:num_running_reqs gauge",
    'sglang:num_running_reqs{model_name="m",engine="0"} 3.0', "sglang:token_usage 0.5",
    "sglang:cache_hit_rate NaN", "sglang:gen_throughput +Inf", "sglang:num_queue_reqs -Inf",
    "# TYPE sglang:num_transfer_failed_reqs_total counter",
    "sglang:num_transfer_failed_reqs_total 2", 'sglang:num_used_tokens{a="\\"\\n"} 1e400',
    "other_metric 1", "# EOF",
]
metrics_texts = st.lists(
    st.sampled_from(_METRIC_LINES) | st.text(max_size=30)
    | st.builds(lambda line, at, noise: line[:at] + noise + line[at:],
                st.sampled_from(_METRIC_LINES), st.integers(0, 60),
                st.text(alphabet='{}"=\\ #,.0123456789eE+-naif:_', max_size=6)),
    max_size=10,
).map(lambda lines: "\n".join(lines) + "\n")


def check_metrics(text: str) -> None:
    try:
        samples = parse_metrics(text, "svc", 1.0)
    except ValueError:
        return  # poll_metrics counts it as a missed scrape
    for sample in samples:
        assert sample.name in KEPT_METRICS
        assert sample.value - sample.value == 0, f"non-finite sample kept: {sample}"


# -- log lines (experiments/collect.log_events: the wedge signs counted per trial)

_LOG_WORDS = ["WaitingForInput", "Aborted by AbortReq", "transfer", "KV transfer", "timed out",
              "time out", "timeout", "bootstrap timeout", "Traceback (most recent call last)",
              "ERROR", "ERRORS", "Allocating ", " host memory", "Load weight end",
              "fired up and ready to roll", " ", "\t", "\r", "ü", "｜"]
log_texts = st.lists(
    st.lists(st.sampled_from(_LOG_WORDS) | st.text(max_size=8), max_size=12).map("".join),
    max_size=8,
).map("\n".join)
# The patterns before they were made linear: the oracle on lines short enough for them.
_ORACLE = (
    ("wedge", re.compile(r"WaitingForInput")),
    ("abort", re.compile(r"Aborted by AbortReq")),
    ("transfer_timeout", re.compile(r"(?i)transfer.*time(d)?\s*out|bootstrap timeout")),
    ("error", re.compile(r"Traceback \(most recent call last\)|\bERROR\b")),
    ("startup", re.compile(
        r"Load weight end|KV Cache is allocated|max_total_num_tokens=|Allocating .* host memory"
        r"|Capture cuda graph end|fired up and ready to roll|bytes_per_token_per_layer=")),
)


def check_logs(text: str) -> None:
    lines = text.splitlines()
    events = log_events(text)
    expected = []
    for number, line in enumerate(lines, start=1):
        kind = next((kind for kind, pattern in _ORACLE if pattern.search(line)), None)
        if kind is not None:
            expected.append((number, kind, line[:MAX_EVENT_TEXT]))
    assert [(e.line_no, e.kind, e.text) for e in events] == expected


# -- `--help` output (deploy/preflight.help_flags)

_FLAG_SHAPE = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
flag_names = st.from_regex(r"--[A-Za-z0-9][A-Za-z0-9_-]{0,20}", fullmatch=True)


@st.composite
def help_texts(draw: st.DrawFn) -> tuple[str, list[str]]:
    """(a --help text, flags written in it as argparse does: after spaces, before , = or space)."""
    flags = draw(st.lists(flag_names, max_size=6))
    parts = [draw(st.text(max_size=20))]
    for flag in flags:
        parts += [" ", flag, draw(st.sampled_from([" ", ", ", "=VALUE ", " {a,b} ", "\n"])),
                  draw(st.text(max_size=20))]
    return "".join(parts), flags


def check_help(case: tuple[str, list[str]]) -> None:
    text, written = case
    found = help_flags(text)
    assert all(_FLAG_SHAPE.fullmatch(flag) for flag in found), found
    # A written flag is found unless noise glued more name characters to its end.
    for flag in written:
        assert any(name.startswith(flag) for name in found), (flag, text)


TARGETS = [
    Target("chat completion JSON", completion_bodies(), check_completion),
    Target("SSE stream", sse_streams(), check_sse),
    Target("saved response", st.text(max_size=200) | completion_bodies().map(
        lambda case: case[0].decode("utf-8", "replace")), check_saved),
    Target("Prometheus text", metrics_texts, check_metrics),
    Target("log lines", log_texts, check_logs),
    Target("--help output", help_texts(), check_help),
]
