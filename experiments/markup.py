"""Tool-call markup of the DeepSeek families: rendering (the twin leaks it) and detection.

Formats as in ../shared/FACTS.md: V3/V3.1 special tokens, V3.2 DSML ``function_calls``, V4 DSML
``tool_calls``, plus the generic ``<tool_call>`` tag and a stray ``</think>``.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Any


class MarkupFamily(StrEnum):
    V31 = "v31"
    DSML = "dsml"  # V3.2
    V4 = "v4"


def _dsml_params(arguments: dict[str, Any]) -> str:
    parts = []
    for key, value in arguments.items():
        # string="true": the raw text; string="false": a JSON value.
        is_text = isinstance(value, str)
        text = value if is_text else json.dumps(value)
        flag = "true" if is_text else "false"
        parts.append(f'<｜DSML｜parameter name="{key}" string="{flag}">{text}</｜DSML｜parameter>')
    return "".join(parts)


def render(family: MarkupFamily, name: str, arguments: dict[str, Any]) -> str:
    """The raw text a model emits for one tool call in ``family``."""
    if family is MarkupFamily.V31:
        return (
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
            f"{name}<｜tool▁sep｜>{json.dumps(arguments)}"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        )
    invoke = f'<｜DSML｜invoke name="{name}">{_dsml_params(arguments)}</｜DSML｜invoke>'
    wrapper = "function_calls" if family is MarkupFamily.DSML else "tool_calls"
    return f"<｜DSML｜{wrapper}>{invoke}</｜DSML｜{wrapper}>"


# Any fragment of any family counts: a truncated or unterminated block is still a leak. One named
# group per family, so the same scan says which family leaked (experiments/workload/triage.py).
# The families are strings, not MarkupFamily: MarkupFamily is what the twin renders (and is part
# of the fault-model schema); detection also knows shapes the twin never emits.
_FAMILY_PATTERNS = {
    # V3/V3.1 special tokens, any of them, or one cut short at the end of a stream.
    "v31": r"<｜tool▁(?:calls?▁(?:begin|end)|sep)｜>|<?｜tool▁calls?▁",
    # V4 DSML wraps the invokes in tool_calls.
    "v4": r"</?｜DSML｜tool_calls",
    # V4.1 DSML: a space after the marker (SGLang's DeepSeekV41Detector: " calls", " invoke").
    "v41": r"</?｜DSML｜ (?:calls|invoke|parameter)",
    # V3.2 DSML, a bare invoke/parameter, or any other DSML fragment (a cut or unknown tag);
    # also the plain V3.2 variant without the ｜DSML｜ marker, which sglang 0.5.23 does not parse.
    "dsml": r"｜DSML｜"
    r"|</?function_calls>|<invoke\s+name=\"|</invoke>|<parameter\s+name=\"[^\"]*\"\s+string=",
    # The generic (Hermes/Qwen) tag.
    "tool_call": r"</?tool_call>",
    # A reasoning block closed inside content: the reasoning parser did not split it off.
    "think": r"</think>",
}
MARKUP_RE = re.compile("|".join(f"(?P<{name}>{rx})" for name, rx in _FAMILY_PATTERNS.items()))
# Tool-call markup outranks a stray </think>: "reasoning</think><tool markup>" is a tool leak.
_TOOL_FAMILIES = tuple(name for name in _FAMILY_PATTERNS if name != "think")


def find_markup(text: str | None) -> str | None:
    """The first markup fragment in ``text``, or None when the text is clean."""
    if not text:
        return None
    match = MARKUP_RE.search(text)
    return match.group(0) if match else None


def markup_family(text: str | None) -> str | None:
    """The family of the first tool-call fragment in ``text`` ("think" when the only markup is a
    stray ``</think>``), or None when the text is clean."""
    if not text:
        return None
    think = False
    for match in MARKUP_RE.finditer(text):
        family = match.lastgroup
        if family in _TOOL_FAMILIES:
            return family
        think = True
    return "think" if think else None
