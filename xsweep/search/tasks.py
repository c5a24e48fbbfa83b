"""The units of a sweep's work, runnable in any process: plan and bound a range of points,
or plan and evaluate a set of points exactly.

Each returns a :data:`Table` (one row per point) and the seconds it spent planning and
evaluating. Points that plan to the same plan under the same pricing are evaluated once
and share the result. Infeasible points get their reason and ``level = "none"``.

Plans are evaluated by the process's default :class:`~xsweep.evaluator.Evaluator`, kept
from unit to unit, so program structures and compiled kernels are reused; it streams a
call's plans in chunks (and over worker processes where a call is large enough).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from xsweep import metrics
from xsweep.search.grid import Grid
from xsweep.search.planner import Built, Planner
from xsweep.search.table import Table, blank, from_rows
from xsweep.spec.catalog import Catalog
from xsweep.spec.sweep import Sweep

#: Variables of an evaluation that describe its batch, not a point.
BATCH_DIAGNOSTICS = ("padding_overhead",)
#: The metrics every table has (every plan-level figure of the metrics table), NaN (or
#: False for flags) where a point was not evaluated, so a chunk, or a whole sweep,
#: without a buildable point has the same variables as any other.
METRICS = metrics.plan_names()
#: The memory metric, which the planner knows before any evaluation.
MEMORY_METRIC = "memory_per_gpu_gib"


@dataclass(frozen=True)
class Job:
    """What every unit of one sweep needs: sent once to each worker."""

    sweep: Sweep
    catalog: Catalog
    dtype: str = "float32"


def plan_name(sweep: Sweep, index: int) -> str:
    """The name of point ``index``'s plan."""
    return f"{sweep.name}-p{index}"


def bound_chunk(job: Job, start: int, stop: int) -> tuple[Table, dict[str, float]]:
    """Plan points ``start .. stop-1`` and evaluate the buildable ones at the bound level."""
    return _evaluate(job, np.arange(start, stop), "bound")


def exact_batch(job: Job, indices: np.ndarray) -> tuple[Table, dict[str, float]]:
    """Plan ``indices`` again and evaluate them at the exact level."""
    return _evaluate(job, np.asarray(indices), "exact")


def _blank_metrics(n: int) -> dict[str, np.ndarray]:
    return {name: np.zeros(n, bool) if metrics.metric_of(name).unit == "bool"
            else np.full(n, np.nan) for name in METRICS}


def _evaluate(job: Job, indices: np.ndarray, level: str) -> tuple[Table, dict[str, float]]:
    began = time.perf_counter()
    planner = Planner(job.sweep, job.catalog)
    rows = {"point": indices, "level": np.full(len(indices), "none", object),
            "status": np.full(len(indices), "infeasible", object),
            "feasible": np.zeros(len(indices), bool),
            "reason": np.full(len(indices), "", object), **_blank_metrics(len(indices))}
    groups: dict[object, dict[bytes, list[int]]] = {}  # cost model -> plan key -> rows
    plans: dict[bytes, object] = {}
    grid = Grid(job.sweep)
    for row, (index, point) in enumerate(zip(indices.tolist(), grid.points(indices),
                                             strict=True)):
        out = planner.plan(point, plan_name(job.sweep, index))
        rows[MEMORY_METRIC][row] = out.memory_per_gpu_gib
        if not isinstance(out, Built):
            rows["reason"][row] = out.reason
            continue
        key = plan_key(out.plan)
        plans.setdefault(key, out.plan)
        groups.setdefault(out.cost, {}).setdefault(key, []).append(row)
    planned = time.perf_counter()
    timings = {"planning_s": planned - began, f"{level}_s": 0.0}
    columns: dict[str, np.ndarray] = {}
    for cost, by_plan in groups.items():
        members = list(by_plan.values())
        ds = _evaluator().evaluate([plans[key] for key in by_plan], level,
                                   catalog=job.catalog, cost=cost, dtype=job.dtype)
        for stage in ("prepare_s", "kernels_s", "results_s", "compile_s"):
            timings[f"{level}_{stage}"] = timings.get(f"{level}_{stage}", 0.0) + ds.attrs[stage]
        take = np.concatenate([np.full(len(m), i) for i, m in enumerate(members)])
        where = np.concatenate([np.asarray(m) for m in members])
        for name, var in ds.data_vars.items():
            if var.dims != ("variant",) or name in BATCH_DIAGNOSTICS:
                continue  # per-stream detail stays with single-plan evaluation
            values = from_rows({name: var.values})[name][take]
            if name not in columns:
                columns[name] = blank(values, len(indices))
            columns[name][where] = values
        rows["level"][where] = level
    evaluated = rows["level"] == level
    for name, values in columns.items():
        if name in rows:
            rows[name][evaluated] = values[evaluated]
        else:
            rows[name] = values
    timings[f"{level}_s"] = time.perf_counter() - planned
    return from_rows(rows), timings


def _evaluator():
    """This process's default Evaluator (JAX loads only where something is evaluated)."""
    from xsweep.evaluator import default_evaluator

    return default_evaluator()


def plan_key(plan) -> bytes:
    """The plan's bytes without its name: equal keys, equal results."""
    name, plan.name = plan.name, ""
    key = plan.SerializeToString(deterministic=True)
    plan.name = name
    return key
