"""The SVG builders: log-axis choice, ticks, escaping, stacked bars that add up, marks."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from xsweep.report.charts import LOG_DECADES, Axis, Bar, Series, fmt, scatter, stacked_bars, use_log

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = "<script>alert('x')</script> & \"quoted\" </svg>"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML, or this raises


def texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


@pytest.mark.parametrize(("values", "log"), [
    ([1.0, 10 ** LOG_DECADES * 0.99], False),
    ([1.0, 10 ** LOG_DECADES], True),
    ([0.002, 0.5, 40.0], True),
    ([0.0, 1e6], False),  # zero has no logarithm
    ([-1.0, 1e6], False),
    ([1.0, math.nan, 1e3], True),  # a value not known is left out
    ([], False),
])
def test_an_axis_is_logarithmic_from_one_and_a_half_decades(values, log):
    assert use_log(values) is log


def test_a_log_axis_has_its_decades_as_ticks_and_places_them_evenly():
    axis = Axis.over([0.01, 3.0, 250.0], 0.0, 600.0)
    assert axis.log
    ticks = axis.ticks()
    assert pytest.approx(ticks) == [0.01, 0.1, 1.0, 10.0, 100.0]
    steps = [axis(b) - axis(a) for a, b in zip(ticks, ticks[1:], strict=False)]
    assert max(steps) - min(steps) < 1e-9 and steps[0] > 0
    assert axis(0.01) >= 0 and axis(250.0) <= 600


def test_a_linear_axis_has_round_evenly_spaced_ticks_inside_it():
    axis = Axis.over([1.19, 1.36, 2.6], 100.0, 700.0)
    assert not axis.log
    ticks = axis.ticks()
    assert len(ticks) >= 3
    assert all(axis.lo <= t <= axis.hi for t in ticks)
    gaps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:], strict=False)}
    assert len(gaps) == 1 and gaps.pop() in (0.1, 0.2, 0.5, 1.0)


def test_a_bar_axis_starts_at_zero_even_for_one_value():
    axis = Axis.over([42.0], 0.0, 100.0, log=False, zero=True)
    assert axis.lo == 0 and axis.hi > 42 and axis(0.0) == 0.0


def test_the_scatter_marks_a_log_axis_and_puts_each_points_text_in_its_title():
    points = ((0.01, 5.0, "point 3\nfirst"), (1.0, 6.0, "point 4"), (50.0, 7.0, "point 9"))
    root = parse(scatter([Series("front", "#d1495b", points, line=True, labels=("3", "4", "9"))],
                         "iteration_time_s (s)", "cost (USD)", "title"))
    words = texts(root)
    assert "iteration_time_s (s) (log scale)" in words  # x spans 3.7 decades
    assert "cost (USD)" in words  # y does not: linear, unmarked
    circles = [c for c in root.iter(f"{SVG}circle") if c.find(f"{SVG}title") is not None]
    assert [c.find(f"{SVG}title").text for c in circles] == [p[2] for p in points]
    xs = [float(c.get("cx")) for c in circles]
    assert xs == sorted(xs)
    assert root.find(f".//{SVG}polyline") is not None
    assert {"3", "4", "9"} <= set(words)


def test_every_text_is_escaped_and_reads_back_as_written():
    series = [Series(HOSTILE, "#000", ((1.0, 2.0, HOSTILE),), labels=(HOSTILE,))]
    svg = scatter(series, HOSTILE, HOSTILE, HOSTILE)
    assert "<script" not in svg
    root = parse(svg)
    assert root.get("aria-label") == HOSTILE
    assert texts(root).count(HOSTILE) >= 4  # title, both axis labels, the legend
    assert root.find(f".//{SVG}circle/{SVG}title").text == HOSTILE
    bars = stacked_bars([Bar(HOSTILE, ((HOSTILE, 1.0),), HOSTILE)], {HOSTILE: "#123"}, HOSTILE,
                        HOSTILE)
    assert "<script" not in bars
    assert HOSTILE in texts(parse(bars))


def segments(root: ET.Element) -> list[list[tuple[str, float, float]]]:
    """Per bar: (segment, value, drawn width)."""
    return [[(r.get("data-segment"), float(r.get("data-value")), float(r.get("width")))
             for r in g.iter(f"{SVG}rect") if r.get("class") == "segment"]
            for g in root.iter(f"{SVG}g") if g.get("class") == "bar"]


def test_stacked_bars_draw_each_segment_in_proportion_and_add_up_to_their_total():
    bars = [Bar("a", (("compute", 1.0), ("wait", 0.25), ("none", 0.0))),
            Bar("b", (("compute", 0.5), ("wait", 1.5)))]
    root = parse(stacked_bars(bars, {"compute": "#111", "wait": "#222"}, "s", "t"))
    drawn = segments(root)
    assert [[name for name, _, _ in bar] for bar in drawn] == [["compute", "wait"],
                                                               ["compute", "wait"]]
    px_per_s = drawn[0][0][2] / 1.0
    for bar, expected in zip(drawn, bars, strict=True):
        assert sum(v for _, v, _ in bar) == pytest.approx(expected.total)
        assert sum(w for _, _, w in bar) == pytest.approx(expected.total * px_per_s, abs=0.05)
    totals = [float(g.get("data-total")) for g in root.iter(f"{SVG}g") if g.get("class") == "bar"]
    assert totals == [1.25, 2.0]
    assert {"1.25", "2"} <= set(texts(root))


def test_a_memory_bar_shows_its_capacity_and_an_outline_when_past_it():
    fits = Bar("DG 0", (("weights", 10.0), ("activations", 20.0)), mark=80.0, mark_name="cap")
    over = Bar("DG 1", (("weights", 30.0), ("activations", 20.0)), mark=40.0, mark_name="cap",
               alarm=True)
    root = parse(stacked_bars([fits, over], {"weights": "#1", "activations": "#2"}, "GiB", "m"))
    marks = [line for line in root.iter(f"{SVG}line") if line.get("class") == "mark"]
    assert len(marks) == 2
    drawn = segments(root)
    px_per_gib = drawn[0][0][2] / 10.0
    left = min(float(r.get("x")) for r in root.iter(f"{SVG}rect") if r.get("class") == "segment")
    assert float(marks[0].get("x1")) == pytest.approx(left + 80 * px_per_gib, abs=0.1)
    assert float(marks[1].get("x1")) == pytest.approx(left + 40 * px_per_gib, abs=0.1)
    red = [r for r in root.iter(f"{SVG}rect") if r.get("stroke") == "#c00"]
    assert len(red) == 1 and float(red[0].get("width")) == pytest.approx(50 * px_per_gib,
                                                                         abs=0.1)


def test_numbers_are_short_and_a_missing_one_says_so():
    assert fmt(1.19205) == "1.192"
    assert fmt(57832.7) == "57,833"
    assert fmt(math.nan) == "n/a"
