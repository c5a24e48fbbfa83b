"""The grid of a sweep: every combination of its axes, numbered in row-major order.

A point's index is its position in the Cartesian product of ``Sweep.axes()`` taken in
schema order with the last axis varying fastest, so the result dataset is the flat
table reshaped to the axes' lengths. Work may visit the points in another order (a
:class:`Walk`: some axes varying fastest) and cut that order into chunks.
Axes with one value are kept in the numbering (their index is always 0) but are not
dimensions of the dataset.
"""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from xsweep.errors import InputError
from xsweep.metrics import plan_names
from xsweep.spec.sweep import Sweep, check_sweep_limits

Point = dict[str, object]  # axis path -> value

#: Most points a grid sweep takes: its per-point table (a few dozen float64 columns)
#: stays within a few GB of memory.
MAX_GRID_POINTS = 10_000_000


def check_grid(sweep: Sweep, file: str) -> None:
    """Refuse, by arithmetic on the sweep alone, a grid sweep that exceeds a size limit:
    a point over the GPU limit (:func:`xsweep.spec.sweep.check_sweep_limits`) or more
    points than a grid sweep takes (:func:`check_grid_size`)."""
    check_sweep_limits(sweep, file)
    check_grid_size(sweep, file)


def check_grid_size(sweep: Sweep, file: str) -> None:
    """Refuse a sweep whose grid (ranges expanded) is too large to evaluate point by point."""
    size = sweep.grid_size()
    if size > MAX_GRID_POINTS:
        raise InputError(file, None, None, f"the grid has {size:,} points, more than a grid "
                         f"sweep takes ({MAX_GRID_POINTS:,}); narrow its ranges and lists, "
                         "or search it with `xsweep optimize`")


#: Names of a sweep's results that an axis's name must not take (the dataset's variables
#: that are no metric, and the name of a point's work group).
RESERVED_NAMES = frozenset({"point", "feasible", "status", "level", "reason", "plan_digest",
                            "same_plan", "front"})


def axis_names(sweep: Sweep) -> dict[str, str]:
    """Every axis's dotted path -> a name a person can type, a Python identifier: the path's
    last part (``training.schedule`` -> ``schedule``, ``parallelism.pp`` -> ``pp``), with a
    pool's axes named after its GPU (``cluster.pools[0].nodes`` -> ``h100_sxm_nodes``,
    ``parallelism.tp.H100-SXM`` -> ``h100_sxm_tp``). Where two names would be one (or one
    would be a result's name), both spell their whole path (``cluster_pools_0_nodes``)."""
    gpus = [_identifier(pool.gpu) for pool in sweep.cluster.pools]
    names = {}
    for path in sweep.domains():
        pool = re.fullmatch(r"cluster\.pools\[(\d+)\]\.(\w+)", path)
        if pool:
            names[path] = f"{gpus[int(pool.group(1))]}_{pool.group(2)}"
        elif path.startswith("parallelism.tp."):
            index = [p.gpu for p in sweep.cluster.pools].index(path[len("parallelism.tp."):])
            names[path] = f"{gpus[index]}_tp"
        else:
            names[path] = _identifier(path.rsplit(".", 1)[-1])
    taken = list(names.values())
    for path, name in names.items():
        if (taken.count(name) > 1 or name in RESERVED_NAMES or name in plan_names()
                or keyword.iskeyword(name)):
            names[path] = _identifier(path)
    return names


def _identifier(text: str) -> str:
    """``text`` in lower case with every run of other characters than letters and digits
    one ``_``, starting with a letter (``A100-40GB`` -> ``a100_40gb``)."""
    name = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return name if name[:1].isalpha() else f"gpu_{name}" if name else "axis"


def work_values(sweep: Sweep, point: Point) -> tuple:
    """The values of ``point``'s swept work axes (:meth:`Sweep.work_axes`), in order: the
    work group it belongs to, wherever it came from (a grid point, a study's trial)."""
    return tuple(point[path] for path in sweep.work_axes())


class Grid:
    """The points of one sweep: ``point(i)`` for ``0 <= i < size``.

    Its points fall into *work groups*, one per combination of the values of the sweep's
    swept work axes (:meth:`~xsweep.spec.sweep.Sweep.work_axes`: the model, the global
    batch, unless the sweep's ``fronts`` is ``across``), numbered in row-major order of
    those axes; without a swept work axis every point is in group 0. A sweep's answer is
    one Pareto front per group.
    """

    def __init__(self, sweep: Sweep):
        self.axes: dict[str, list] = sweep.axes()
        self.paths: tuple[str, ...] = tuple(self.axes)
        self.shape: tuple[int, ...] = tuple(len(v) for v in self.axes.values())
        self.size: int = math.prod(self.shape)
        self.names: dict[str, str] = axis_names(sweep)  # path -> the dataset's name
        self.work: tuple[str, ...] = sweep.work_axes()  # the swept work axes, in order
        self.groups: int = math.prod(len(self.axes[path]) for path in self.work)

    def group_of(self, indices: np.ndarray) -> np.ndarray:
        """int64[n]: the work group of each point of ``indices``."""
        group = np.zeros(len(indices), np.int64)
        strides = {p: math.prod(self.shape[k + 1:]) for k, p in enumerate(self.paths)}
        for path in self.work:
            n = len(self.axes[path])
            group = group * n + (np.asarray(indices, np.int64) // strides[path]) % n
        return group

    def group_values(self, group: int) -> dict[str, object]:
        """The values of the work axes in work group ``group``, by path."""
        out: dict[str, object] = {}
        for path in reversed(self.work):
            group, k = divmod(group, len(self.axes[path]))
            out[path] = self.axes[path][k]
        return dict(reversed(out.items()))

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

    def walk(self, fastest: Callable[[str], bool]) -> Walk:
        """The points in the order where the axes that ``fastest`` picks vary fastest (each
        group of axes in schema order)."""
        first = [i for i, path in enumerate(self.paths) if not fastest(path)]
        last = [i for i, path in enumerate(self.paths) if fastest(path)]
        return Walk(self.shape, tuple(first + last), math.prod(self.shape[i] for i in last))


_last_grid: tuple[Sweep, Grid] | None = None


def grid_of(sweep: Sweep) -> Grid:
    """``Grid(sweep)``, made once for the sweep object asked for last: a worker's units of
    one sweep (a chunk of its points each) share it instead of expanding the axes again."""
    global _last_grid
    last = _last_grid
    if last is None or last[0] is not sweep:
        last = _last_grid = (sweep, Grid(sweep))
    return last[1]


@dataclass(frozen=True)
class Walk:
    """An order of a grid's points: position ``k`` of the walk is a point index.

    The grid's axes are taken in the order ``axes`` (the last varies fastest), so the
    points that differ only in the fastest axes, ``run`` of them, are neighbours. Work
    cut into ranges of whole runs keeps each run in one range (a sweep's bound phase:
    points that differ in per-point fields only share their program's structure).
    """

    shape: tuple[int, ...]  # the grid's
    axes: tuple[int, ...]  # a permutation of the grid's axes, slowest first
    run: int  # points that differ in the fastest axes only

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def points(self, start: int, stop: int) -> np.ndarray:
        """int64[stop - start]: the point indices at positions ``start .. stop-1``."""
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"positions {start}..{stop} outside 0..{self.size}")
        where = np.unravel_index(np.arange(start, stop), tuple(self.shape[i] for i in self.axes))
        columns = [None] * len(self.shape)
        for axis, column in zip(self.axes, where, strict=True):
            columns[axis] = column
        return np.ravel_multi_index(columns, self.shape).astype(np.int64)

    def chunks(self, chunk_size: int) -> list[tuple[int, int]]:
        """``[start, stop)`` position ranges covering the walk: whole runs of at most
        ``chunk_size`` points each (one run, if a run is larger)."""
        step = max(chunk_size // self.run, 1) * self.run
        return [(start, min(start + step, self.size)) for start in range(0, self.size, step)]
