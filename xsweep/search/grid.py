"""The grid of a sweep: every combination of its axes, numbered in row-major order.

A point's index is its position in the Cartesian product of ``Sweep.axes()`` taken in
schema order with the last axis varying fastest, so index ranges are the natural
chunks of work and the result dataset is the flat table reshaped to the axes' lengths.
Axes with one value are kept in the numbering (their index is always 0) but are not
dimensions of the dataset.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from xsweep.errors import InputError
from xsweep.spec.sweep import Sweep

Point = dict[str, object]  # axis path -> value

#: Most points a grid sweep takes: its per-point table (a few dozen float64 columns)
#: stays within a few GB of memory.
MAX_GRID_POINTS = 10_000_000


def check_grid_size(sweep: Sweep, file: str) -> None:
    """Refuse a sweep whose grid (ranges expanded) is too large to evaluate point by point."""
    size = sweep.grid_size()
    if size > MAX_GRID_POINTS:
        raise InputError(file, None, None, f"the grid has {size:,} points, more than a grid "
                         f"sweep takes ({MAX_GRID_POINTS:,}); narrow its ranges and lists, "
                         "or search it with `xsweep optimize`")


class Grid:
    """The points of one sweep: ``point(i)`` for ``0 <= i < size``."""

    def __init__(self, sweep: Sweep):
        self.axes: dict[str, list] = sweep.axes()
        self.paths: tuple[str, ...] = tuple(self.axes)
        self.shape: tuple[int, ...] = tuple(len(v) for v in self.axes.values())
        self.size: int = math.prod(self.shape)

    @property
    def dims(self) -> tuple[str, ...]:
        """The swept axes (more than one value): the dataset's dimensions, in order."""
        return tuple(p for p, n in zip(self.paths, self.shape, strict=True) if n > 1)

    @property
    def fixed(self) -> dict[str, object]:
        """The single-value axes and their value."""
        return {p: v[0] for p, v in self.axes.items() if len(v) == 1}

    def point(self, index: int) -> Point:
        """The axis values of point ``index``."""
        return next(self.points(np.array([index])))

    def points(self, indices: np.ndarray) -> Iterator[Point]:
        """The axis values of each of ``indices``, in order."""
        if not len(indices):
            return
        if np.min(indices) < 0 or np.max(indices) >= self.size:
            raise IndexError(f"point index outside 0..{self.size - 1}")
        columns = np.unravel_index(np.asarray(indices), self.shape)
        values = [[axis[i] for i in column.tolist()]
                  for axis, column in zip(self.axes.values(), columns, strict=True)]
        for row in zip(*values, strict=True):
            yield dict(zip(self.paths, row, strict=True))

    def chunks(self, chunk_size: int) -> list[tuple[int, int]]:
        """``[start, stop)`` ranges of at most ``chunk_size`` points covering the grid."""
        return [(start, min(start + chunk_size, self.size))
                for start in range(0, self.size, chunk_size)]
