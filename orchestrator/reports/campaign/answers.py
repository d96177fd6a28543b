"""Each variant against known-good, three-way, as the Markdown and JUnit reports say it.

The strategy's own answer where its decision trail tested the variant (that is what the verdict
rests on); otherwise the same exact test the strategies make (``core.stats.compare.judge``) on
the variant's pooled counts, at the campaign's alpha.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from orchestrator.core.stats.compare import Answer, judge
from orchestrator.core.trail import culprit_words
from orchestrator.reports.campaign.model import Report, TrailRow, VariantRow

DIFFERENT, LIKE_GOOD, UNKNOWN, REFERENCE = "different", "like known-good", "unknown", "known-good"


@dataclass(frozen=True)
class VariantAnswer:
    variant: VariantRow
    answer: str  # DIFFERENT | LIKE_GOOD | UNKNOWN | REFERENCE (known-good itself)
    failed: int  # failing sessions (of the campaign's target) ...
    judged: int  # ... of those judged
    p_value: float | None  # p that it fails more than known-good; None: no test made
    said: str  # the answer in the trail's words, or the test's


def counts(variant: VariantRow) -> tuple[int, int]:
    """(failing, judged) sessions of a variant as the verdict judged them, for the campaign's
    target (``rate`` is of ``judged``; trials that were mostly errors and timeouts are not)."""
    return variant.failed, variant.judged


def _trail_answer(step: TrailRow) -> str | None:
    """A step's answer against known-good; None for a step that asked something else (a
    confirmation's "fails as known-bad?" answers "no less") or only restated a known answer."""
    said = step.answer.lower()
    if said.endswith("(known)"):
        return None
    if said == "fail (narrowing)":  # p <= 0.05: it only told delta debugging where to look
        return UNKNOWN
    if said.startswith("fail"):
        return DIFFERENT
    if said.startswith("pass") or said == "looks passing":
        return LIKE_GOOD
    if said.startswith("unknown"):
        return UNKNOWN
    return None


def variant_answers(report: Report) -> list[VariantAnswer]:
    """Every variant of the report, in its order, answered."""
    alpha = report.campaign.alpha
    last: dict[tuple[tuple[str, str], ...], TrailRow] = {}
    for row in report.trail:  # a later step on the same variant has more trials
        if _trail_answer(row) is not None:
            last[tuple(sorted(row.levels.items()))] = row
    good = next((v for v in report.variants if v.role == "known-good"), None)
    bad = next((v for v in report.variants if v.role == "known-bad"), None)
    answered = []
    for variant in report.variants:
        failed, judged = counts(variant)
        step: TrailRow | None = last.get(tuple(sorted(variant.levels.items())))
        if variant.role == "known-good":
            answered.append(VariantAnswer(variant, REFERENCE, failed, judged, None, "reference"))
        elif step is not None:
            answered.append(VariantAnswer(
                variant, _trail_answer(step) or UNKNOWN, failed, judged, step.p_fail,
                f"{step.answer} ({step.phase})"))
        elif good is not None and judged and counts(good)[1]:
            bad_counts = counts(bad) if bad is not None else (0, 0)
            j = judge((failed, judged), counts(good), bad_counts, alpha)
            answer = {Answer.FAIL: DIFFERENT, Answer.PASS: LIKE_GOOD}.get(j.answer, UNKNOWN)
            answered.append(VariantAnswer(variant, answer, failed, judged, j.p_fail,
                                          f"{j.answer.value} (exact test at alpha {alpha:g})"))
        elif good is None and judged:
            answered.append(_by_culprits(report, variant, failed, judged))
        else:
            answered.append(VariantAnswer(variant, UNKNOWN, failed, judged, None,
                                          "no sessions judged" if not judged
                                          else "no known-good sessions to compare with"))
    return [_other_failure(report, a) for a in answered]


def _other_failure(report: Report, answered: VariantAnswer) -> VariantAnswer:
    """A variant like known-good in the campaign's target may still fail otherwise: one that
    holds the verdict's culprit of the other failure (wedging, for a corruption campaign)
    differs all the same."""
    if answered.answer in (DIFFERENT, REFERENCE):
        return answered
    held = [c for c in report.culprits if c.failure != report.campaign.target
            and all(answered.variant.levels.get(f) == lvl for f, lvl in c.levels.items())]
    if not held:
        return answered
    c = held[0]
    levels = culprit_words(c.levels)
    return dataclasses.replace(
        answered, answer=DIFFERENT, p_value=c.p_value,
        said=f"holds the {c.failure} culprit {levels}: {c.failed_with} of {c.sessions_with} "
             f"sessions with it, {c.failed_without} of {c.sessions_without} without "
             f"({report.campaign.target}: {answered.said})")


def _by_culprits(report: Report, variant: VariantRow, failed: int,
                 judged: int) -> VariantAnswer:
    """Without a known-good variant (a factorial design), the verdict is the reference: a
    variant holding a culprit differs, the others do not, unless no verdict was reached."""
    held = [c for c in report.culprits
            if all(variant.levels.get(f) == lvl for f, lvl in c.levels.items())]
    if held:
        c = held[0]
        levels = culprit_words(c.levels)
        return VariantAnswer(variant, DIFFERENT, failed, judged, c.p_value,
                             f"holds the {c.failure} culprit {levels}: {c.failed_with} of "
                             f"{c.sessions_with} sessions with it, {c.failed_without} of "
                             f"{c.sessions_without} without (no known-good: judged by the "
                             "verdict)")
    if report.headline.status in ("culprit", "no_culprit"):
        return VariantAnswer(variant, LIKE_GOOD, failed, judged, None,
                             "holds no culprit (no known-good: judged by the verdict)")
    return VariantAnswer(variant, UNKNOWN, failed, judged, None,
                         f"no known-good, and the verdict is {report.headline.status}")
