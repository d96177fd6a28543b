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


# Any fragment of any family counts: a truncated or unterminated block is still a leak.
MARKUP_RE = re.compile(
    r"<｜tool▁(?:calls?▁(?:begin|end)|sep)｜>"
    r"|</?｜DSML｜(?:function_calls|tool_calls|invoke|parameter)"
    r"|</?tool_call>"
    r"|</think>"
)


def find_markup(text: str | None) -> str | None:
    """The first markup fragment in ``text``, or None when the text is clean."""
    if not text:
        return None
    match = MARKUP_RE.search(text)
    return match.group(0) if match else None
