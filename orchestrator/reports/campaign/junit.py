"""The JUnit XML report, as CI systems read it (Jenkins, GitLab, GitHub's test reporters).

One ``testsuite`` for the campaign, one ``testcase`` per variant: classname the campaign, name
the variant's levels (its canonical key: unique). A variant DIFFERENT from known-good is a
``failure`` carrying the answer, its counts and p-value; one the campaign could not decide is
``skipped``; known-good and the variants like it pass. The campaign's facts are ``properties``.

Built with ElementTree (``junit_xml``): every name and text is escaped.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

from orchestrator.core.trail import culprit_words
from orchestrator.reports.campaign.answers import (
    DIFFERENT,
    LIKE_GOOD,
    REFERENCE,
    variant_answers,
)
from orchestrator.reports.campaign.model import Report
from orchestrator.reports.files import clean
from orchestrator.reports.junit_xml import document
from orchestrator.reports.junit_xml import element as _element
from orchestrator.reports.renderer import Writes


def properties(report: Report) -> list[tuple[str, str]]:
    facts, head, cost = report.campaign, report.headline, report.cost
    pairs = [("campaign.id", facts.id), ("campaign.name", facts.name),
             ("campaign.status", facts.status), ("campaign.target", facts.target),
             ("campaign.strategy", facts.strategy),
             ("campaign.created_at", facts.created_at or ""),
             ("campaign.finished_at", facts.finished_at or ""),
             ("verdict.status", head.status), ("verdict.sentence", head.sentence),
             ("verdict.confidence", head.confidence), ("verdict.reason", head.reason),
             ("cost.trials", str(cost.trials)), ("cost.restarts", str(cost.restarts)),
             ("cost.sessions", str(cost.sessions)),
             ("cost.stopped_early", str(cost.stopped_early)),
             ("cost.gpu_s_equivalent", f"{cost.gpu_s_equivalent:g}"),
             ("cost.wall_s", f"{cost.wall_s:g}"),
             ("tool.version", report.provenance.tool_version),
             ("report.version", str(report.version))]
    # a numeric knob lists no levels (its range holds them)
    pairs += [(f"factor.{name}", ",".join(levels) or "numeric")
              for name, levels in facts.factors.items()]
    pairs += [(f"known_good.{f}", lvl) for f, lvl in facts.known_good.items()]
    pairs += [(f"known_bad.{f}", lvl) for f, lvl in facts.known_bad.items()]
    for index, culprit in enumerate(report.culprits, start=1):
        levels = culprit_words(culprit.levels)
        p = "-" if culprit.p_value is None else f"{culprit.p_value:.3g}"
        pairs.append((f"culprit.{index}",
                      f"{culprit.failure}: {levels} ({culprit.effect:+.1%}, p={p})"))
    return pairs


def render_junit(report: Report) -> str:
    """The JUnit XML document of ``report`` (UTF-8, with its declaration)."""
    facts = report.campaign
    wall: dict[str, float] = defaultdict(float)
    for trial in report.provenance.trials:
        wall[trial["variant"]] += trial["wall_s"] or 0.0
    answers = variant_answers(report)
    failures = sum(a.answer == DIFFERENT for a in answers)
    skipped = sum(a.answer not in (DIFFERENT, LIKE_GOOD, REFERENCE) for a in answers)
    root = ET.Element("testsuites", {"name": "bisect", "tests": str(len(answers)),
                                     "failures": str(failures), "errors": "0",
                                     "skipped": str(skipped),
                                     "time": f"{report.cost.wall_s:.3f}"})
    suite = _element(root, "testsuite", name=facts.name, tests=len(answers), failures=failures,
                     errors=0, skipped=skipped, time=f"{report.cost.wall_s:.3f}",
                     timestamp=(facts.created_at or "")[:19], id=facts.id)
    listed = _element(suite, "properties")
    for name, value in properties(report):
        _element(listed, "property", name=name, value=value)
    seen: set[str] = set()
    for a in answers:
        name = a.variant.key
        while name in seen:  # keys are unique; the guard keeps names so whatever a key holds
            name += "'"
        seen.add(name)
        case = _element(suite, "testcase", classname=facts.name, name=name,
                        time=f"{wall.get(a.variant.key, 0.0):.3f}")
        p = "–" if a.p_value is None else f"{a.p_value:.3g}"
        counted = (f"{a.failed} of {a.judged} judged sessions failing ({facts.target}), "
                   f"p = {p}")
        if a.answer == DIFFERENT:
            failure = _element(case, "failure", type="different-from-known-good",
                               message=f"{a.answer}: {counted}")
            at_least = "at least " if a.variant.lower_bound else ""
            failure.text = clean(f"answer: {a.said}\n{counted}\nrate {at_least}"
                                 f"{a.variant.rate:.2%} "
                                 f"(95% CI {a.variant.ci95[0]:.2%} … {a.variant.ci95[1]:.2%})"
                                 f" over {a.variant.trials} trial(s)")
        elif a.answer not in (LIKE_GOOD, REFERENCE):
            _element(case, "skipped", message=f"{a.answer}: {a.said}; {counted}")
        out = _element(case, "system-out")
        out.text = clean(f"{a.answer}: {a.said}; {counted}; role {a.variant.role or 'tested'}"
                         + ("; holds a culprit" if a.variant.culprit else ""))
    return document(root)


JUNIT = Writes("junit", ".xml", render_junit)
