"""Drawing the sweep's Pareto plot with matplotlib, in this process or in a process of its
own started beside the sweep.

Importing matplotlib and drawing one figure take a sweep of seconds most of a second of
CPU. A :class:`Drawer` starts a Python process when the sweep starts, which imports
matplotlib while the sweep runs, then draws the figure it is sent (plain values:
:func:`xsweep.search.sweep.plot.figure_of`) and answers with the PNG's bytes. It runs at
a lower priority (``nice`` 10, where the system has one): it takes what the sweep leaves
of the cores (a core while this process imports its modules, and while it lowers plans or
writes results), not a share of the planning's and the kernels'. If that process fails in
any way the figure is drawn here instead: the plot never fails a sweep that drawing here
would not.

``python -m xsweep.search.sweep.drawing`` is that process: it reads one pickled figure on
its standard input, its length first (8 bytes, big-endian: it never waits for the end of
its input, which a worker process forked later holds open too), and writes the PNG on its
standard output.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import pickle
import subprocess
import sys
import warnings


def draw(figure: dict) -> bytes:
    """The PNG of ``figure`` (:func:`xsweep.search.sweep.plot.figure_of`)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot as plt

    plot, axes = plt.subplots(figsize=(7.5, 5.0), dpi=120)
    # markers of one line, not a scatter collection: as drawn, and for a large sweep's tens
    # of thousands of points several times faster to draw and to place the legend around
    x, y = figure["pruned"]
    axes.plot(x, y, linestyle="none", marker="o", markersize=3.2, markerfacecolor="none",
              markeredgecolor="#c8c8c8", markeredgewidth=0.6,
              label=f"pruned, at its lower bound ({len(x)})")
    x, y = figure["exact"]
    axes.plot(x, y, linestyle="none", marker="o", markersize=3.7, color="#8c8c8c",
              label=f"feasible, exact ({len(x)})")
    for front in figure["fronts"]:
        colour = front["colour"]
        axes.plot(front["x"], front["y"], "-o", color=colour, markersize=5, linewidth=1.2,
                  label=front["label"])
        for text, px, py in front["points"]:
            axes.annotate(text, (px, py), textcoords="offset points", xytext=(4, 4),
                          fontsize=7, color=colour)
    if figure["x_log"]:
        axes.set_xscale("log")
    if figure["y_log"]:
        axes.set_yscale("log")
    axes.set_xlabel(figure["x_label"])
    axes.set_ylabel(figure["y_label"])
    # The title holds the sweep's name, as written: no mathtext ($...$), and characters
    # the font cannot draw are spelled as escapes rather than drawn as empty boxes.
    title = figure["title"]
    heading = axes.set_title(title, parse_math=False)
    heading.set_text(drawable(title, heading.get_fontproperties()))
    axes.grid(True, alpha=0.3)
    if len(figure["pruned"][0]) or len(figure["exact"][0]):
        axes.legend(loc="best", fontsize=8)
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # no library warning on stderr, whatever the name
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from",
                                category=UserWarning)
        plot.tight_layout()
        plot.savefig(buffer, format="png")
    plt.close(plot)
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


class Drawer:
    """Draws figures in a process started now, which imports matplotlib meanwhile; where
    that process cannot answer, here."""

    def __init__(self):
        try:
            self._process: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except OSError:
            self._process = None
        self._figure: dict | None = None

    def send(self, figure: dict) -> None:
        """Start drawing ``figure``: the drawing process draws it while this one goes on."""
        self._figure = figure
        if self._process is not None:
            try:
                message = pickle.dumps(figure)
                self._process.stdin.write(len(message).to_bytes(_LENGTH, "big") + message)
                self._process.stdin.close()
            except OSError:
                self.close()

    def png(self) -> bytes:
        """The PNG of the figure sent: the drawing process's if it gives one, else drawn
        here."""
        process, self._process = self._process, None
        if process is not None:
            try:
                png = process.stdout.read()  # up to its end: the process has finished
                process.stdout.close()
                process.wait(timeout=60)
                if process.returncode == 0 and png.startswith(b"\x89PNG"):
                    return png
            except (OSError, ValueError, subprocess.SubprocessError):
                _stop(process)
        return draw(self._figure)

    def close(self) -> None:
        """Stop the drawing process if it never drew (the sweep ended early)."""
        process, self._process = self._process, None
        if process is not None:
            _stop(process)


def _stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


#: Bytes of the figure's length before it.
_LENGTH = 8
#: How much lower the drawing process's priority is (``os.nice``).
NICENESS = 10


def _serve() -> None:
    """The drawing process: import matplotlib, then draw the one figure on stdin."""
    if hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(NICENESS)
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: F401 (imported while the sweep runs)

    given = sys.stdin.buffer
    length = int.from_bytes(_read(given, _LENGTH), "big")
    figure = pickle.loads(_read(given, length))
    sys.stdout.buffer.write(draw(figure))
    sys.stdout.buffer.flush()


def _read(stream, size: int) -> bytes:
    """``size`` bytes of ``stream``; EOFError if it ends first."""
    data = stream.read(size)
    if len(data) != size:
        raise EOFError(f"{len(data)} of {size} bytes")
    return data


if __name__ == "__main__":
    _serve()
