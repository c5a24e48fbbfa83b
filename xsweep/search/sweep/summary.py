"""What a finished sweep tells the user besides its front table: the summary document
``--json`` prints (counts by status and level, the front and the top points) and the
lines naming the best points of each objective."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from xsweep.search.report import COLUMNS
from xsweep.search.space.grid import Grid
from xsweep.search.sweep.results import Answer
from xsweep.search.table import Table


def point_row(table: Table, grid: Grid, index: int, objectives=()) -> dict:
    """One point's metrics of :data:`~xsweep.search.report.COLUMNS` and ``objectives``, and
    its swept axes' values (JSON-ready)."""
    row = {"point": int(index)}
    for name in dict.fromkeys([*(c[0] for c in COLUMNS), *objectives]):
        if name in table:
            value = float(table[name][index])
            row[name] = value if math.isfinite(value) else None
    point = grid.point(index)
    row["axes"] = {path: _plain(point[path]) for path in grid.dims}
    return row


def summary_of(table: Table, grid: Grid, objectives: list[str], found: Answer) -> dict:
    """Counts by status and level, the front and the top points (JSON-ready)."""
    bounded = int(np.sum(table["level"] != "none"))
    exact = int(np.sum(table["level"] == "exact"))
    return {
        "points": grid.size,
        "status": dict(sorted(Counter(table["status"].tolist()).items())),
        "level": dict(sorted(Counter(table["level"].tolist()).items())),
        "evaluated_exactly": exact,
        "exact_share_of_bounded": exact / bounded if bounded else 0.0,
        "objectives": list(objectives),
        "front": [point_row(table, grid, i, objectives) for i in found.front],
        "top": {name: [point_row(table, grid, i, objectives) for i in points]
                for name, points in found.top.items()},
    }


def best_lines(summary: dict) -> list[str]:
    """One line per objective naming its best points, best first."""
    lines = []
    for name, rows in summary["top"].items():
        if rows:
            points = ", ".join(f"{r['point']} ({r[name]:.6g})" for r in rows)
            lines.append(f"best by {name}: {points}")
    return lines


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value
