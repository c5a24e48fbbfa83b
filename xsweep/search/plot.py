"""The Pareto plot of a sweep: every feasible point in grey, the front highlighted."""

from __future__ import annotations

import io

import numpy as np

from xsweep.metrics import metric_of
from xsweep.search.results import Answer, exact_feasible
from xsweep.search.table import Table


def label(name: str) -> str:
    """An axis label: the metric's name and its unit from the metrics table."""
    unit = metric_of(name).unit
    return name if unit == "1" else f"{name} ({unit})"


def pareto_png(table: Table, objectives: list[str], found: Answer, title: str) -> bytes:
    """A PNG of the first two objectives (with one objective: it against cost per run,
    else iteration time); pruned points are drawn at their bounds."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot as plt

    x_name = objectives[0]
    if len(objectives) > 1:
        y_name = objectives[1]
    else:
        y_name = "cost_per_run_usd" if x_name != "cost_per_run_usd" else "iteration_time_s"
    x, y = (np.asarray(table[name], float) for name in (x_name, y_name))
    exact = exact_feasible(table)
    pruned = table["status"] == "pruned"
    figure, axes = plt.subplots(figsize=(7.5, 5.0), dpi=120)
    # markers of one line, not a scatter collection: as drawn, and for a large sweep's tens
    # of thousands of points several times faster to draw and to place the legend around
    axes.plot(x[pruned], y[pruned], linestyle="none", marker="o", markersize=3.2,
              markerfacecolor="none", markeredgecolor="#c8c8c8", markeredgewidth=0.6,
              label=f"pruned, at its lower bound ({int(pruned.sum())})")
    axes.plot(x[exact], y[exact], linestyle="none", marker="o", markersize=3.7,
              color="#8c8c8c", label=f"feasible, exact ({int(exact.sum())})")
    front = found.front[np.argsort(x[found.front], kind="stable")]
    axes.plot(x[front], y[front], "-o", color="#d1495b", markersize=5, linewidth=1.2,
              label=f"Pareto front ({len(front)})")
    axes.set_xlabel(label(x_name))
    axes.set_ylabel(label(y_name))
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if exact.any() or pruned.any():
        axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()
