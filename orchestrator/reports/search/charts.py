"""The Pareto chart of a two-objective search, as inline SVG: every measured configuration at
its mean of the first objective (x) and the second (y), the safe ones as circles, the
confirmed Pareto front filled and joined by a line, the answer ringed, the unsafe ones as
crosses and the unproven as small grey dots; each mark says its configuration on hover.

Written with ``charts``' SVG helpers: every value that reaches the markup goes through its
``_el``, which escapes attributes and text. Plain inputs: no store, no report model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup

from orchestrator.reports.charts import (
    CULPRIT,
    GRID,
    INK,
    LINES,
    MUTED,
    el,
    num,
    rule,
    svg,
    text_at,
)
from orchestrator.reports.search.model import Search
from orchestrator.reports.search.text import labelled

KINDS = ("unproven", "rejected", "safe", "front")  # drawn in this order: the front on top
SAFE, FRONT = LINES[0], "#17365f"


@dataclass(frozen=True)
class Axis:
    metric: str
    unit: str
    direction: str  # "maximize" | "minimize"

    @property
    def label(self) -> str:
        return f"{self.metric} ({self.unit})"


@dataclass(frozen=True)
class ParetoPoint:
    label: str  # the configuration's levels, as a reader names it
    x: float
    y: float
    kind: str  # one of KINDS
    best: bool = False  # the search's answer
    note: str = ""  # said on hover after the values (why it was rejected, its trials)


def span_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering low..high (a 1, 2 or 5 step), not from zero."""
    if not (math.isfinite(low) and math.isfinite(high)):
        low, high = 0.0, 1.0
    if high <= low:
        pad = abs(low) * 0.05 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step + 1e-9) * step
    return [first + i * step for i in range(math.ceil((high - first) / step - 1e-9) + 1)]


def _tick(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _mark(kind: str, x: float, y: float) -> Markup:
    if kind == "rejected":
        return Markup("").join(
            rule(x - 4.5, y - 4.5 * s, x + 4.5, y + 4.5 * s, CULPRIT, **{"stroke-width": "2"})
            for s in (1, -1))
    if kind == "unproven":
        return el("circle", {"cx": num(x), "cy": num(y), "r": "3", "fill": MUTED,
                              "fill-opacity": "0.55"})
    filled = kind == "front"
    return el("circle", {"cx": num(x), "cy": num(y), "r": "6" if filled else "5",
                          "fill": FRONT if filled else "#fff", "stroke": FRONT if filled else SAFE,
                          "stroke-width": "2"})


def pareto_chart(points: Sequence[ParetoPoint], x_axis: Axis, y_axis: Axis,
                 title: str | None = None) -> Markup:
    """The configurations on the plane of the two objectives; the front joined in x order."""
    title = title or f"{y_axis.metric} against {x_axis.metric}: the Pareto front of the safe " \
                     "configurations"
    left, top, plot_w, plot_h = 78.0, 16.0, 560.0, 320.0
    legend_x = left + plot_w + 24
    width, height = legend_x + 170, top + plot_h + 58
    shown = [p for p in points if math.isfinite(p.x) and math.isfinite(p.y)]
    xs = span_ticks(min((p.x for p in shown), default=0.0), max((p.x for p in shown), default=1.0))
    ys = span_ticks(min((p.y for p in shown), default=0.0), max((p.y for p in shown), default=1.0))
    fx: Callable[[float], float] = lambda v: left + plot_w * (v - xs[0]) / (xs[-1] - xs[0])  # noqa: E731
    fy: Callable[[float], float] = lambda v: top + plot_h * (1 - (v - ys[0]) / (ys[-1] - ys[0]))  # noqa: E731
    body: list[Markup] = []
    for value in xs:
        body.append(rule(fx(value), top, fx(value), top + plot_h, GRID, **{"class": "grid"}))
        body.append(text_at(fx(value), top + plot_h + 15, _tick(value), "middle", fill=MUTED))
    for value in ys:
        body.append(rule(left, fy(value), left + plot_w, fy(value), GRID, **{"class": "grid"}))
        body.append(text_at(left - 6, fy(value) + 4, _tick(value), "end", fill=MUTED))
    better_x = "better →" if x_axis.direction == "maximize" else "← better"
    better_y = "better ↑" if y_axis.direction == "maximize" else "better ↓"
    body.append(text_at(left + plot_w / 2, top + plot_h + 34, f"{x_axis.label}, {better_x}",
                      "middle", fill=MUTED, **{"class": "x-label"}))
    body.append(text_at(14, top + plot_h / 2, f"{y_axis.label}, {better_y}", "middle",
                      fill=MUTED, transform=f"rotate(-90 14 {num(top + plot_h / 2)})",
                      **{"class": "y-label"}))
    body.append(rule(left, top + plot_h, left + plot_w, top + plot_h, MUTED))
    body.append(rule(left, top, left, top + plot_h, MUTED))
    front = sorted((p for p in shown if p.kind == "front"), key=lambda p: p.x)
    if len(front) > 1:
        body.append(el("polyline", {
            "class": "front-line", "fill": "none", "stroke": FRONT, "stroke-width": "1.5",
            "stroke-dasharray": "5 3",
            "points": " ".join(f"{num(fx(p.x))},{num(fy(p.y))}" for p in front)}))
    for kind in KINDS:
        for p in (p for p in shown if p.kind == kind):
            x, y = fx(p.x), fy(p.y)
            said = (f"{p.label}: {x_axis.metric} {_tick(p.x)} {x_axis.unit}, {y_axis.metric} "
                    f"{_tick(p.y)} {y_axis.unit} ({kind}{', the best' if p.best else ''})"
                    + (f"; {p.note}" if p.note else ""))
            marks = [el("title", None, said), _mark(kind, x, y)]
            if p.best:
                marks.append(el("circle", {"class": "best-ring", "cx": num(x), "cy": num(y),
                                            "r": "11", "fill": "none", "stroke": INK,
                                            "stroke-width": "1.5"}))
                marks.append(text_at(x, y - 15, "best", "middle", **{"font-weight": "600"}))
            body.append(el("g", {"class": f"point {kind}" + (" best" if p.best else "")},
                            *marks))
    legend = (("front", "Pareto front (confirmed)"), ("safe", "safe"),
              ("rejected", "rejected (unsafe)"), ("unproven", "unproven"))
    for i, (kind, name) in enumerate(legend):
        y = top + 10 + 20 * i
        body.append(el("g", {"class": f"legend {kind}"}, _mark(kind, legend_x + 6, y),
                        text_at(legend_x + 18, y + 4, name)))
    return svg(width, height, title, *body, kind="pareto")


def pareto_figure(search: Search) -> Markup | None:
    """The chart of a two-objective search (None for one objective or none measured): every
    configuration with both objectives measured, kind by where the search ranked it."""
    if len(search.objectives) != 2:
        return None
    points = []
    front = {c.key for c in search.pareto}
    for kind, rows in (("unproven", search.unproven), ("rejected", search.rejected),
                       ("safe", search.ranked)):
        for row in rows:
            x, y = row.objectives[0].mean, row.objectives[1].mean
            if x is None or y is None:
                continue
            shown = "front" if kind == "safe" and row.key in front else kind
            note = "; ".join(row.why) if row.why else f"{row.trials} trials"
            points.append(ParetoPoint(labelled(row.levels), x, y, shown, row.best, note))
    if not points:
        return None
    measured = [*search.ranked, *search.rejected, *search.unproven][0]  # units, directions
    axes = [Axis(o.metric, o.unit, o.direction) for o in measured.objectives]
    return pareto_chart(points, axes[0], axes[1])
