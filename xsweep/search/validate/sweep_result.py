"""A finished sweep's folder as validation input: its dataset, the sweep it ran (from the
dataset's attributes) and the winners to re-run, each planned again by the sweep's planner.

The planner is deterministic, so the plan of a point is the one the sweep evaluated as
long as the catalog is the same: a folder written with another catalog is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xsweep.errors import InputError
from xsweep.search.dataset import open_sweep_dataset
from xsweep.search.evaluation import PLAN_DIGEST, exact_feasible, plan_ids
from xsweep.search.levels import Level
from xsweep.search.pareto import objective_matrix
from xsweep.search.space.grid import Grid
from xsweep.search.space.planner import Built, Planner, plan_name
from xsweep.search.table import Table, from_rows
from xsweep.search.validate.compare import COMPARED
from xsweep.search.validate.winners import Candidate, merged, pick
from xsweep.spec.catalog import Catalog
from xsweep.spec.sweep import Sweep, Validation, sweep_from_text

DATASET = "sweep.zarr"
#: Dataset attributes the sweep writes and validation needs.
_ATTRS = ("sweep_yaml", "catalog_version")
_COLUMNS = ("point", "level", "status", "feasible")


@dataclass(frozen=True)
class SweepResult:
    """A sweep folder opened for validation."""

    folder: Path
    sweep: Sweep
    catalog: Catalog
    table: Table  # flat columns, row i = point i

    @property
    def validation(self) -> Validation:
        return self.sweep.validation

    @property
    def objectives(self) -> list[str]:
        return list(self.sweep.objectives)

    def candidates(self, top: int) -> list[Candidate]:
        """The winners to re-run (:mod:`xsweep.search.validate.winners`), exact ones first:
        per work group, each distinct plan once (by the dataset's ``plan_digest``; a
        dataset without it by the plans built here), standing for the points of its plan."""
        table, objectives = self.table, self.objectives
        values = objective_matrix(table, objectives)
        bounded = (table["level"] == Level.BOUND) & table["feasible"]
        planner, grid = Planner(self.sweep, self.catalog), Grid(self.sweep)
        groups = grid.group_of(table["point"])
        digests = table.get(PLAN_DIGEST)
        plans = plan_ids(table) if digests is not None else None
        out = []
        for level, eligible in ((Level.EXACT, exact_feasible(table)), (Level.BOUND, bounded)):
            for index, why in pick(values, objectives, eligible, top, groups, plans).items():
                built = planner.plan(grid.point(index), plan_name(self.sweep, index))
                if not isinstance(built, Built):
                    raise InputError(str(self.folder / DATASET), f"point {index}", None,
                                     f"is feasible there but the planner now says: "
                                     f"{built.reason}")
                same = () if plans is None else tuple(
                    int(i) for i in np.flatnonzero(plans == plans[index]) if i != index)
                out.append(Candidate(f"point-{index}", f"point {index}", level, tuple(why),
                                     built.plan, built.cost,
                                     {name: float(table[name][index]) for name in COMPARED},
                                     same))
        return merged(out)


def is_sweep_folder(path: Path) -> bool:
    return (path / DATASET).is_dir()


def open_sweep_result(folder: Path, catalog: Catalog) -> SweepResult:
    """Open the sweep in ``folder``, checking that it was run with ``catalog``.

    Raises:
      InputError: the dataset cannot be read or lacks what a sweep writes, or another
        catalog made it.
    """
    store = folder / DATASET
    ds = open_sweep_dataset(store, catalog, (*_COLUMNS, *COMPARED), _ATTRS)
    sweep = sweep_from_text(ds.attrs["sweep_yaml"], f"{store} (attribute sweep_yaml)", catalog)
    points = ds["point"].values.ravel()
    order = np.argsort(points)
    if not np.array_equal(points[order], np.arange(Grid(sweep).size)):
        raise InputError(str(store), "point", None, "does not cover the sweep's grid")
    optional = (PLAN_DIGEST,) if PLAN_DIGEST in ds.data_vars else ()  # older datasets lack it
    try:  # the dataset's names of statuses and levels back to codes
        table = from_rows({name: ds[name].values.ravel()[order] for name in
                           dict.fromkeys((*_COLUMNS, *COMPARED, *sweep.objectives, *optional))})
    except ValueError as error:
        raise InputError(str(store), None, None, f"holds {error}") from None
    return SweepResult(folder, sweep, catalog, table)
