"""The units of a sweep's work, runnable in any process: plan and bound a range of points,
or plan and evaluate a set of points exactly.

Each returns a :data:`Table` (one row per point) and the seconds it spent planning and
evaluating. Points that plan to the same plan under the same pricing are evaluated once
and share the result. Infeasible points get their reason and ``level = "none"``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from xsweep.metrics import RANK_METRICS
from xsweep.search.grid import Grid
from xsweep.search.planner import Built, Planner
from xsweep.search.table import Table, blank, from_rows
from xsweep.spec.catalog import Catalog
from xsweep.spec.sweep import Sweep

#: Work of one ``xsweep.evaluate`` call at most, counted as the sum over the plans'
#: device groups of their micro-batches (a program's tasks grow with it): a call holds
#: every plan's program in memory at once, and one of 512 GPUs takes megabytes.
WORK_PER_CALL = 65536
#: Variables of ``xsweep.evaluate`` that describe its batch, not a point.
BATCH_DIAGNOSTICS = ("padding_overhead",)
#: The memory metric's name, as ``xsweep.evaluate`` reports it.
MEMORY_METRIC = "memory_per_gpu_gb"
#: Metrics every table has, NaN where a point was not evaluated (so a chunk, or a
#: whole sweep, without a buildable point has the same variables as any other).
METRICS = ("iteration_time_s", "tokens_per_s", "mfu",
           *(f"{name}_{summary}" for name in RANK_METRICS for summary in ("mean", "max")),
           MEMORY_METRIC, "capex_usd", "cost_rate_usd_per_hour", "cost_per_run_usd",
           "training_time_s", "paper_tco")


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


def _evaluate(job: Job, indices: np.ndarray, level: str) -> tuple[Table, dict[str, float]]:
    began = time.perf_counter()
    planner = Planner(job.sweep, job.catalog)
    rows = {"point": indices, "level": np.full(len(indices), "none", object),
            "status": np.full(len(indices), "infeasible", object),
            "feasible": np.zeros(len(indices), bool),
            "reason": np.full(len(indices), "", object),
            **{name: np.full(len(indices), np.nan) for name in METRICS}}
    groups: dict[object, dict[bytes, list[int]]] = {}  # cost model -> plan key -> rows
    plans: dict[bytes, object] = {}
    grid = Grid(job.sweep)
    for row, (index, point) in enumerate(zip(indices.tolist(), grid.points(indices),
                                             strict=True)):
        out = planner.plan(point, plan_name(job.sweep, index))
        rows[MEMORY_METRIC][row] = out.memory_per_gpu_gb
        if not isinstance(out, Built):
            rows["reason"][row] = out.reason
            continue
        key = plan_key(out.plan)
        plans.setdefault(key, out.plan)
        groups.setdefault(out.cost, {}).setdefault(key, []).append(row)
    planned = time.perf_counter()
    columns: dict[str, np.ndarray] = {}
    for cost, by_plan in groups.items():
        members = list(by_plan.values())
        ds = _call_evaluate([plans[key] for key in by_plan], level, job, cost)
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
    done = time.perf_counter()
    timings = {"planning_s": planned - began, f"{level}_s": done - planned}
    return from_rows(rows), timings


def _call_evaluate(plans: list, level: str, job: Job, cost):
    """``xsweep.evaluate`` over ``plans``, in calls of at most ``WORK_PER_CALL`` work."""
    import xarray as xr

    from xsweep import evaluate  # JAX loads only where something is evaluated
    from xsweep.compile_cache import enable_compile_cache

    enable_compile_cache()
    parts, begin, work = [], 0, 0
    for i, plan in enumerate(plans):
        work += sum(g.num_micro_batches for g in plan.device_groups)
        if work > WORK_PER_CALL and i > begin:
            parts.append(evaluate(plans[begin:i], level=level, catalog=job.catalog, cost=cost,
                                  dtype=job.dtype))
            begin, work = i, sum(g.num_micro_batches for g in plan.device_groups)
    parts.append(evaluate(plans[begin:], level=level, catalog=job.catalog, cost=cost,
                          dtype=job.dtype))
    return parts[0] if len(parts) == 1 else xr.concat(
        [part.drop_dims("stream", errors="ignore") for part in parts], dim="variant",
        data_vars="all", coords="minimal", compat="override")


def plan_key(plan) -> bytes:
    """The plan's bytes without its name: equal keys, equal results."""
    name, plan.name = plan.name, ""
    key = plan.SerializeToString(deterministic=True)
    plan.name = name
    return key

