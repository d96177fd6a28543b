"""The Markdown report, for a pull request or an issue: the verdict line first, the culprits,
the first few variants that differ from known-good, then every variant in a ``<details>``.

Everything shown came from a campaign file or a server: ``text`` (reports/text.py) escapes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.reports.campaign.answers import DIFFERENT, VariantAnswer, variant_answers
from orchestrator.reports.campaign.model import CulpritRow, Report, VariantRow
from orchestrator.reports.renderer import Writes
from orchestrator.reports.text import levels_text, table, text

SHOWN_DIFFERENT = 5  # variants that differ, above the fold
HEADLINES = {"culprit": "Culprit found", "no_culprit": "No culprit",
             "inconclusive": "Inconclusive", "not_reproduced": "Not reproduced"}


def _pct(rate: float | None) -> str:
    return "–" if rate is None else f"{rate:.1%}"


def _interval(ci: tuple[float, float], signed: bool = False) -> str:
    spec = "+.1%" if signed else ".1%"
    return f"{ci[0]:{spec}} … {ci[1]:{spec}}"


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.2g}"


def _number(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _culprit_rows(culprits: Sequence[CulpritRow]) -> list[list[str]]:
    return [[text(c.failure), levels_text(c.levels), text(c.kind),
             f"{c.failed_with}/{c.sessions_with} ({_pct(c.rate_with)})",
             f"{c.failed_without}/{c.sessions_without} ({_pct(c.rate_without)})",
             f"{c.effect:+.1%} ({_interval(c.ci95, signed=True)})", _p(c.p_value)]
            for c in culprits]


def _variant_name(variant: VariantRow) -> str:
    marks = [m for m in (variant.role, "culprit" if variant.culprit else "") if m]
    return levels_text(variant.levels) + (f" **{text(', '.join(marks))}**" if marks else "")


def _rate(variant: VariantRow) -> str:
    """``≥`` where every trial stopped early: a lower bound (model.VariantRow.lower_bound)."""
    return ("≥ " if variant.lower_bound else "") + _pct(variant.rate)


def _different_rows(answers: Sequence[VariantAnswer]) -> list[list[str]]:
    return [[_variant_name(a.variant), f"{a.failed}/{a.judged}",
             f"{_rate(a.variant)} ({_interval(a.variant.ci95)})", _p(a.p_value),
             text(a.said)] for a in answers]


def _full_rows(answers: Sequence[VariantAnswer]) -> list[list[str]]:
    rows = []
    for a in answers:
        v = a.variant
        outcomes = ", ".join(f"{text(o)} {n}" for o, n in sorted(v.outcomes.items()) if n)
        rows.append([_variant_name(v), str(v.sessions), str(v.corrupted), outcomes or "–",
                     f"{_rate(v)} ({_interval(v.ci95)})", str(v.trials), str(v.errors),
                     str(v.timeouts), str(v.wedge_events), _number(v.throughput, 1),
                     f"{_number(v.ttft_p50_ms)} / {_number(v.ttft_p99_ms)}",
                     f"{_number(v.itl_p50_ms)} / {_number(v.itl_p99_ms)}", text(a.answer)])
    return rows


def render_markdown(report: Report) -> str:
    """The Markdown summary of ``report``."""
    facts, head, cost = report.campaign, report.headline, report.cost
    lines = [f"**{HEADLINES.get(head.status, text(head.status))}:** {text(head.sentence, 1000)}",
             ""]
    if head.confidence:
        lines += [f"Confidence: {text(head.confidence, 1000)}", ""]
    lines.append(f"Campaign {text(facts.name)} ({text(facts.id, 80)}), "
                 f"{text(facts.status)}, {text(facts.strategy)} strategy, "
                 f"{text(report.aim)}: {cost.trials} trials, {cost.restarts} restarts, "
                 f"{cost.sessions:,} sessions, {cost.wall_s:,.0f} s of wall time, "
                 f"{cost.gpu_s_equivalent:,.0f} GPU-s equivalent.")
    if head.reason and head.reason != head.sentence:
        lines += ["", f"Reason: {text(head.reason, 1000)}"]
    if report.culprits:
        lines += ["", "### Culprits", ""]
        lines += table(["failure", "levels", "kind", "failed with#", "failed without#",
                        "effect (95% CI)#", "p#"], _culprit_rows(report.culprits))
    answers = variant_answers(report)
    different = [a for a in answers if a.answer == DIFFERENT]
    if different:
        shown = different[:SHOWN_DIFFERENT]
        more = f" (the first {len(shown)} of {len(different)})" if len(different) > len(shown) \
            else ""
        lines += ["", f"### Variants that differ from known-good{more}", ""]
        lines += table(["variant", "failed/judged#", "rate (95% CI)#",
                        "p#", "answer"], _different_rows(shown))
    lines += ["", f"<details><summary>All {len(answers)} variants</summary>", ""]
    lines += table(["variant", "sessions#", "corrupted#", "by outcome", "rate (95% CI)#",
                    "trials#", "errors#", "timeouts#", "wedge events#", "tokens/s#",
                    "TTFT p50 / p99 ms#", "ITL p50 / p99 ms#", "vs known-good"],
                   _full_rows(answers))
    lines += ["", "</details>", "",
              f"<sub>{text(report.provenance.tool_version, 60)}, report version "
              f"{report.version}</sub>", ""]
    return "\n".join(lines)


MARKDOWN = Writes("md", ".md", render_markdown)
