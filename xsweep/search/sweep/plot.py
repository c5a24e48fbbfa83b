"""The Pareto plot of a sweep: every feasible point in grey, each work group's front
highlighted and labelled."""

from __future__ import annotations

import numpy as np

from xsweep.metrics import metric_of
from xsweep.report.charts import use_log
from xsweep.search.evaluation import exact_feasible
from xsweep.search.levels import Status
from xsweep.search.space.grid import Grid
from xsweep.search.sweep.drawing import draw
from xsweep.search.sweep.results import Answer
from xsweep.search.table import Table


def label(name: str) -> str:
    """An axis label: the metric's name and its unit from the metrics table."""
    unit = metric_of(name).unit
    return name if unit == "1" else f"{name} ({unit})"


#: Colours of the work groups' fronts, in order (then again).
FRONT_COLOURS = ("#d1495b", "#00798c", "#edae49", "#66a182", "#2e4057", "#8d96a3")
#: Fronts of more plans than this have only their ends and every few points labelled.
MOST_LABELS = 12


def axes_of(objectives: list[str]) -> tuple[str, str]:
    """The metrics drawn: the first two objectives; with one objective, it against cost per
    million tokens (always known), or iteration time when that is the objective."""
    if len(objectives) > 1:
        return objectives[0], objectives[1]
    other = ("cost_per_million_tokens_usd" if objectives[0] != "cost_per_million_tokens_usd"
             else "iteration_time_s")
    return objectives[0], other


def pareto_png(table: Table, grid: Grid, objectives: list[str], found: list[Answer],
               title: str) -> bytes:
    """A PNG of the first two objectives (:func:`axes_of`): feasible points in grey, pruned
    points at their bounds, the front of each work group in a colour of its own with its
    points labelled by their index; an axis whose values span decades is logarithmic."""
    return draw(figure_of(table, grid, objectives, found, title))


def figure_of(table: Table, grid: Grid, objectives: list[str], found: list[Answer],
              title: str) -> dict:
    """What :func:`pareto_png` draws, as plain values (numbers, text, numpy arrays), for
    :func:`xsweep.search.sweep.drawing.draw`, here or in a drawing process."""
    x_name, y_name = axes_of(objectives)
    x, y = (np.asarray(table[name], float) for name in (x_name, y_name))
    exact = exact_feasible(table)
    pruned = table["status"] == Status.PRUNED
    fronts = []
    for k, answer in enumerate(found):
        front = answer.front[np.argsort(x[answer.front], kind="stable")]
        work = ", ".join(f"{grid.names[p]} {v}" for p, v in answer.work.items())
        name = f"Pareto front, {work}" if work else "Pareto front"
        plans = "plan" if len(front) == 1 else "plans"
        step = max(1, -(-len(front) // MOST_LABELS))
        fronts.append({
            "x": x[front], "y": y[front], "colour": FRONT_COLOURS[k % len(FRONT_COLOURS)],
            "label": f"{name} ({len(front)} {plans})" if len(front) else f"{name}: none",
            "points": [(str(i), float(x[i]), float(y[i])) for rank, i in enumerate(front)
                       if rank % step == 0 or rank == len(front) - 1]})
    shown = exact | pruned
    return {"title": title, "x_label": label(x_name), "y_label": label(y_name),
            # the report's rule, so the page and the PNG agree
            "x_log": use_log(x[shown].tolist()), "y_log": use_log(y[shown].tolist()),
            "pruned": (x[pruned], y[pruned]), "exact": (x[exact], y[exact]),
            "fronts": fronts}
