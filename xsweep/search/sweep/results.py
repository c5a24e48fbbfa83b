"""A finished sweep's answer: the per-point table as an xarray Dataset over the swept axes,
its Pareto front and the top points of each objective."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from xsweep.search.evaluation import METRICS, exact_feasible
from xsweep.search.pareto import non_dominated, objective_matrix, top_points
from xsweep.search.space.grid import Grid
from xsweep.search.table import Table


@dataclass(frozen=True)
class Answer:
    """Points (grid indices) on the Pareto front, by the first objective, and the best
    ``top`` points of each objective, best first."""

    front: np.ndarray
    top: dict[str, np.ndarray]


def answer(table: Table, objectives: list[str], top: int) -> Answer:
    """The front and top points among the exactly evaluated feasible points."""
    values = objective_matrix(table, objectives)
    values[~exact_feasible(table)] = np.nan
    front = np.flatnonzero(non_dominated(values))
    front = front[np.lexsort((front, *values[front].T[::-1]))]
    return Answer(front, {name: top_points(values[:, j], top)
                          for j, name in enumerate(objectives)})


def to_dataset(grid: Grid, table: Table, attrs: dict) -> xr.Dataset:
    """The table (rows = points 0..n-1 in order) as a Dataset whose dimensions are the
    swept axes, with their values as coordinates; single-value axes are scalar
    coordinates, and ``point`` gives each point's grid index."""
    singletons = tuple(i for i, n in enumerate(grid.shape) if n == 1)
    dims = grid.dims
    data = {}
    first = ("point", "feasible", "status", "level", "reason", *METRICS)
    for name in sorted(table, key=lambda n: (first.index(n) if n in first else len(first), n)):
        data[name] = (dims, table[name].reshape(grid.shape).squeeze(axis=singletons))
    coords = {path: _coord(grid.axes[path]) for path in dims}
    coords |= {path: np.array(value, dtype=object) if isinstance(value, str) else value
               for path, value in grid.fixed.items()}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _coord(values: list) -> np.ndarray:
    return np.array(values, dtype=object) if isinstance(values[0], str) else np.array(values)

