"""The Pareto plot of a sweep: every feasible point in grey, each work group's front
highlighted and labelled."""

from __future__ import annotations

import functools
import io
import warnings

import numpy as np

from xsweep.metrics import metric_of
from xsweep.report.charts import use_log
from xsweep.search.evaluation import exact_feasible
from xsweep.search.levels import Status
from xsweep.search.space.grid import Grid
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
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot as plt

    x_name, y_name = axes_of(objectives)
    x, y = (np.asarray(table[name], float) for name in (x_name, y_name))
    exact = exact_feasible(table)
    pruned = table["status"] == Status.PRUNED
    figure, axes = plt.subplots(figsize=(7.5, 5.0), dpi=120)
    # markers of one line, not a scatter collection: as drawn, and for a large sweep's tens
    # of thousands of points several times faster to draw and to place the legend around
    axes.plot(x[pruned], y[pruned], linestyle="none", marker="o", markersize=3.2,
              markerfacecolor="none", markeredgecolor="#c8c8c8", markeredgewidth=0.6,
              label=f"pruned, at its lower bound ({int(pruned.sum())})")
    axes.plot(x[exact], y[exact], linestyle="none", marker="o", markersize=3.7,
              color="#8c8c8c", label=f"feasible, exact ({int(exact.sum())})")
    for k, answer in enumerate(found):
        front = answer.front[np.argsort(x[answer.front], kind="stable")]
        colour = FRONT_COLOURS[k % len(FRONT_COLOURS)]
        work = ", ".join(f"{grid.names[p]} {v}" for p, v in answer.work.items())
        name = f"Pareto front, {work}" if work else "Pareto front"
        plans = "plan" if len(front) == 1 else "plans"
        axes.plot(x[front], y[front], "-o", color=colour, markersize=5, linewidth=1.2,
                  label=f"{name} ({len(front)} {plans})" if len(front) else f"{name}: none")
        step = max(1, -(-len(front) // MOST_LABELS))
        for rank, i in enumerate(front):
            if rank % step == 0 or rank == len(front) - 1:
                axes.annotate(str(i), (x[i], y[i]), textcoords="offset points", xytext=(4, 4),
                              fontsize=7, color=colour)
    shown = exact | pruned
    for values, scale in ((x[shown], axes.set_xscale), (y[shown], axes.set_yscale)):
        if use_log(values.tolist()):  # the report's rule, so the page and the PNG agree
            scale("log")
    axes.set_xlabel(label(x_name))
    axes.set_ylabel(label(y_name))
    # The title holds the sweep's name, as written: no mathtext ($...$), and characters
    # the font cannot draw are spelled as escapes rather than drawn as empty boxes.
    heading = axes.set_title(title, parse_math=False)
    heading.set_text(drawable(title, heading.get_fontproperties()))
    axes.grid(True, alpha=0.3)
    if exact.any() or pruned.any():
        axes.legend(loc="best", fontsize=8)
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # no library warning on stderr, whatever the name
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from",
                                category=UserWarning)
        figure.tight_layout()
        figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()


def drawable(text: str, font) -> str:
    """``text`` with each character that ``font`` (matplotlib font properties) has no
    glyph for, or that prints as nothing, written as its escape (``\\u6d4b``), so that a
    title in any script shows what it says instead of empty boxes."""
    from matplotlib import font_manager

    glyphs = _glyphs(font_manager.findfont(font))
    return "".join(char if char.isprintable() and ord(char) in glyphs
                   else char.encode("unicode_escape").decode("ascii") for char in text)


@functools.cache
def _glyphs(font_path: str) -> frozenset[int]:
    """The code points the font file has glyphs for."""
    from matplotlib import ft2font

    return frozenset(ft2font.FT2Font(font_path).get_charmap())
