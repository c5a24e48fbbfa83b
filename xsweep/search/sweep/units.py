"""The units of a sweep's work, runnable in any process: plan and bound a range of points,
or plan and evaluate a set of points exactly.

Each is called ``unit(session, job, *args)`` by an executor, which passes the session
of the process it runs in (:class:`~xsweep.search.evaluation.Session`), and returns a
:data:`~xsweep.search.table.Table` (one row per point) and the seconds it spent planning
and evaluating.
"""

from __future__ import annotations

import base64
import time

import numpy as np

from xsweep.search.evaluation import PLAN_WIRE, Job, Session, evaluate_points
from xsweep.search.levels import Level
from xsweep.search.space.grid import Walk, grid_of
from xsweep.search.space.planner import plan_name, varies_fast
from xsweep.search.space.screen import columns_of_grid, screen
from xsweep.search.table import Table
from xsweep.spec.sweep import Sweep


def bound_walk(sweep: Sweep) -> Walk:
    """The order the bound phase visits a sweep's points in: points that differ only in
    per-point fields (NICs, pricing, ...) or in numbers of the stack (recompute, ...) side by
    side, so that the numeric variants of one program structure share a chunk, and so a
    process that builds the structure once."""
    return grid_of(sweep).walk(varies_fast)


def bound_chunk(session: Session, job: Job, start: int, stop: int,
                level: Level = Level.BOUND) -> tuple[Table, dict[str, float]]:
    """Plan the points at positions ``start .. stop-1`` of :func:`bound_walk` and evaluate
    the buildable ones at ``level``, the bound level or the closed form (rows in that
    order)."""
    return _evaluate(session, job, bound_walk(job.sweep).points(start, stop), level)


def bound_batch(session: Session, job: Job,
                indices: np.ndarray) -> tuple[Table, dict[str, float]]:
    """Plan ``indices`` again and evaluate them at the bound level (the closed-form tier's
    rounds: lowered only when their closed form could still reach the answer); the exact
    level's kept kernels for such programs load meanwhile, as the exact funnel takes some
    of them next."""
    return _evaluate(session, job, np.asarray(indices), Level.BOUND, "exact")


def exact_batch(session: Session, job: Job,
                indices: np.ndarray) -> tuple[Table, dict[str, float]]:
    """Plan ``indices`` again and evaluate them at the exact level."""
    return _evaluate(session, job, np.asarray(indices), Level.EXACT)


def _evaluate(session: Session, job: Job, indices: np.ndarray, level: Level,
              next_level: str | None = None) -> tuple[Table, dict[str, float]]:
    began = time.perf_counter()
    grid = grid_of(job.sweep)
    screened = screen(job.sweep, job.catalog, columns_of_grid(grid, indices))
    rest = indices[screened.to_plan]
    names = [plan_name(job.sweep, index) for index in rest.tolist()]
    screening = time.perf_counter() - began
    built: dict[int, object] | None = {} if level == Level.EXACT else None
    table, timings = evaluate_points(session, job, indices, grid.points(rest), names, level,
                                     screened=screened, built=built, next_level=next_level)
    if built:  # the answer's plans are among the exact points': written as they are
        wire = np.full(len(indices), "", object)
        for row, plan in built.items():
            wire[row] = base64.b64encode(plan.SerializeToString()).decode("ascii")
        table[PLAN_WIRE] = wire
    timings["planning_s"] += screening
    return table, timings
