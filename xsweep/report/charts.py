"""Charts as inline SVG text: a scatter of fronts, stacked horizontal bars, memory bars
against capacity.

Every function here is pure: numbers and labels in, SVG text out. Text is escaped where
it is written (:func:`esc`), hover labels are SVG ``<title>`` elements (a browser shows
them as tooltips; no script is needed), and nothing is fetched: the SVG is meant to sit
inside the page as it is.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

#: A positive axis whose values span at least this many decades is drawn on a log scale.
LOG_DECADES = 1.5
WIDTH = 760
FONT = "font-family=\"system-ui, sans-serif\""
GRID = "#e3e3e3"
INK = "#222"


def esc(text: object) -> str:
    """``text`` as HTML/SVG text or attribute value: ``& < > " '`` escaped."""
    return html.escape(str(text), quote=True)


def fmt(value: float) -> str:
    """A number for a label: 4 significant digits, thousands separated from 10,000 on;
    ``n/a`` for a value that is not known (NaN)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def use_log(values: Sequence[float]) -> bool:
    """Whether an axis over ``values`` is logarithmic: all the finite values are positive
    and the largest is at least ``10 ** LOG_DECADES`` times the smallest."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite or min(finite) <= 0:
        return False
    return max(finite) / min(finite) >= 10 ** LOG_DECADES


@dataclass(frozen=True)
class Axis:
    """A mapping from values in ``[lo, hi]`` to pixels in ``[start, end]``, linear or log."""

    lo: float
    hi: float
    start: float
    end: float
    log: bool = False

    @classmethod
    def over(cls, values: Sequence[float], start: float, end: float, log: bool | None = None,
             zero: bool = False) -> Axis:
        """An axis that shows ``values`` with a margin; ``log`` None: :func:`use_log`;
        ``zero``: a linear axis that starts at 0 (bars)."""
        finite = [v for v in values if v is not None and math.isfinite(v)]
        log = use_log(finite) if log is None else log
        if log:
            finite = [v for v in finite if v > 0]
            lo, hi = math.log10(min(finite)), math.log10(max(finite))
            pad = max(hi - lo, 0.2) * 0.06
            return cls(10 ** (lo - pad), 10 ** (hi + pad), start, end, True)
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
        if zero:
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        if hi == lo:
            spread = abs(hi) * 0.1 or 1.0
            lo, hi = (lo, hi + spread) if zero and lo == 0 else (lo - spread, hi + spread)
        pad = (hi - lo) * 0.05
        return cls(lo if zero and lo == 0 else lo - pad, hi + pad, start, end, False)

    def __call__(self, value: float) -> float:
        if self.log:
            share = ((math.log10(value) - math.log10(self.lo))
                     / (math.log10(self.hi) - math.log10(self.lo)))
        else:
            share = (value - self.lo) / (self.hi - self.lo)
        return self.start + share * (self.end - self.start)

    def ticks(self) -> list[float]:
        """Round values inside the axis: powers of ten (and 2 and 5 times them when there
        are few) on a log axis, steps of 1, 2 or 5 times a power of ten on a linear one."""
        if self.log:
            first, last = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
            decades = [10.0 ** k for k in range(first, last + 1)]
            inside = [t for t in decades if self.lo <= t <= self.hi]
            if len(inside) < 3:
                inside = [m * t for t in decades for m in (1, 2, 5) if self.lo <= m * t <= self.hi]
            return inside
        raw = (self.hi - self.lo) / 5
        power = 10 ** math.floor(math.log10(raw))
        step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
        first = math.ceil(self.lo / step)
        return [k * step for k in range(first, math.floor(self.hi / step) + 1)]


@dataclass(frozen=True)
class Series:
    """Points of one colour: ``points`` are ``(x, y, hover text)``; ``line`` joins them in
    order of x; ``hollow`` draws rings."""

    name: str
    colour: str
    points: tuple[tuple[float, float, str], ...]
    line: bool = False
    hollow: bool = False
    labels: tuple[str, ...] = field(default=())  # a short text beside each point, or none


def _svg(width: float, height: float, body: list[str], title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{esc(title)}" {FONT} '
            f'font-size="12">' + "".join(body) + "</svg>")


def scatter(series: Sequence[Series], x_label: str, y_label: str, title: str,
            height: int = 440) -> str:
    """A scatter plot: each series in its colour, a legend below, an axis whose values span
    decades logarithmic (its label says ``log scale``), each point's text on hover."""
    left, right, top = 78, WIDTH - 20, 34
    legend_rows = len(series)
    bottom = height - 46 - 18 * legend_rows
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] for s in series for p in s.points]
    x, y = Axis.over(xs, left, right), Axis.over(ys, bottom, top)
    body = [f'<text x="{WIDTH / 2:.0f}" y="20" text-anchor="middle" font-size="14" '
            f'font-weight="600" fill="{INK}">{esc(title)}</text>']
    body += _grid(x, y, left, right, top, bottom)
    body.append(f'<text x="{(left + right) / 2:.0f}" y="{bottom + 34:.0f}" text-anchor="middle" '
                f'fill="{INK}">{esc(x_label + (" (log scale)" if x.log else ""))}</text>')
    body.append(f'<text transform="translate(16 {(top + bottom) / 2:.0f}) rotate(-90)" '
                f'text-anchor="middle" fill="{INK}">'
                f'{esc(y_label + (" (log scale)" if y.log else ""))}</text>')
    for s in series:
        shown = [p for p in s.points if _finite(p[0], p[1], x, y)]
        body.append(f'<g class="series" data-name="{esc(s.name)}">')
        if s.line and len(shown) > 1:
            path = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py, _ in sorted(shown))
            body.append(f'<polyline points="{path}" fill="none" stroke="{s.colour}" '
                        'stroke-width="1.6"/>')
        style = (f'fill="none" stroke="{s.colour}" stroke-width="1"' if s.hollow
                 else f'fill="{s.colour}"')
        radius = 5 if s.line else 3.2
        for k, (px, py, text) in enumerate(s.points):
            if not _finite(px, py, x, y):
                continue
            body.append(f'<circle cx="{x(px):.1f}" cy="{y(py):.1f}" r="{radius}" {style}>'
                        f'<title>{esc(text)}</title></circle>')
            if k < len(s.labels) and s.labels[k]:
                body.append(f'<text x="{x(px) + 6:.1f}" y="{y(py) - 6:.1f}" font-size="10" '
                            f'fill="{s.colour}">{esc(s.labels[k])}</text>')
        body.append("</g>")
    for k, s in enumerate(series):
        ly = bottom + 56 + 18 * k
        mark = (f'<circle cx="{left + 6}" cy="{ly - 4}" r="4" '
                + (f'fill="none" stroke="{s.colour}"/>' if s.hollow else f'fill="{s.colour}"/>'))
        body.append(mark + f'<text x="{left + 16}" y="{ly}" fill="{INK}">{esc(s.name)}</text>')
    return _svg(WIDTH, height, body, title)


def _finite(px: float, py: float, x: Axis, y: Axis) -> bool:
    ok = all(v is not None and math.isfinite(v) for v in (px, py))
    return ok and not (x.log and px <= 0) and not (y.log and py <= 0)


def _x_ticks(x: Axis, top: float, bottom: float) -> list[str]:
    """A grid line from ``top`` to ``bottom`` at each tick of ``x``, its value below."""
    return [f'<line x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" y2="{bottom}" stroke="{GRID}"/>'
            f'<text x="{x(t):.1f}" y="{bottom + 15}" text-anchor="middle" font-size="11" '
            f'fill="{INK}">{esc(fmt(t))}</text>' for t in x.ticks()]


def _grid(x: Axis, y: Axis, left: float, right: float, top: float, bottom: float) -> list[str]:
    out = [f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" '
           f'fill="none" stroke="#999"/>']
    out += _x_ticks(x, top, bottom)
    for t in y.ticks():
        py = y(t)
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" stroke="{GRID}"/>'
                   f'<text x="{left - 6}" y="{py + 4:.1f}" text-anchor="end" font-size="11" '
                   f'fill="{INK}">{esc(fmt(t))}</text>')
    return out


@dataclass(frozen=True)
class Bar:
    """One horizontal bar: its label, its segments ``(name, value)`` stacked from zero in
    order, a text shown on hover, and optionally a mark (a capacity) drawn across it."""

    label: str
    segments: tuple[tuple[str, float], ...]
    hover: str = ""
    mark: float | None = None
    mark_name: str = ""
    alarm: bool = False  # drawn with a red outline (a bar past its mark)
    end_text: str = ""  # the text after the bar (default: its total)

    @property
    def total(self) -> float:
        return sum(v for _, v in self.segments if math.isfinite(v))


def stacked_bars(bars: Sequence[Bar], colours: dict[str, str], unit: str, title: str,
                 legend: Sequence[tuple[str, str]] | None = ()) -> str:
    """Horizontal bars, each the stack of its segments on a shared linear axis from zero
    (bars on a log axis would misstate their lengths), each segment's name, value and share
    on hover, the bar's total at its end; ``legend``: ``(segment, meaning)`` rows below
    (empty: the segments' names; None: no legend)."""
    label_width = min(300, 12 + 6.6 * max((len(b.label) for b in bars), default=10))
    left, right, top, row = label_width, WIDTH - 110, 34, 24
    bottom = top + row * len(bars) + 6
    legend_rows = 0 if legend is None else len(legend) if legend else len(colours)
    height = bottom + 36 + 18 * legend_rows + 6
    ends = [b.total for b in bars] + [b.mark for b in bars if b.mark is not None]
    x = Axis.over(ends or [1.0], left, right, log=False, zero=True)
    body = [f'<text x="{WIDTH / 2:.0f}" y="20" text-anchor="middle" font-size="14" '
            f'font-weight="600" fill="{INK}">{esc(title)}</text>']
    body += _x_ticks(x, top, bottom)
    body.append(f'<text x="{(left + right) / 2:.0f}" y="{bottom + 30}" text-anchor="middle" '
                f'fill="{INK}">{esc(unit)}</text>')
    for k, bar in enumerate(bars):
        y0 = top + row * k + 4
        body.append(f'<g class="bar" data-label="{esc(bar.label)}" '
                    f'data-total="{bar.total!r}"><title>{esc(bar.hover or bar.label)}</title>')
        body.append(f'<text x="{left - 6}" y="{y0 + 13}" text-anchor="end" fill="{INK}">'
                    f'{esc(bar.label)}</text>')
        at = 0.0
        for name, value in bar.segments:
            if not math.isfinite(value) or value <= 0:
                continue
            share = value / bar.total if bar.total > 0 else 0.0
            body.append(f'<rect class="segment" data-segment="{esc(name)}" data-value="{value!r}" '
                        f'x="{x(at):.2f}" y="{y0}" width="{x(at + value) - x(at):.2f}" '
                        f'height="{row - 8}" fill="{colours.get(name, "#999")}"><title>'
                        f'{esc(f"{bar.label}: {name} {fmt(value)} {unit} ({share:.1%})")}'
                        '</title></rect>')
            at += value
        if bar.alarm:
            body.append(f'<rect x="{x(0):.2f}" y="{y0 - 1}" width="{x(at) - x(0):.2f}" '
                        f'height="{row - 6}" fill="none" stroke="#c00" stroke-width="2"/>')
        if bar.mark is not None and math.isfinite(bar.mark):
            px = x(bar.mark)
            body.append(f'<line class="mark" x1="{px:.1f}" y1="{y0 - 3}" x2="{px:.1f}" '
                        f'y2="{y0 + row - 5}" stroke="{INK}" stroke-width="2.5">'
                        f'<title>{esc(f"{bar.mark_name} {fmt(bar.mark)} {unit}")}</title></line>')
        body.append(f'<text x="{x(max(at, bar.mark or 0)) + 5:.1f}" y="{y0 + 13}" '
                    f'font-size="11" fill="{INK}">{esc(bar.end_text or fmt(bar.total))}'
                    '</text></g>')
    rows = [] if legend is None else legend or [(name, "") for name in colours]
    for k, (name, meaning) in enumerate(rows):
        ly = bottom + 50 + 18 * k
        text = f"{name}: {meaning}" if meaning else name
        body.append(f'<rect x="20" y="{ly - 10}" width="12" height="12" '
                    f'fill="{colours.get(name, "#999")}"/><text x="38" y="{ly}" font-size="11" '
                    f'fill="{INK}">{esc(text)}</text>')
    return _svg(WIDTH, height, body, title)
