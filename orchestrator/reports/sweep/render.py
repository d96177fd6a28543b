"""The sweep report in every format, from the one model (``sweep_model.SweepReport``): a
self-contained HTML page (``templates/sweep.html.j2`` in ``page.html.j2``'s frame, inline SVG
charts, the campaign report's sorting script), Markdown for a pull request or an issue, JUnit
XML for CI (a test case per variant and watched metric, failing on a confirmed regression),
JSON (the model).

The numbers are put into words once (``cells``); each format escapes them its own way: Jinja's
autoescape, ``markdown.text``, ElementTree. Whatever came from a server, a file or git (a
reason, a node fact, a commit's subject) is text in every one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from functools import partial
from typing import Any

from markupsafe import Markup

from orchestrator.core.strategies.sweep_judged import BINARY, METRICS
from orchestrator.reports import sweep_charts as charts
from orchestrator.reports.build import p_text
from orchestrator.reports.files import clean
from orchestrator.reports.html import SCRIPT_HASH, SORT_SCRIPT, _environment
from orchestrator.reports.html import when as html_when
from orchestrator.reports.markdown import table, text
from orchestrator.reports.sweep_model import (
    Commit,
    Comparison,
    FactChange,
    Measured,
    MetricRow,
    SweepReport,
)

FORMATS = ("html", "md", "junit", "json")
WHAT = {"corruption": "corruption rate", "wedging": "wedging rate (errors and timeouts)",
        "throughput": "output throughput", "p99_latency": "p99 end-to-end latency"}
UNKNOWN_STATES = ("inconclusive", "undeployable", "measuring", "confirming", "new")
CSS = {"clean": "good", "regression": "bad"}  # every other status: "warn"
SORTED = ("sort_corruption", "sort_wedging", "sort_throughput", "sort_p99_latency")
MAX_MD_HISTORY = 30  # runs in the Markdown's history table: a comment stays readable


# --- the numbers in words --------------------------------------------------------------------


def value(metric: str, v: float | None) -> str:
    if v is None:
        return "–"
    if metric in BINARY:
        return "0%" if v == 0 else f"{v * 100:.3g}%"
    return f"{v:,.0f} tok/s" if metric == "throughput" else f"{v:,.0f} ms"


def change(metric: str, c: float | None) -> str:
    """A binary metric's change in rate points; a continuous one's relative, worse positive."""
    if c is None:
        return "–"
    if metric in BINARY:
        return f"{c * 100:+.1f} pts"
    if c == 0:
        return "no change"
    return f"{abs(c):.1%} {'worse' if c > 0 else 'better'}"


def interval(metric: str, ci: tuple[float | None, float | None] | None,
             alpha: float | None = None) -> str:
    """The change's interval, two-sided at 1 - 2 alpha (its level said where alpha is known)."""
    if ci is None:
        return ""
    if ci[0] is None or ci[1] is None:
        return "unbounded"
    level = f"{1 - 2 * alpha:.0%}: " if alpha is not None else ""
    if metric in BINARY:
        return f"{level}{ci[0] * 100:+.1f} … {ci[1] * 100:+.1f}"
    return f"{level}{ci[0]:+.0%} … {ci[1]:+.0%}"


def effect(metric: str, e: float | None) -> str:
    if e is None:
        return "–"
    return f"{e * 100:.3g} pts" if metric in BINARY else f"{e:.0%}"


def sides(metric: str, c: Comparison | None) -> str:
    """What each side's figure rests on: session counts, or the number of trials."""
    if c is None:
        return ""
    if c.counts_now and c.counts_baseline:
        return (f"{c.counts_baseline[0]}/{c.counts_baseline[1]} → "
                f"{c.counts_now[0]}/{c.counts_now[1]} sessions")
    if c.values_now or c.values_baseline:
        return f"{len(c.values_baseline)} → {len(c.values_now)} trials"
    return ""


def cells(row: MetricRow) -> dict[str, str]:
    """One variant's metric in words, for every format."""
    d, c = row.detection, row.confirmation
    metric = row.metric
    confirmed = "–"
    if c is not None:
        confirmed = f"{c.answer}: {change(metric, c.change)} (p = {p_text(c.p_worse)})"
    elif row.suspected:
        confirmed = "confirming"
    return {
        "metric": metric, "what": WHAT.get(metric, metric),
        "baseline": value(metric, d.baseline if d else None),
        "now": value(metric, d.current if d else row.now),
        "change": change(metric, d.change) if d else "–",
        "interval": interval(metric, d.interval, d.alpha) if d else "",
        "p": p_text(d.p_worse) if d else "–",
        "answer": d.answer if d else ("not watched" if not row.watched else "not compared"),
        "confirmation": confirmed,
        "min_effect": effect(metric, d.min_effect if d else None),
        "sides": sides(metric, d),
    }


def when(value: str | None) -> str:
    return html_when(value, seconds=False)


def shown_facts(report: SweepReport) -> list[FactChange]:
    """The changed node facts but a node's commit where it is the source tree's, said once
    as the commits."""
    shas = {c.sha for c in (report.commit_baseline, report.commit_now) if c is not None}
    return [f for f in report.changed_facts
            if not (f.fact == "commit" and {f.baseline, f.now} <= shas | {None})]


def commit_text(c: Commit | None) -> str:
    if c is None:
        return "–"
    said = c.sha[:12]
    if c.subject:
        said += f" '{c.subject}'"
    return said + (f" ({c.author})" if c.author else "")


def variant_names(report: SweepReport) -> list[str]:
    """The variants in the report's order; a run that compared none (skipped): as the history
    first measured them (production first, as every run runs it first)."""
    return [v.name for v in report.variants] or list(
        dict.fromkeys(n for h in report.history for n in h.variants))


def history_rows(report: SweepReport) -> list[dict[str, str]]:
    """A row per run and variant (a run that measured nothing: one row, with its reason)."""
    names = variant_names(report)
    rows = []
    for h in report.history:
        marks = ", ".join(m for m, on in (("baseline", h.baseline), ("this run", h.current),
                                          ("accepted", h.run.accepted)) if on)
        base = {"seq": str(h.run.seq), "status": h.run.status, "started": h.run.started_at or "",
                "marks": marks}
        shown = [n for n in names if n in h.variants] + sorted(set(h.variants) - set(names))
        if not shown:
            rows.append({**base, "variant": "–", "trials": "0", "corruption": "–",
                         "wedging": "–", "throughput": "–", "p99_latency": "–",
                         "note": h.note, **dict.fromkeys(SORTED, "")})
        for name in shown:
            m: Measured = h.variants[name]
            rows.append({**base, "variant": name, "trials": str(m.trials),
                         "corruption": value("corruption", m.corruption),
                         "wedging": value("wedging", m.wedging),
                         "throughput": value("throughput", m.throughput),
                         "p99_latency": value("p99_latency", m.p99_ms), "note": "",
                         **{f"sort_{k}": "" if raw is None else repr(float(raw)) for k, raw in (
                             ("corruption", m.corruption), ("wedging", m.wedging),
                             ("throughput", m.throughput), ("p99_latency", m.p99_ms))}})
    return rows


# --- HTML ------------------------------------------------------------------------------------

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 90rem; padding: 0 1rem; color: #1d1d1f; line-height: 1.4; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; overflow-wrap: anywhere; }
h2 { font-size: 1.2rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
.meta, .note { color: #666; } .meta { margin-top: 0; }
#answer { border-left: .35rem solid #b7791f; padding: .6rem 1rem; background: #fdf8e6;
          border-radius: .3rem; }
#answer.good { border-color: #1e7b4f; background: #eef8f2; }
#answer.bad { border-color: #c0392b; background: #fdf2f1; }
#sentence { font-size: 1.15rem; font-weight: 600; margin: .3rem 0; overflow-wrap: anywhere; }
.status { display: inline-block; padding: .1rem .6rem; border-radius: .4rem; font-weight: 600;
          background: #fdf6b2; color: #723b13; }
.status.good { background: #def7ec; color: #03543f; }
.status.bad { background: #fde2e1; color: #9b1c1c; }
table { border-collapse: collapse; margin: .6rem 0 1.4rem; font-size: .88rem; }
th, td { border-bottom: 1px solid #e5e5e5; padding: .3rem .55rem; text-align: left;
         vertical-align: top; }
table.wide { width: 100%; } td.num { white-space: nowrap; } th { white-space: nowrap; }
td.text { overflow-wrap: anywhere; min-width: 12rem; }
th { background: #f4f4f4; } td.num, th.num { text-align: right;
                                             font-variant-numeric: tabular-nums; }
tr.regressed td { background: #fff1f0; } tr.regressed td:first-child {
  box-shadow: inset .25rem 0 #c0392b; }
.different { color: #9b1c1c; font-weight: 600; } .same { color: #03543f; }
.unknown { color: #723b13; } .ci { color: #666; font-size: .92em; }
tr.unmeasured td { color: #777; font-style: italic; }
code { background: #f3f3f3; padding: 0 .25rem; border-radius: .2rem; overflow-wrap: anywhere; }
figure { margin: 1rem 0 1.6rem; } figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: .85rem; font-weight: 600; margin-bottom: .3rem; }
.chart-row { display: flex; flex-wrap: wrap; gap: 0 2rem; align-items: flex-start; }
.chart-row figure { display: table; } td.when { white-space: nowrap; }
.chart-row figcaption { display: table-caption; caption-side: top; }
.scroll { overflow-x: auto; }
th button { font: inherit; font-weight: 600; color: inherit; background: none; border: 0;
            padding: 0; cursor: pointer; text-align: inherit; }
th button:focus-visible { outline: 2px solid #1f5fa8; outline-offset: 2px; }
th button::after { content: "\\00a0↕"; color: #aaa; }
th[aria-sort="ascending"] button::after { content: "\\00a0▲"; color: #1d1d1f; }
th[aria-sort="descending"] button::after { content: "\\00a0▼"; color: #1d1d1f; }
"""
STYLE_HASH = "sha256-" + base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
# As the campaign report: nothing fetched, framed, connected; only our script by its hash, our
# style by its hash (an injected one has another).
CSP = (f"default-src 'none'; script-src '{SCRIPT_HASH}'; style-src '{STYLE_HASH}'; "
       "base-uri 'none'; form-action 'none'")


def hunt_file_name(campaign_id: str) -> str:
    """The hunt's own report beside the sweep's: ``hunt-ID.html``, the id with anything but
    letters, digits, ``.``, ``-`` and ``_`` replaced (an id is a store's value, not a path)."""
    return "hunt-" + re.sub(r"[^A-Za-z0-9._-]", "_", campaign_id) + ".html"


def _history_charts(report: SweepReport) -> list[tuple[str, Markup]]:
    runs = [charts.RunMark(seq=h.run.seq, status=h.run.status, baseline=h.baseline,
                           current=h.current, accepted=h.run.accepted,
                           note="" if h.variants else (h.note or h.run.status))
            for h in report.history]
    names = variant_names(report)
    regressed = {(v.name, m.metric) for v in report.variants for m in v.metrics if m.regressed}
    made = []
    for metric in METRICS:
        lines = [charts.Line(name, [h.variants[name].of(metric) if name in h.variants else None
                                    for h in report.history], (name, metric) in regressed)
                 for name in names]
        title = f"{WHAT[metric].capitalize()} over the sweep's runs"
        made.append((title, charts.history_chart(
            title, runs, lines, partial(value, metric), metric,
            0.05 if metric in BINARY else 1.0)))
    return made


def axis(metric: str, c: float) -> str:
    """A change on a chart's axis: short (rate points, or a signed share)."""
    return f"{c * 100:+.3g}" if metric in BINARY else f"{c:+.0%}"


def _change_charts(report: SweepReport) -> list[tuple[str, Markup]]:
    made = []
    for metric in METRICS:
        rows = [charts.Change(v.name, d.change, (low, high), d.min_effect, d.answer,
                              m.regressed)
                for v in report.variants for m in v.metrics if m.metric == metric
                and (d := m.detection) is not None and d.change is not None
                and d.interval is not None and (low := d.interval[0]) is not None
                and (high := d.interval[1]) is not None]
        if rows:
            title = f"Change of the {WHAT[metric]} against the baseline" + (
                " (rate points)" if metric in BINARY else " (worse is positive)")
            made.append((title, charts.change_chart(title, rows, partial(change, metric),
                                                    partial(axis, metric))))
    return made


def render_sweep_html(report: SweepReport, hunt_links: Mapping[str, str] | None = None) -> str:
    """The page; ``hunt_links``: the hunt campaign's report file, by campaign id, where one
    was written beside this page."""
    environment = _environment()
    environment.filters.update(commit=commit_text)
    page = environment.get_template("sweep.html.j2").render(
        r=report, csp=CSP, style=Markup(STYLE), script=Markup(SORT_SCRIPT),
        title=f"bisect sweep {report.sweep} — run {report.run.seq}",
        css=CSS.get(report.answer.status, "warn"),
        rows=[(v, m, cells(m), len(v.metrics) if i == 0 else 0)
              for v in report.variants for i, m in enumerate(v.metrics)],
        history=history_rows(report), history_charts=_history_charts(report),
        change_charts=_change_charts(report), hunt_links=dict(hunt_links or {}),
        facts=shown_facts(report), what=WHAT, fmt_value=value, fmt_change=change,
        fmt_interval=interval)
    return clean(page)


# --- Markdown --------------------------------------------------------------------------------


def render_sweep_markdown(report: SweepReport) -> str:
    a, run = report.answer, report.run
    lines = [f"**{text(a.title)}:** {text(a.sentence.removeprefix(a.title + ': '), 1000)}", "",
             f"{text(a.exit_meaning)}. Sweep {text(report.sweep)}, run {run.seq} "
             f"({text(run.trigger)}, started {when(run.started_at)}"
             + (f", campaign {text(run.campaign_id)}" if run.campaign_id else "") + ")."]
    b = report.baseline
    lines += ["", f"Baseline: run {b.seq}, started {when(b.started_at)}, accepted "
                  f"{when(b.accepted_at)}." if b else "Baseline: none yet."]
    lines += [f"\nNote: {text(note, 1000)}" for note in report.notes]
    if report.variants:
        lines += ["", "### Variants against the baseline", ""]
        lines += table(
            ["variant", "state", "metric", "baseline#", "now#", "change (interval)#", "p#",
             "answer", "confirmation", "min effect#"],
            [[text(v.name) + (" **regressed**" if m.regressed else ""), text(v.state_text),
              text(c["metric"]), text(c["baseline"]), text(c["now"]),
              text(f"{c['change']} ({c['interval']})" if c["interval"] else c["change"]),
              text(c["p"]), text(c["answer"]), text(c["confirmation"]), text(c["min_effect"])]
             for v in report.variants for m in v.metrics for c in [cells(m)]])
    changed = [["source tree commit", text(commit_text(report.commit_baseline)),
                text(commit_text(report.commit_now))]] \
        if report.commit_baseline != report.commit_now else []
    changed += [[f"{text(f.node)}: {text(f.fact)}", text(f.baseline or "–"),
                 text(f.now or "–")] for f in shown_facts(report)]
    changed += [[f"variant {text(c.variant)}", text(_levels(c.baseline)), text(_levels(c.now))]
                for c in report.changed_variants]
    changed += [[text(c.what), text(c.baseline or "–"), text(c.now or "–")]
                for c in report.changed_settings]
    if report.baseline is not None:
        lines += ["", "### What changed since the baseline", ""]
        lines += table(["what", "baseline", "now"], changed) if changed else \
            ["Nothing: the same commit, node facts, variants and settings."]
    if (h := report.hunt) is not None:
        lines += ["", "### Hunt", ""]
        if h.first_bad:
            lines.append("First bad commit: " + "; ".join(text(commit_text(c))
                                                          for c in h.first_bad)
                         + (f" (posterior {h.posterior:.3f})" if h.posterior is not None
                            else ""))
        lines.append(f"{text(h.status)}: {text(h.reason, 1000)}"
                     + (f" (campaign {text(h.campaign_id)}: its own report is "
                        f"`bisect report {text(h.campaign_id)}`)" if h.campaign_id else ""))
    if report.trail:
        lines += ["", f"<details><summary>Decision trail ({len(report.trail)} "
                      "comparisons)</summary>", ""]
        lines += table(["##", "step", "variant", "metric", "trials#", "baseline#", "now#",
                        "change (interval)#", "p worse#", "p same#", "answer"],
                       [[str(i), text(t.phase), text(t.variant), text(t.metric),
                         str(t.trials if t.trials is not None else "–"),
                         text(value(t.metric, t.comparison.baseline)),
                         text(value(t.metric, t.comparison.current)),
                         text(f"{change(t.metric, t.comparison.change)} ("
                              f"{interval(t.metric, t.comparison.interval, t.comparison.alpha)})"),
                         text(p_text(t.comparison.p_worse)), text(p_text(t.comparison.p_same)),
                         text(t.comparison.answer)]
                        for i, t in enumerate(report.trail, start=1)])
        lines += ["", "</details>"]
    history = history_rows(report)
    runs = sorted({r["seq"] for r in history}, key=int)[-MAX_MD_HISTORY:]
    lines += ["", f"<details><summary>History ({len(report.history)} runs"
                  + (f", the last {len(runs)} shown" if len(runs) < len(report.history) else "")
                  + (f"; {report.omitted_runs} more left out" if report.omitted_runs else "")
                  + ")</summary>", ""]
    lines += table(["run#", "status", "marks", "variant", "trials#", "corruption#", "wedging#",
                    "tokens/s#", "p99#", "note"],
                   [[r["seq"], text(r["status"]), text(r["marks"]), text(r["variant"]),
                     r["trials"], text(r["corruption"]), text(r["wedging"]),
                     text(r["throughput"]), text(r["p99_latency"]), text(r["note"] or "")]
                    for r in history if r["seq"] in runs])
    lines += ["", "</details>", "", f"<sub>{text(report.tool_version, 60)}, sweep report "
                                     f"version {report.version}</sub>", ""]
    return "\n".join(lines)


def _levels(levels: Mapping[str, str] | None) -> str:
    return "–" if levels is None else ", ".join(f"{f}={lvl}" for f, lvl in levels.items())


# --- JUnit XML -------------------------------------------------------------------------------


def _element(parent: ET.Element, tag: str, **attributes: object) -> ET.Element:
    return ET.SubElement(parent, tag, {k: clean(str(v)) for k, v in attributes.items()})


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
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# --- all of them -----------------------------------------------------------------------------


def render_sweep_json(report: SweepReport) -> str:
    return json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n"


def render_sweep(report: SweepReport, fmt: str, hunt_links: Mapping[str, str] | None = None,
                 ) -> str:
    """``report`` in ``fmt`` (html, md, junit, json)."""
    if fmt == "html":
        return render_sweep_html(report, hunt_links)
    renderers: dict[str, Any] = {"md": render_sweep_markdown, "junit": render_sweep_junit,
                                 "json": render_sweep_json}
    if fmt not in renderers:
        raise ValueError(f"unknown report format {fmt!r}: {', '.join(FORMATS)}")
    return str(renderers[fmt](report))
