"""Inline SVG charts of the HTML report, written by the project (no plotting bundle in the file).

Every value that reaches the markup goes through ``_el``, which escapes attribute values and text
with markupsafe: a factor, level or log line is always text, never markup. The inputs are plain
values (the renderer maps the report model onto them), so the charts know no store and no model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from orchestrator.reports.files import clean
from orchestrator.reports.text import share

FONT = "system-ui, -apple-system, 'Segoe UI', sans-serif"
INK, GRID, MUTED = "#1d1d1f", "#e5e5e5", "#6b6b6b"
BAR, CULPRIT, GOOD = "#5b7fb5", "#c0392b", "#1e7b4f"
LINES = ("#1f5fa8", "#d1711b", "#2e8b57", "#8e44ad", "#b03a2e", "#4d4d4d")  # by line level
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2", "10 4")  # apart from colour, for colour blindness
CHAR_W = 7.6  # a generous glyph at 12 px (bold): sizes label columns without measuring text
MAX_POINTS = 300  # per series: a long trial keeps its peaks, not every sample


# --- the plain inputs ---------------------------------------------------------------------------

@dataclass(frozen=True)
class RateBar:
    """One variant's corruption rate with its 95% interval, and the counts it is of."""
    label: str
    rate: float
    ci95: tuple[float, float]
    corrupted: int  # sessions failing ...
    sessions: int  # ... of the sessions judged: rate = corrupted / sessions
    role: str = ""  # "known-good" | "known-bad" | ""
    culprit: bool = False
    lower_bound: bool = False  # every trial stopped early: the rate is at least this
    stopped_early: int = 0  # its trials stopped early


@dataclass(frozen=True)
class Point:
    """The rate of one cell of a two-factor interaction."""
    row_level: str
    line_level: str
    rate: float
    ci95: tuple[float, float]
    sessions: int  # judged
    failed: int | None = None  # of them, failing (None: not known, a report of before)


@dataclass(frozen=True)
class Event:
    t_s: float | None
    kind: str
    text: str


@dataclass(frozen=True)
class Latency:
    """One variant's latency percentiles (ms); None where unmeasured."""
    label: str
    ttft_p50: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p99: float | None
    culprit: bool = False


# --- the SVG writer -----------------------------------------------------------------------------

def el(tag: str, attrs: Mapping[str, object] | None = None, *children: Markup | str) -> Markup:
    """One element: attribute values and string children escaped, Markup children kept."""
    attributes = Markup("").join(
        Markup(' {}="{}"').format(name, clean(str(value)))
        for name, value in (attrs or {}).items() if value is not None)
    if not children:
        return Markup("<{}{}/>").format(tag, attributes)
    inner = Markup("").join(c if isinstance(c, Markup) else escape(clean(c)) for c in children)
    return Markup("<{0}{1}>{2}</{0}>").format(tag, attributes, inner)


def num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def svg(width: float, height: float, title: str, *body: Markup, kind: str) -> Markup:
    return el("svg", {"xmlns": "http://www.w3.org/2000/svg", "class": f"chart {kind}",
                       "role": "img", "aria-label": title, "width": num(width),
                       "height": num(height), "viewBox": f"0 0 {num(width)} {num(height)}",
                       "font-family": FONT, "font-size": "12", "fill": INK},
               el("title", None, title), *body)


def text_at(x: float, y: float, text: str, anchor: str = "start", **attrs: object) -> Markup:
    return el("text", {"x": num(x), "y": num(y), "text-anchor": anchor, **attrs}, text)


def rule(x1: float, y1: float, x2: float, y2: float, stroke: str, **attrs: object) -> Markup:
    return el("line", {"x1": num(x1), "y1": num(y1), "x2": num(x2), "y2": num(y2),
                        "stroke": stroke, **attrs})


def clip(label: str, chars: int) -> str:
    return label if len(label) <= chars else label[:max(chars - 1, 1)] + "…"


def ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top`` (a 1, 2 or 5 step)."""
    if not top > 0 or not math.isfinite(top):
        top = 1.0
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _pct(value: float) -> str:
    return share(value)


def _ms(value: float) -> str:
    return f"{value:.0f} ms" if value >= 10 else f"{value:.2g} ms"


def _axis(x0: float, x1: float, y0: float, y1: float, values: Sequence[float],
          label: str = "", fmt: Callable[[float], str] = num) -> list[Markup]:
    """A horizontal value axis: grid lines over the plot (y0..y1), tick labels below it."""
    top = values[-1] or 1.0
    out: list[Markup] = []
    for value in values:
        x = x0 + (x1 - x0) * value / top
        out.append(rule(x, y0, x, y1, GRID, **{"class": "grid"}))
        out.append(text_at(x, y1 + 14, fmt(value), "middle",
                         fill=MUTED))
    if label:
        out.append(text_at((x0 + x1) / 2, y1 + 30, label, "middle", fill=MUTED))
    return out


# --- corruption rate per variant ----------------------------------------------------------------

def rate_chart(bars: Sequence[RateBar], title: str = "Corruption rate per variant") -> Markup:
    """A horizontal bar a variant, with its 95% interval as a whisker; culprits in red,
    known-good and known-bad tagged beside their value."""
    label_chars = min(max((len(b.label) for b in bars), default=8), 42)
    values = [f"{'≥' if b.lower_bound else ''}{_pct(b.rate)}  {b.corrupted}/{b.sessions}" + "".join(
        f"  {t}" for t in (b.role, "culprit" if b.culprit else "", _stopped(b)) if t)
        for b in bars]
    left, plot, row = 16 + label_chars * CHAR_W, 280.0, 24.0
    right = 20 + max((len(v) for v in values), default=10) * 6.4  # the value beside each bar
    top_pad, height = 12.0, 12.0 + row * max(len(bars), 1) + 40
    scale = ticks(max((max(b.ci95[1], b.rate) for b in bars), default=0.0) or 0.05)
    y_end = top_pad + row * max(len(bars), 1)
    body = _axis(left, left + plot, top_pad, y_end, scale,
                 "sessions corrupted / judged (95% interval)", _pct)
    for i, bar in enumerate(bars):
        y = top_pad + i * row
        x = lambda v: left + plot * min(max(v, 0.0), scale[-1]) / scale[-1]  # noqa: E731
        colour = CULPRIT if bar.culprit else BAR
        tags = [t for t in (bar.role, "culprit" if bar.culprit else "") if t]
        summary = (f"{bar.label}: {bar.corrupted} of {bar.sessions} sessions judged corrupted "
                   f"({'at least ' if bar.lower_bound else ''}{_pct(bar.rate)}, 95% interval "
                   f"{_pct(bar.ci95[0])}–{_pct(bar.ci95[1])})"
                   + "".join(f"; {t}" for t in (*tags, _stopped(bar)) if t))
        mid = y + row / 2
        body.append(el(
            "g", {"class": "variant" + "".join(f" {t}" for t in tags)},
            el("title", None, summary),
            text_at(left - 8, mid + 4, clip(bar.label, label_chars), "end",
                  **({"font-weight": "600"} if bar.culprit else {})),
            el("rect", {"class": "bar", "x": num(left), "y": num(y + 5),
                         "width": num(max(x(bar.rate) - left, 0.0)), "height": num(row - 10),
                         "fill": colour, "fill-opacity": "0.85"}),
            rule(x(bar.ci95[0]), mid, x(bar.ci95[1]), mid, INK, **{"class": "ci",
                                                                    "stroke-width": "1.5"}),
            rule(x(bar.ci95[0]), mid - 5, x(bar.ci95[0]), mid + 5, INK),
            rule(x(bar.ci95[1]), mid - 5, x(bar.ci95[1]), mid + 5, INK),
            text_at(left + plot + 10, mid + 4, values[i],
                  fill=CULPRIT if bar.culprit else (GOOD if bar.role == "known-good" else INK)),
        ))
    return svg(left + plot + right, height, title, *body, kind="rates")


def _stopped(bar: RateBar) -> str:
    """A lower bound says why: its trials stopped early, the sessions never run counted clean;
    elsewhere, the trials stopped early that the rate leaves out."""
    if bar.lower_bound:
        return "stopped early: never-run sessions counted clean"
    return f"{bar.stopped_early} stopped early, not counted" if bar.stopped_early else ""


# --- an interaction plot for a two-factor culprit -----------------------------------------------

def interaction_chart(row_factor: str, line_factor: str, points: Sequence[Point],
                      title: str | None = None) -> Markup:
    """The rate by level of ``row_factor`` (x), a line per level of ``line_factor``: lines
    that are not parallel are the interaction."""
    title = title or f"Corruption rate by {row_factor}, a line per {line_factor}"
    rows = list(dict.fromkeys(p.row_level for p in points))
    lines = list(dict.fromkeys(p.line_level for p in points))
    legend_chars = min(max((len(v) for v in [line_factor, *lines]), default=6), 30)
    left, plot_w, plot_h, top = 56.0, max(110.0 * len(rows), 200.0), 220.0, 16.0
    legend_x = left + plot_w + 20
    width, height = legend_x + 40 + legend_chars * CHAR_W, top + plot_h + 56
    scale = ticks(max((max(p.ci95[1], p.rate) for p in points), default=0.0) or 0.05)
    y = lambda v: top + plot_h * (1 - min(max(v, 0.0), scale[-1]) / scale[-1])  # noqa: E731
    step = plot_w / max(len(rows), 1)
    body: list[Markup] = []
    for value in scale:
        body.append(rule(left, y(value), left + plot_w, y(value), GRID, **{"class": "grid"}))
        body.append(text_at(left - 6, y(value) + 4, _pct(value), "end", fill=MUTED))
    for i, level in enumerate(rows):
        body.append(text_at(left + step * (i + 0.5), top + plot_h + 16,
                          clip(level, int(step / CHAR_W)), "middle"))
    body.append(text_at(left + plot_w / 2, top + plot_h + 36, row_factor, "middle", fill=MUTED))
    body.append(text_at(legend_x, top + 4, clip(line_factor, legend_chars), fill=MUTED))
    spread = min(step * 0.25, 18.0) / max(len(lines), 1)  # whiskers side by side, not on top
    for j, level in enumerate(lines):
        colour, dash = LINES[j % len(LINES)], DASHES[j % len(DASHES)]
        mine = {p.row_level: p for p in points if p.line_level == level}
        shift = (j - (len(lines) - 1) / 2) * spread
        xy = [(left + step * (i + 0.5) + shift, y(mine[r].rate))
              for i, r in enumerate(rows) if r in mine]
        marks: list[Markup] = [el("polyline", {
            "class": "line", "points": " ".join(f"{num(a)},{num(b)}" for a, b in xy),
            "fill": "none", "stroke": colour, "stroke-width": "2",
            "stroke-dasharray": dash or None})]
        for (px, py), row_level in zip(xy, [r for r in rows if r in mine], strict=True):
            p = mine[row_level]
            marks.append(el(
                "g", {"class": "point"},
                el("title", None, f"{row_factor}={row_level}, {line_factor}={level}: "
                    f"{_pct(p.rate)}, "
                    + (f"{p.failed} of " if p.failed is not None else "")
                    + f"{p.sessions} sessions judged (95% interval "
                    f"{_pct(p.ci95[0])}–{_pct(p.ci95[1])})"),
                rule(px, y(p.ci95[0]), px, y(p.ci95[1]), colour, **{"class": "ci"}),
                el("circle", {"cx": num(px), "cy": num(py), "r": "4", "fill": colour})))
        legend_y = top + 22 + 18 * j
        marks.append(rule(legend_x, legend_y - 4, legend_x + 28, legend_y - 4, colour,
                           **{"stroke-width": "2", "stroke-dasharray": dash or None}))
        marks.append(text_at(legend_x + 34, legend_y, clip(level, legend_chars)))
        body.append(el("g", {"class": "level"}, *marks))
    body.append(rule(left, top + plot_h, left + plot_w, top + plot_h, MUTED))
    return svg(width, height, title, *body, kind="interaction")


# --- per-trial time series ----------------------------------------------------------------------

def _thin(samples: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """At most MAX_POINTS samples: each bucket keeps its highest (a queue's peak matters)."""
    ordered = sorted(samples)
    if len(ordered) <= MAX_POINTS:
        return ordered
    size = math.ceil(len(ordered) / MAX_POINTS)
    return [max(ordered[i:i + size], key=lambda s: s[1]) for i in range(0, len(ordered), size)]


def series_chart(title: str, running: Sequence[tuple[float, float]],
                 queued: Sequence[tuple[float, float]], events: Sequence[Event]) -> Markup:
    """Running and queued requests over a trial; each wedge log event a red mark at its time
    (those the log gave no time are counted under the chart)."""
    width, left, top, plot_w, plot_h = 420.0, 40.0, 40.0, 360.0, 110.0
    # The collector scrapes once as the load starts, at each interval, and once after it:
    # with no scrape between those two, nothing was sampled under load, and a line between
    # two idle scrapes would read as a flat, idle server.
    scrapes = len({t for t, _ in [*running, *queued]})
    sampled = scrapes > 2
    runs, queue = (_thin(running), _thin(queued)) if sampled else ([], [])
    timed = [e for e in events if e.t_s is not None and math.isfinite(e.t_s)]
    untimed = len(events) - len(timed)
    end = max([t for t, _ in runs + queue] + [e.t_s or 0.0 for e in timed] + [1.0])
    scale = ticks(max([v for _, v in runs + queue] + [1.0]), 4)
    x = lambda t: left + plot_w * max(t, 0.0) / end  # noqa: E731
    y = lambda v: top + plot_h * (1 - max(v, 0.0) / scale[-1])  # noqa: E731
    body: list[Markup] = [text_at(0, 12, clip(title, int(width / CHAR_W)),
                                **{"font-weight": "600"})]
    for value in scale if sampled else []:  # no axis of values where none was sampled
        body.append(rule(left, y(value), left + plot_w, y(value), GRID, **{"class": "grid"}))
        body.append(text_at(left - 5, y(value) + 4, num(value), "end", fill=MUTED))
    for t in ticks(end, 4) if sampled or timed else []:
        if t <= end:
            body.append(text_at(x(t), top + plot_h + 14, f"{num(t)} s", "middle", fill=MUTED))
    for name, samples, colour, dash in (("running", runs, LINES[0], None),
                                        ("queued", queue, LINES[1], "5 3")):
        if samples:
            body.append(el("polyline", {
                "class": f"series {name}", "fill": "none", "stroke": colour,
                "stroke-width": "1.6", "stroke-dasharray": dash,
                "points": " ".join(f"{num(x(t))},{num(y(v))}" for t, v in samples)},
                el("title", None, f"{name} requests ({len(samples)} samples)")))
    for event in timed:
        at = x(event.t_s or 0.0)
        body.append(el("g", {"class": "event"},
                        el("title", None, f"{num(event.t_s or 0.0)} s · {event.kind}: "
                            f"{event.text}"),
                        rule(at, top, at, top + plot_h, CULPRIT, **{"stroke-width": "1.2"}),
                        el("path", {"d": f"M{num(at - 4)},{num(top - 6)}h8l-4,6z",
                                     "fill": CULPRIT})))
    if not sampled:
        said = "no samples" + (f" under load ({scrapes} scrape{'s' * (scrapes != 1)}, as it "
                               "started and ended)" if scrapes else "")
        body.append(text_at(left + plot_w / 2, top + plot_h / 2, said, "middle", fill=MUTED,
                            **{"class": "no-samples"}))
    legend = [("running", LINES[0], None), ("queued", LINES[1], "5 3")]
    for i, (name, colour, dash) in enumerate(legend):
        body.append(rule(left + 80 * i, 24, left + 80 * i + 18, 24, colour,
                          **{"stroke-width": "2", "stroke-dasharray": dash}))
        body.append(text_at(left + 80 * i + 22, 28, name, fill=MUTED))
    note = f"{len(timed)} wedge event{'s' * (len(timed) != 1)} marked"
    if untimed:
        note += f", {untimed} without a time"
    body.append(text_at(left, top + plot_h + 30, note,
                      fill=CULPRIT if events else MUTED, **{"class": "events-note"}))
    body.append(rule(left, top + plot_h, left + plot_w, top + plot_h, MUTED))
    return svg(width, top + plot_h + 38, title, *body, kind="series")


# --- latency percentiles per variant ------------------------------------------------------------

def latency_chart(rows: Sequence[Latency],
                  title: str = "Latency per variant: p50 (dot) to p99 (diamond)") -> Markup:
    """Two panels, time to first token and inter-token latency: per variant a segment from p50
    to p99. A variant whose latency was not measured says so."""
    label_chars = min(max((len(r.label) for r in rows), default=8), 42)
    left, panel, gap, row, top = 16 + label_chars * CHAR_W, 260.0, 64.0, 22.0, 24.0
    y_end = top + row * max(len(rows), 1)
    body: list[Markup] = []
    for i, r in enumerate(rows):
        body.append(text_at(left - 8, top + i * row + row / 2 + 4, clip(r.label, label_chars),
                          "end", **({"font-weight": "600"} if r.culprit else {})))
    for k, (name, pick) in enumerate((
            ("time to first token", lambda r: (r.ttft_p50, r.ttft_p99)),
            ("inter-token latency", lambda r: (r.itl_p50, r.itl_p99)))):
        x0 = left + k * (panel + gap)
        values = [v for r in rows for v in pick(r) if v is not None and math.isfinite(v)]
        scale = ticks(max(values, default=0.0) or 1.0, 4)
        x = lambda v, x0=x0, scale=scale: x0 + panel * min(max(v, 0.0), scale[-1]) / scale[-1]  # noqa: E731
        body.append(text_at(x0, 14, name, **{"font-weight": "600"}))
        body += _axis(x0, x0 + panel, top, y_end, scale, "", _ms)
        for i, r in enumerate(rows):
            p50, p99 = pick(r)
            mid = top + i * row + row / 2
            colour = CULPRIT if r.culprit else LINES[0]
            if p50 is None and p99 is None:
                body.append(text_at(x0 + 4, mid + 4, "not measured", fill=MUTED,
                                  **{"class": "unmeasured"}))
                continue
            marks: list[Markup] = [el("title", None, f"{r.label}, {name}: p50 "
                                       f"{_ms(p50) if p50 is not None else '–'}, p99 "
                                       f"{_ms(p99) if p99 is not None else '–'}")]
            if p50 is not None and p99 is not None:
                marks.append(rule(x(p50), mid, x(p99), mid, colour, **{"stroke-width": "2"}))
            if p50 is not None:
                marks.append(el("circle", {"class": "p50", "cx": num(x(p50)), "cy": num(mid),
                                            "r": "4", "fill": colour}))
            if p99 is not None:
                at = x(p99)
                marks.append(el("path", {"class": "p99", "fill": "#fff", "stroke": colour,
                                          "stroke-width": "1.5",
                                          "d": f"M{num(at)},{num(mid - 5)}l5,5l-5,5l-5,-5z"}))
            body.append(el("g", {"class": "latency"}, *marks))
    return svg(left + 2 * panel + gap + 24, y_end + 24, title, *body, kind="latency")
