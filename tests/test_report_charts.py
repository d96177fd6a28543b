"""The report's inline SVG charts on plain values: each is well-formed XML, draws a mark for each
datum where its value says, and shows hostile labels (markup, template syntax, a CDATA end,
control characters, a lone surrogate) as text. And the page's one script is the one its
Content-Security-Policy allows by hash."""

from __future__ import annotations

import base64
import hashlib
import re
import xml.etree.ElementTree as ET

import pytest

from orchestrator.reports import charts
from orchestrator.reports.page import CSP, SCRIPT_HASH, SORT_SCRIPT

pytestmark = pytest.mark.pure

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert(1)</script> </textarea> {{ range(7) }} ]]> "q" & \'a\''
CONTROL = "log\x1b[31mred\x00\udcff"  # a terminal escape, a NUL, undecodable bytes kept as text


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # raises on anything that is not well-formed XML
    assert root.tag == f"{SVG}svg" and root.get("role") == "img" and root.get("aria-label")
    return root


def marks(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}{tag}") if cls in (e.get("class") or "").split()]


def texts(root: ET.Element) -> list[str]:
    return ["".join(e.itertext()) for e in root.iter() if e.tag in (f"{SVG}text",
                                                                     f"{SVG}title")]


def bars(*rates: float) -> list[charts.RateBar]:
    return [charts.RateBar(f"v{i}", r, (max(r - 0.05, 0.0), r + 0.05), round(r * 80), 80)
            for i, r in enumerate(rates)]


def test_a_bar_and_a_whisker_per_variant_at_its_rate() -> None:
    data = [*bars(0.0, 0.05), charts.RateBar("culprit", 0.15, (0.1, 0.2), 12, 80,
                                             role="known-bad", culprit=True)]
    root = parse(charts.rate_chart(data))
    rects = marks(root, "rect", "bar")
    assert len(rects) == 3 and len(marks(root, "line", "ci")) == 3
    widths = [float(r.get("width", "nan")) for r in rects]
    assert widths[0] == 0 and 0 < widths[1] < widths[2]
    assert widths[2] == pytest.approx(3 * widths[1], rel=0.02)  # linear in the rate
    groups = marks(root, "g", "variant")
    assert [g.get("class") for g in groups][2] == "variant known-bad culprit"
    assert any("12 of 80 sessions judged corrupted (15.0%" in t for t in texts(root))
    whisker = marks(root, "line", "ci")[2]  # spans the interval, on the same scale as the bar
    x0 = float(rects[2].get("x", "nan"))
    assert float(whisker.get("x1", "nan")) - x0 == pytest.approx(widths[2] * 0.1 / 0.15, rel=0.02)


def test_the_interaction_plot_has_a_line_per_level_and_a_point_per_cell() -> None:
    points = [charts.Point(row, line, rate, (rate / 2, rate * 1.5 + 0.01), 60, round(rate * 60))
              for row, line, rate in (("fp8", "off", 0.0), ("bf16", "off", 0.0),
                                      ("fp8", "on", 0.0), ("bf16", "on", 0.17))]
    root = parse(charts.interaction_chart("index_k", "hicache", points))
    lines = marks(root, "polyline", "line")
    assert len(lines) == 2 and len(marks(root, "g", "point")) == 4
    off, on = ([tuple(map(float, p.split(","))) for p in line.get("points", "").split()]
               for line in lines)
    assert len(off) == len(on) == 2
    assert off[0][1] == off[1][1] == on[0][1] > on[1][1]  # SVG y grows downwards
    shown = texts(root)
    assert {"fp8", "bf16", "off", "on", "index_k", "hicache"} <= set(shown)
    # the rate with the counts it is of
    assert any(t.startswith("index_k=bf16, hicache=on: 17.0%, 10 of 60 sessions judged")
               for t in shown)


def test_a_trial_series_draws_running_queued_and_each_timed_event() -> None:
    running = [(float(t), float(t % 7)) for t in range(20)]
    queued = [(float(t), 2.0) for t in range(20)]
    events = [charts.Event(4.0, "wedge", "WaitingForInput rid=1"),
              charts.Event(9.5, "abort", "Abort request rid=1"), charts.Event(None, "abort", "?")]
    root = parse(charts.series_chart("trial 3", running, queued, events))
    series = {e.get("class"): e for e in root.iter(f"{SVG}polyline")}
    assert set(series) == {"series running", "series queued"}
    assert len(series["series running"].get("points", "").split()) == 20
    shown = marks(root, "g", "event")
    assert len(shown) == 2
    assert "".join(shown[0].itertext()) == "4 s · wedge: WaitingForInput rid=1"
    assert "2 wedge events marked, 1 without a time" in texts(root)
    # an event at 9.5 s of a 19 s trial sits half way along the plot
    x = [float(next(e.iter(f"{SVG}line")).get("x1", "nan")) for e in shown]
    assert (x[1] - 40) / 360 == pytest.approx(9.5 / 19, abs=0.01)


def test_a_long_series_is_thinned_keeping_its_peaks() -> None:
    running = [(float(t), 100.0 if t == 5001 else 1.0) for t in range(10_000)]
    root = parse(charts.series_chart("long", running, [], []))
    [line] = root.iter(f"{SVG}polyline")
    points = [tuple(map(float, p.split(","))) for p in line.get("points", "").split()]
    assert len(points) <= charts.MAX_POINTS
    assert min(y for _, y in points) < 45  # the peak is still drawn (near the top)


def test_an_empty_series_says_so() -> None:
    root = parse(charts.series_chart("nothing", [], [], []))
    assert list(root.iter(f"{SVG}polyline")) == []
    assert "no samples" in texts(root)


def test_two_idle_scrapes_are_no_samples_not_a_flat_line() -> None:
    # a trial shorter than the scrape interval: scraped as it started and as it ended, both
    # idle; a line between them would draw a server that was never under load
    idle = [(0.02, 0.0), (0.28, 0.0)]
    root = parse(charts.series_chart("short", idle, idle, []))
    assert list(root.iter(f"{SVG}polyline")) == [] and marks(root, "line", "grid") == []
    assert "no samples under load (2 scrapes, as it started and ended)" in texts(root)
    # a third scrape, under load: drawn
    root = parse(charts.series_chart("long", [*idle, (0.5, 4.0)], idle, []))
    assert len(list(root.iter(f"{SVG}polyline"))) == 2 and marks(root, "text", "no-samples") == []


def test_latency_draws_p50_and_p99_per_variant_and_says_what_is_unmeasured() -> None:
    rows = [charts.Latency("a", 120.0, 480.0, 8.0, 30.0),
            charts.Latency("b", 100.0, None, None, None, culprit=True)]
    root = parse(charts.latency_chart(rows))
    assert len(marks(root, "circle", "p50")) == 3  # a: both panels; b: TTFT only
    assert len(marks(root, "path", "p99")) == 2
    assert len(marks(root, "text", "unmeasured")) == 1
    assert any(t == "a, time to first token: p50 120 ms, p99 480 ms" for t in texts(root))


@pytest.mark.parametrize("chart", ["rates", "interaction", "series", "latency"])
def test_hostile_labels_are_text(chart: str) -> None:
    name = HOSTILE + CONTROL
    svg = {
        "rates": lambda: charts.rate_chart([charts.RateBar(name, 0.1, (0.0, 0.2), 1, 10,
                                                           role="known-good")]),
        "interaction": lambda: charts.interaction_chart(
            name, name, [charts.Point(name, name, 0.1, (0.0, 0.2), 10)]),
        "series": lambda: charts.series_chart(name, [(0.0, 1.0)], [(0.0, 1.0)],
                                              [charts.Event(0.5, name, name)]),
        "latency": lambda: charts.latency_chart([charts.Latency(name, 1.0, 2.0, 3.0, 4.0)]),
    }[chart]()
    assert "<script" not in svg and "</textarea" not in svg and "]]>" not in svg
    assert not re.search("[\x00-\x08\x1b\ud800-\udfff]", svg)
    root = parse(svg)
    assert {e.tag for e in root.iter()} <= {f"{SVG}{t}" for t in (
        "svg", "title", "g", "text", "rect", "line", "polyline", "circle", "path")}
    assert not [a for e in root.iter() for a in e.attrib if a.startswith("on")]
    clean = HOSTILE + "log\ufffd[31mred\ufffd\ufffd"
    shown = "\n".join(texts(root))
    assert clean in shown or HOSTILE in shown  # the label itself, as text (a long one cut short)


def test_ticks_are_round_and_cover_the_top() -> None:
    assert charts.ticks(0.17) == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert charts.ticks(1.0)[-1] >= 1.0 and charts.ticks(480, 4) == [0, 200, 400, 600]
    assert charts.ticks(0.0) == charts.ticks(float("nan")) == charts.ticks(1.0)


def test_the_script_is_allowed_by_its_hash_and_nothing_else_is() -> None:
    digest = base64.b64encode(hashlib.sha256(SORT_SCRIPT.encode()).digest()).decode()
    assert f"sha256-{digest}" == SCRIPT_HASH
    directives = dict(d.strip().split(" ", 1) for d in CSP.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == f"'{SCRIPT_HASH}'"  # no 'unsafe-inline', no source
    assert "</script" not in SORT_SCRIPT.lower() and "\r" not in SORT_SCRIPT
