"""Inline SVG charts of the sweep report: one metric over the sweep's runs, a line per variant,
the baseline run and the reported run marked, runs that measured nothing (skipped, missed)
marked on the axis; and each variant's change against the baseline with its interval and the
change SAME rules out (the threshold; 40% of it on a suspect's fresh trials).

Written with ``charts``' SVG helpers: every value that reaches the markup goes through its
``_el``, which escapes attributes and text (a variant name, a run's reason is always text). The
inputs are plain values: the charts know no store and no report model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup

from orchestrator.reports.charts import (
    CHAR_W,
    CULPRIT,
    DASHES,
    GOOD,
    GRID,
    INK,
    LINES,
    MUTED,
    clip,
    el,
    num,
    rule,
    svg,
    text_at,
    ticks,
)

MAX_PLOT_W = 880.0  # a long history is drawn denser, not wider


@dataclass(frozen=True)
class RunMark:
    """One run on the x axis."""
    seq: int
    status: str
    baseline: bool = False  # the run the reported run was compared with
    current: bool = False  # the reported run
    accepted: bool = False
    note: str = ""  # why it measured nothing (skipped, missed), shown on hover


@dataclass(frozen=True)
class Line:
    """One variant's value at each run (None: not measured there)."""
    label: str
    values: Sequence[float | None]
    regressed: bool = False  # a regression of this metric in the reported run


@dataclass(frozen=True)
class Change:
    """One variant's change of one metric against the baseline, its interval, and the
    sweep's smallest change that counts (all in the metric's own unit: rate points, or a
    relative change where worse is positive)."""
    label: str
    change: float
    interval: tuple[float, float]
    min_effect: float | None
    answer: str  # different | same | unknown
    regressed: bool = False


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def history_chart(title: str, runs: Sequence[RunMark], lines: Sequence[Line],
                  fmt: Callable[[float], str], kind: str, floor: float = 1.0) -> Markup:
    """``lines`` over ``runs`` (oldest first): a point a measured run, the line broken where a
    run measured nothing; the baseline run shaded, the reported run outlined. ``floor``: the
    scale's least top (all zeros still draw a scale)."""
    legend_chars = min(max((len(line.label) for line in lines), default=8), 28)
    top, plot_h = 30.0, 170.0
    plot_w = min(max(44.0 * len(runs), 240.0), MAX_PLOT_W)
    height = top + plot_h + 48
    step = plot_w / max(len(runs), 1)
    values = [v for line in lines for v in line.values if v is not None and _finite(v)]
    scale = ticks(max(values, default=0.0) or floor, 4)
    left = 14.0 + max(len(fmt(v)) for v in scale) * CHAR_W * 0.85  # the widest tick label
    legend_x = left + plot_w + 18
    width = legend_x + 40 + legend_chars * CHAR_W
    x = lambda i: left + step * (i + 0.5)  # noqa: E731
    y = lambda v: top + plot_h * (1 - min(max(v, 0.0), scale[-1]) / scale[-1])  # noqa: E731
    body: list[Markup] = []
    for value in scale:
        body.append(rule(left, y(value), left + plot_w, y(value), GRID, **{"class": "grid"}))
        body.append(text_at(left - 6, y(value) + 4, fmt(value), "end", fill=MUTED))
    every = max(1, math.ceil(34.0 / step))  # run labels that fit side by side
    radius = max(1.5, min(3.5, step / 3))  # a long history's points do not merge
    for i, run in enumerate(runs):
        said = f"run {run.seq}: {run.status}" + (" (accepted)" if run.accepted else "")
        if run.baseline:
            body.append(el("g", {"class": "baseline-run"},
                            el("title", None, f"{said}: the baseline of the reported run"),
                            el("rect", {"x": num(x(i) - step / 2), "y": num(top),
                                         "width": num(step), "height": num(plot_h),
                                         "fill": GOOD, "fill-opacity": "0.12"}),
                            text_at(x(i), top - 6, "baseline", "middle", fill=GOOD)))
        if run.current:
            body.append(el("g", {"class": "current-run"},
                            el("title", None, f"{said}: the reported run"),
                            el("rect", {"x": num(x(i) - step / 2 + 1), "y": num(top),
                                         "width": num(max(step - 2, 1.0)), "height": num(plot_h),
                                         "fill": "none", "stroke": INK,
                                         "stroke-dasharray": "3 3"}),
                            text_at(x(i), top - 18, "this run", "middle")))
        if i % every == 0 or run.baseline or run.current:
            body.append(text_at(x(i), top + plot_h + 15, str(run.seq), "middle", fill=MUTED))
        if run.note:  # measured nothing: a hollow mark on the axis, its reason on hover
            body.append(el("g", {"class": "unmeasured"},
                            el("title", None, f"{said}: {run.note}"),
                            el("circle", {"cx": num(x(i)), "cy": num(top + plot_h), "r": "4",
                                           "fill": "#fff", "stroke": MUTED})))
    body.append(text_at(left + plot_w / 2, top + plot_h + 34, "run", "middle", fill=MUTED))
    for j, line in enumerate(lines):
        colour = CULPRIT if line.regressed else LINES[j % len(LINES)]
        dash = DASHES[j % len(DASHES)] or None
        points = [(i, v) for i, v in enumerate(line.values) if v is not None and _finite(v)]
        segments: list[list[tuple[float, float]]] = []
        previous: int | None = None
        for i, v in points:
            if previous is None or runs_between(previous, i, runs):
                segments.append([])
            segments[-1].append((x(i), y(v)))
            previous = i
        marks: list[Markup] = [el("polyline", {
            "class": "line", "fill": "none", "stroke": colour, "stroke-width": "2",
            "stroke-dasharray": dash, "points": " ".join(f"{num(a)},{num(b)}" for a, b in part)})
            for part in segments if len(part) > 1]
        for i, v in points:
            run = runs[i]
            marks.append(el("circle", {"class": "point", "cx": num(x(i)), "cy": num(y(v)),
                                        "r": num(radius), "fill": colour},
                             el("title", None, f"{line.label}, run {run.seq}: {fmt(v)}")))
        legend_y = top + 4 + 18 * j
        marks.append(rule(legend_x, legend_y - 4, legend_x + 28, legend_y - 4, colour,
                           **{"stroke-width": "2", "stroke-dasharray": dash}))
        marks.append(text_at(legend_x + 34, legend_y, clip(line.label, legend_chars),
                           **({"font-weight": "600"} if line.regressed else {})))
        body.append(el("g", {"class": "variant" + (" regressed" if line.regressed else "")},
                        *marks))
    body.append(rule(left, top + plot_h, left + plot_w, top + plot_h, MUTED))
    return svg(width, height, title, *body, kind=f"history {kind}")


def runs_between(a: int, b: int, runs: Sequence[RunMark]) -> bool:
    """True if a run between positions ``a`` and ``b`` measured nothing: the line breaks
    there rather than drawing through a gap as if it had been measured."""
    return any(runs[k].note for k in range(a + 1, b))


def change_chart(title: str, rows: Sequence[Change], fmt: Callable[[float], str],
                 short: Callable[[float], str] | None = None) -> Markup:
    """Each variant's change with its interval, zero and the smallest change that counts
    (±min effect, shaded between): an interval wholly beyond it is a difference, one wholly
    inside it is the same. ``short``: the axis' labels (default ``fmt``)."""
    label_chars = min(max((len(r.label) for r in rows), default=8), 36)
    left, plot, row, top = 16 + label_chars * CHAR_W, 300.0, 24.0, 14.0
    spans = [abs(v) for r in rows for v in (*r.interval, r.change, r.min_effect or 0.0)
             if _finite(v)]
    reach = ticks(max(spans, default=0.0) or 0.05, 3)[-1]
    x = lambda v: left + plot * (min(max(v, -reach), reach) + reach) / (2 * reach)  # noqa: E731
    y_end = top + row * max(len(rows), 1)
    body: list[Markup] = []
    effects = {r.min_effect for r in rows if r.min_effect is not None and _finite(r.min_effect)}
    if len(effects) == 1:
        effect = effects.pop()
        body.append(el("rect", {"class": "same-band", "x": num(x(-effect)), "y": num(top),
                                 "width": num(x(effect) - x(-effect)), "height": num(y_end - top),
                                 "fill": GOOD, "fill-opacity": "0.10"}))
    for value in (-reach, -reach / 2, 0.0, reach / 2, reach):
        body.append(rule(x(value), top, x(value), y_end, GRID if value else MUTED,
                          **{"class": "grid"}))
        body.append(text_at(x(value), y_end + 14, (short or fmt)(value), "middle", fill=MUTED))
    body.append(text_at(left + plot / 2, y_end + 30, "worse →", "middle", fill=MUTED))
    for i, r in enumerate(rows):
        mid = top + i * row + row / 2
        colour = CULPRIT if r.regressed else (INK if r.answer == "different" else LINES[0])
        low, high = r.interval
        marks: list[Markup] = [
            el("title", None, f"{r.label}: {fmt(r.change)} (interval {fmt(low)} to "
                f"{fmt(high)}), {r.answer}"
                + (f"; the change SAME rules out {fmt(r.min_effect)}"
                   if r.min_effect is not None else "")),
            text_at(left - 8, mid + 4, clip(r.label, label_chars), "end",
                  **({"font-weight": "600"} if r.regressed else {}))]
        if _finite(low) and _finite(high):
            marks.append(rule(x(low), mid, x(high), mid, colour,
                               **{"class": "ci", "stroke-width": "2"}))
        if r.min_effect is not None and len({e.min_effect for e in rows}) > 1:
            marks.append(rule(x(r.min_effect), mid - 7, x(r.min_effect), mid + 7, GOOD,
                               **{"class": "min-effect", "stroke-width": "1.5"}))
        if _finite(r.change):
            marks.append(el("circle", {"class": "change", "cx": num(x(r.change)),
                                        "cy": num(mid), "r": "4", "fill": colour}))
        body.append(el("g", {"class": "comparison " + r.answer}, *marks))
    return svg(left + plot + 24, y_end + 38, title, *body, kind="changes")
