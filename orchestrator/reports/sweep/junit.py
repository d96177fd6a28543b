"""The sweep report in JUnit XML, for CI: a test case per variant and watched metric, failing
on a confirmed regression. Built with ElementTree (``junit_xml``): every name and text is
escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from orchestrator.reports.files import clean
from orchestrator.reports.junit_xml import document
from orchestrator.reports.junit_xml import element as _element
from orchestrator.reports.renderer import Writes
from orchestrator.reports.sweep.model import SweepReport
from orchestrator.reports.sweep.words import cells, change, value
from orchestrator.reports.text import p_text

UNKNOWN_STATES = ("inconclusive", "undeployable", "measuring", "confirming", "new")


def _properties(report: SweepReport) -> list[tuple[str, str]]:
    run, b, a = report.run, report.baseline, report.answer
    pairs = [("sweep", report.sweep), ("run", str(run.seq)), ("run.id", str(run.id)),
             ("run.status", run.status), ("run.trigger", run.trigger),
             ("run.started_at", run.started_at or ""), ("run.campaign", run.campaign_id or ""),
             ("baseline.run", str(b.seq) if b else ""), ("baseline.run_id", str(b.id) if b
                                                         else ""),
             ("baseline.accepted_at", (b.accepted_at or "") if b else ""),
             ("commit.baseline", report.commit_baseline.sha if report.commit_baseline else ""),
             ("commit.now", report.commit_now.sha if report.commit_now else ""),
             ("answer", a.title), ("answer.sentence", a.sentence),
             ("exit_code", "" if a.exit_code is None else str(a.exit_code)),
             ("tool.version", report.tool_version), ("report.version", str(report.version))]
    pairs += [(f"threshold.{m}", "" if t is None else f"{t:g}") for m, t in
              report.watched.items()]
    if (h := report.hunt) is not None:
        pairs += [("hunt.status", h.status), ("hunt.campaign", h.campaign_id or ""),
                  ("hunt.first_bad", ",".join(c.sha for c in h.first_bad))]
    return pairs


def render_sweep_junit(report: SweepReport) -> str:
    """One test case per variant and watched metric: a failure where a regression is
    confirmed, skipped where the run could not decide; a run that compared nothing (skipped,
    missed, failed early) is one test case of its own."""
    run = report.run
    root = ET.Element("testsuites", {"name": "bisect"})
    suite = _element(root, "testsuite", name=f"sweep {report.sweep}", id=str(run.id),
                     timestamp=(run.started_at or "")[:19])
    properties = _element(suite, "properties")
    for name, said in _properties(report):
        _element(properties, "property", name=name, value=said)
    failures = skipped = errors = tests = 0
    for v in report.variants:
        for m in v.metrics:
            if not m.watched:
                continue
            tests += 1
            c = cells(m)
            case = _element(suite, "testcase", classname=f"sweep {report.sweep}",
                            name=f"{v.name}: {m.metric}", time="0")
            detail = (f"{m.metric} of {v.name}: baseline {c['baseline']} -> now {c['now']}, "
                      f"change {c['change']} (interval {c['interval'] or '–'}), p = {c['p']}, "
                      f"answer {c['answer']}; confirmation {c['confirmation']}; min effect "
                      f"{c['min_effect']}; variant {v.state_text}")
            confirmed = m.confirmation or m.detection
            if m.regressed and confirmed is not None:
                failures += 1
                failure = _element(case, "failure", type="regression", message=(
                    f"{m.metric}: {value(m.metric, confirmed.baseline)} -> "
                    f"{value(m.metric, confirmed.current)} "
                    f"({change(m.metric, confirmed.change)}), p = "
                    f"{p_text(confirmed.p_worse)}, confirmed on {v.confirm_trials} fresh "
                    f"trial(s)"))
                failure.text = clean(detail)
            elif v.state in UNKNOWN_STATES or m.detection is None:
                skipped += 1
                _element(case, "skipped", message=f"{v.name} {v.state_text}: {c['answer']}")
            _element(case, "system-out").text = clean(detail)
    if tests == 0:
        tests = 1
        case = _element(suite, "testcase", classname=f"sweep {report.sweep}",
                        name=f"run {run.seq}", time="0")
        said = report.answer.sentence
        if run.status in ("failed", "interrupted"):
            errors = 1
            _element(case, "error", type=run.status, message=said)
        else:
            skipped = 1
            _element(case, "skipped", message=said)
    for element in (root, suite):
        element.attrib.update(tests=str(tests), failures=str(failures), errors=str(errors),
                              skipped=str(skipped), time="0")
    return document(root)


JUNIT = Writes("junit", ".xml", render_sweep_junit)
