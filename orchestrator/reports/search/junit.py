"""The JUnit XML report of a search (`bisect optimize`), as CI reads it.

A search's run fails only when it names no safe configuration: that is the one ``failure``
(the ``best safe configuration`` test case). Every configuration it measured is a test case of
its own: a safe one passes (its objectives and margins in ``system-out``); an unsafe one that
looked fast is the search working, not the run failing, so it is ``skipped`` with why it was
rejected (CI lists it, in yellow, without failing the build), as is one measured too little
to prove safe and one skipped (its trials failed before it was measured). The search's facts
are ``properties``.
Built with ElementTree (``junit_xml``): every name and text is escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

from orchestrator.reports.campaign.junit import properties
from orchestrator.reports.campaign.model import Report
from orchestrator.reports.files import clean
from orchestrator.reports.junit_xml import document
from orchestrator.reports.junit_xml import element as _element
from orchestrator.reports.renderer import Writes
from orchestrator.reports.search.model import Configuration, Search
from orchestrator.reports.search.text import (
    constraints_text,
    labelled,
    marks,
    number,
    objectives_text,
    versus_text,
)

BEST_CASE = "best safe configuration"


def _search_properties(search: Search) -> list[tuple[str, str]]:
    limits = search.limits
    pairs = [("optimize.objectives", ",".join(search.objectives)),
             ("optimize.sampler", search.sampler),
             ("optimize.limit.corruption", f"{limits.corruption:g}"),
             ("optimize.limit.wedging", f"{limits.wedging:g}"),
             ("optimize.alpha", f"{limits.alpha:g}"),
             ("optimize.trials.total", str(search.trials.total)),
             ("optimize.trials.search", str(search.trials.search)),
             ("optimize.trials.confirmation", str(search.trials.confirmation)),
             ("optimize.trials.final", str(search.trials.final)),
             ("optimize.trials.stopped_early", str(search.trials.stopped_early)),
             ("optimize.best", labelled(search.best) if search.best else "")]
    pairs += [(f"optimize.slo.{m}", f"{v:g}") for m, v in limits.slo.items()]
    best = search.winner
    if best is not None:
        pairs += [(f"optimize.best.{o.metric}", number(o.mean)) for o in best.objectives]
    if search.production:
        pairs.append(("optimize.production", labelled(search.production)))
    versus = search.versus_production
    if versus is not None:
        first = versus.first
        pairs += [("optimize.versus_production.shown_better", str(versus.shown_better).lower()),
                  ("optimize.versus_production.is_production",
                   str(versus.is_production).lower()),
                  ("optimize.versus_production.with", labelled(versus.production or {})),
                  ("optimize.versus_production.p_value",
                   "" if first is None or first.p_value is None else f"{first.p_value:.4g}"),
                  ("optimize.versus_production.difference",
                   "" if first is None else number(first.difference)),
                  ("optimize.versus_production.said", versus_text(versus, search.limits.alpha))]
    return pairs


def _said(row: Configuration, alpha: float) -> str:
    shown = ", ".join(marks(row))
    return (f"{labelled(row.levels)}{f' ({shown})' if shown else ''}: "
            f"{objectives_text(row, alpha)}; {constraints_text(row)}; {row.trials} "
            f"trial{'s' * (row.trials != 1)}"
            + (f", {row.stopped_early} stopped early" if row.stopped_early else ""))


def _unique(name: str, seen: set[str]) -> str:
    """Keys are unique; the guard keeps names unique whatever a key holds."""
    while name in seen:
        name += "'"
    seen.add(name)
    return name


def render_optimize_junit(report: Report) -> str:
    """The JUnit XML document of a search's report (UTF-8, with its declaration)."""
    search = report.optimize
    if search is None:
        raise ValueError("not a search's report: campaign.junit renders it")
    facts, alpha = report.campaign, search.limits.alpha
    rows = [("safe", c) for c in search.ranked] + [("rejected", c) for c in search.rejected] \
        + [("unproven", c) for c in search.unproven]
    tests = 1 + len(rows) + len(search.undeployable)
    failures = int(search.winner is None)
    skipped = tests - 1 - len(search.ranked)
    time = f"{report.cost.wall_s:.3f}"
    root = ET.Element("testsuites", {"name": "bisect", "tests": str(tests),
                                     "failures": str(failures), "errors": "0",
                                     "skipped": str(skipped), "time": time})
    suite = _element(root, "testsuite", name=facts.name, tests=tests, failures=failures,
                     errors=0, skipped=skipped, time=time,
                     timestamp=(facts.created_at or "")[:19], id=facts.id)
    listed = _element(suite, "properties")
    for name, value in [*properties(report), *_search_properties(search)]:
        _element(listed, "property", name=name, value=value)
    best = _element(suite, "testcase", classname=facts.name, name=BEST_CASE, time=time)
    if search.winner is None:
        failure = _element(best, "failure", type="no-safe-configuration",
                           message=report.headline.sentence)
        failure.text = clean(f"{report.headline.sentence}\n{report.headline.confidence}")
    else:
        out = _element(best, "system-out")
        out.text = clean(f"{report.headline.sentence}\n{report.headline.confidence}")
    seen: set[str] = {BEST_CASE}
    wall: dict[str, float] = defaultdict(float)
    for trial in report.provenance.trials:
        wall[trial["variant"]] += trial["wall_s"] or 0.0
    for kind, row in rows:
        case = _element(suite, "testcase", classname=facts.name,
                        name=_unique(f"{kind}: {row.key}", seen),
                        time=f"{wall.get(row.key, 0.0):.3f}")
        if kind == "rejected":
            _element(case, "skipped", message="rejected as unsafe: " + "; ".join(row.why))
        elif kind == "unproven":
            _element(case, "skipped", message="not proven safe (measured too little): "
                                              + "; ".join(row.why))
        out = _element(case, "system-out")
        out.text = clean(_said(row, alpha))
    for u in search.undeployable:
        case = _element(suite, "testcase", classname=facts.name,
                        name=_unique(f"undeployable: {labelled(u.levels)}", seen),
                        time="0.000")
        _element(case, "skipped", message=f"skipped after {u.attempts} failed attempts: "
                                          f"{u.why or u.error.splitlines()[0]}")
        out = _element(case, "system-out")
        out.text = clean(u.error)
    return document(root)


JUNIT = Writes("junit", ".xml", render_optimize_junit)
