"""The Pareto plot of a sweep: every feasible point in grey, the front highlighted."""

from __future__ import annotations

import functools
import io
import warnings

import numpy as np

from xsweep.metrics import metric_of
from xsweep.search.evaluation import exact_feasible
from xsweep.search.sweep.results import Answer
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
