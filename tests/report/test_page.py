"""The page of a real sweep: its sections, fronts, bars, memory from the plans, escaping."""

from __future__ import annotations

import dataclasses
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from tests.report.conftest import xsweep
from xsweep.report.page import front_labels, page
from xsweep.report.result import FrontPlan, Group, open_result, shown_plans
from xsweep.search.sweep.plot import FRONT_COLOURS
from xsweep.spec.catalog import load_catalog

HOSTILE = "<script>alert('x')</script> & \"co\" <b>"


class Parsed(HTMLParser):
    """The page's tags, their attributes and its text, as a browser's parser sees them."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture(scope="module")
def result(two_models):
    return open_result(two_models, load_catalog())


@pytest.fixture(scope="module")
def html(result):
    return page(result)


def test_a_two_model_sweep_has_two_fronts_each_in_its_colour(result, html):
    assert [g.work for g in result.groups] == [{"model": "llama2-7b"}, {"model": "llama2-13b"}]
    parsed = Parsed(html)
    series = {a["data-name"]: a for t, a in parsed.tags if t == "g" and "data-name" in a}
    fronts = [name for name in series if name.startswith("Pareto front")]
    assert len(fronts) == 2
    assert "model llama2-7b" in fronts[0] and "model llama2-13b" in fronts[1]
    drawn = dict(re.findall(r'<g class="series" data-name="([^"]*)">(.*?)</g>', html, re.S))
    for k, (name, group) in enumerate(zip(fronts, result.groups, strict=True)):
        # each front's points in its own colour, one circle per plan of the front
        circles = re.findall(r'<circle [^>]*fill="([^"]*)"', drawn[name])
        assert circles == [FRONT_COLOURS[k]] * len(group.front)


def test_every_section_is_there_and_the_page_fetches_nothing(html):
    parsed = Parsed(html)
    sections = [a["id"] for t, a in parsed.tags if t == "section"]
    assert sections == ["pareto", "time", "memory", "cost", "validation"]
    assert not [t for t, _ in parsed.tags if t in ("script", "link", "img", "iframe")]
    assert not any("src" in a or "href" in a for _, a in parsed.tags)
    assert re.findall(r"https?://[^\"' ]+", html) == ["http://www.w3.org/2000/svg"] * html.count(
        "<svg ")


def test_front_points_show_their_index_axes_and_metrics_on_hover(result, html):
    plan = result.groups[1].front[0]
    titles = re.findall(r"<circle[^>]*><title>(.*?)</title>", html, flags=re.S)
    mine = [t for t in titles if t.startswith(f"point {plan.point} (model llama2-13b)")]
    assert len(mine) == 1
    row = result.row(plan.point)
    for axis, value in plan.axes.items():
        if value is not None:
            assert f"{axis} {value}" in mine[0]
    assert f"iteration_time_s: {row['iteration_time_s']:.4g} s" in mine[0]
    assert "cost_per_run_usd: " in mine[0] and "mfu: " in mine[0]


def test_each_time_bar_adds_up_to_its_plans_iteration_time(result, html):
    bars = re.findall(r'<g class="bar" data-label="([^"]*)" data-total="([^"]*)">(.*?)</g>',
                      html, flags=re.S)
    time_bars = [b for b in bars if "data-segment=\"compute\"" in b[2]]
    shown = [(g, p) for g in result.groups for p in shown_plans(g.front)]
    assert len(time_bars) == len(shown) >= 4
    for (label, total, body), (_, plan) in zip(time_bars, shown, strict=True):
        assert label.startswith(f"point {plan.point} ")
        values = [float(v) for v in re.findall(r'data-value="([^"]*)"', body)]
        assert sum(values) == pytest.approx(float(total))
        assert float(total) == pytest.approx(result.row(plan.point)["iteration_time_s"],
                                             rel=1e-5)


def test_memory_comes_from_the_plan_files_as_xsweep_plan_computes_it(result, two_models):
    plan = result.groups[1].front[0]
    done = xsweep("plan", two_models / "plans" / f"point-{plan.point}.pbtxt", "--json",
                  "--allow-oom")
    assert done.returncode == 0, done.stderr
    reported = {m["device_group"]: m for m in json.loads(done.stdout)["memory"]}
    assert sorted(i for m in plan.memory for i in m.groups) == sorted(reported)
    for m in plan.memory:
        for group in m.groups:
            want = reported[group]
            assert m.gpu == want["gpu"] and m.capacity_gib == want["capacity_gib"]
            assert sum(v for _, v in m.parts) == pytest.approx(want["per_gpu_gib"])
            assert m.fits == want["fits"]
    # the largest per-GPU memory is the dataset's memory_per_gpu_gib
    largest = max(sum(v for _, v in m.parts) for m in plan.memory)
    assert largest == pytest.approx(result.row(plan.point)["memory_per_gpu_gib"], rel=1e-5)


def test_the_validation_table_has_a_row_per_plan_validated(result, html):
    section = html[html.index('<section id="validation">'):]
    summary = section[:section.index("<details>")]
    assert summary.count("<tr>") - 1 == len(result.validation["points"]) >= 4
    assert "Verdict: <span class='ok'>passed</span>" in section
    for point in result.validation["points"]:
        assert f">{point['name']}<" in summary


def test_without_a_validation_the_page_says_how_to_get_one(result):
    text = page(dataclasses.replace(result, validation=None))
    assert "No validation yet: run xsweep validate" in text
    assert "<details>" not in text


def test_every_text_from_the_sweep_is_escaped(result):
    group = result.groups[0]
    hostile = dataclasses.replace(
        result, name=HOSTILE,
        groups=(Group({"model": HOSTILE}, tuple(dataclasses.replace(p, axes={"x": HOSTILE})
                                                for p in group.front)),))
    text = page(hostile)
    assert "<script" not in text and "<b>" not in text
    parsed = Parsed(text)
    read = "".join(parsed.text)  # as a browser reads it: the very text of the sweep
    assert f"xsweep report: {HOSTILE}" in read
    assert f"point {group.front[0].point} (model {HOSTILE})" in read
    assert f"x {HOSTILE}" in read


def test_pruned_and_exact_points_are_drawn_apart_from_the_fronts(result, html):
    table = result.table
    pruned = int(np.sum(table["status"] == "pruned"))
    exact = int(np.sum(table["feasible"] & (table["level"] == "exact")))
    assert f"pruned, at its lower bound ({pruned})" in html
    assert f"feasible, exact ({exact})" in html


def test_an_objective_spanning_decades_gets_a_log_axis_on_the_page(result):
    x_label = "iteration_time_s (s)"
    assert f">{x_label}<" in page(result)  # 1.2 to 4 s: linear
    table = dict(result.table)
    times = table["iteration_time_s"].astype(float).copy()
    exact = np.flatnonzero(table["feasible"] & (table["level"] == "exact"))
    times[exact[-1]] *= 100  # one exact point 100 times slower: over two decades
    table["iteration_time_s"] = times
    text = page(dataclasses.replace(result, table=table))
    assert f">{x_label} (log scale)<" in text
    assert ">cost_per_run_usd (USD)<" in text  # the other axis stays linear


@pytest.mark.parametrize(("length", "most", "picked"), [
    (3, 12, [0, 1, 2]),
    (12, 12, list(range(12))),
    (13, 4, [0, 4, 8, 12]),
    (100, 3, [0, 50, 99]),  # both ends and the middle
])
def test_a_long_front_shows_its_ends_and_plans_evenly_between(length, most, picked):
    assert shown_plans(tuple(range(length)), most) == picked


def test_a_long_front_has_some_of_its_points_numbered_and_every_one_on_hover():
    front = tuple(FrontPlan(point, (), {}) for point in range(100, 130))
    labels = front_labels(front)
    assert len(labels) == 30 and labels[0] == "100" and labels[-1] == "129"
    assert 2 <= sum(bool(t) for t in labels) <= 13
    assert front_labels(front[:5]) == ("100", "101", "102", "103", "104")
