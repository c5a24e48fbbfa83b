"""A finished sweep's answer: the per-point table as a dataset over the swept axes,
and, for each work group (one per value of the swept work axes: the model, say), its
Pareto front and the top plans of each objective, each distinct plan once."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xsweep import metrics
from xsweep.search.evaluation import METRICS, PLAN_COLUMNS, PLAN_DIGEST, exact_feasible, plan_ids
from xsweep.search.levels import names as level_names
from xsweep.search.pareto import non_dominated, objective_matrix, top_points
from xsweep.search.space.grid import Grid
from xsweep.search.sweep.zarr_v2 import Arrays, Variable
from xsweep.search.table import CODED, Table


@dataclass(frozen=True)
class Answer:
    """One work group's answer. Each distinct plan stands as one point, the lowest-indexed
    of its exactly evaluated feasible points: ``front`` holds the plans on the Pareto
    front, by the first objective; ``top`` the best ``top`` plans of each objective, best
    first; ``same`` maps each of these points to the other points of the group that build
    the same plan (at whatever level they were evaluated)."""

    group: int
    work: dict[str, object]  # the work axes' values (path -> value); {} for one group
    front: np.ndarray
    top: dict[str, np.ndarray]
    same: dict[int, list[int]]


def answers(table: Table, grid: Grid, objectives: list[str], top: int) -> list[Answer]:
    """Each work group's answer among its exactly evaluated feasible points."""
    values = objective_matrix(table, objectives)
    plans = plan_ids(table)
    groups = grid.group_of(table["point"])
    usable = exact_feasible(table)
    # a plan's point: the first (lowest index) of its exact feasible points
    where = np.flatnonzero(usable)
    _, first = np.unique(plans[where], return_index=True)
    standing = np.zeros(len(values), bool)
    standing[where[first]] = True
    out = []
    for group in range(grid.groups):
        mine = groups == group
        found = np.where((standing & mine)[:, None], values, np.nan)
        front = np.flatnonzero(non_dominated(found))
        front = front[np.lexsort((front, *found[front].T[::-1]))]
        best = {name: top_points(found[:, j], top) for j, name in enumerate(objectives)}
        shown = {int(i) for i in (*front, *(i for b in best.values() for i in b))}
        same = {i: [int(k) for k in np.flatnonzero(mine & (plans == plans[i])) if k != i]
                for i in sorted(shown)}
        out.append(Answer(group, grid.group_values(group), front, best, same))
    return out


#: Units and meaning of the dataset's variables that are not metrics (a metric's come from
#: the metrics table, :mod:`xsweep.metrics`). Text has no unit (``""``).
VARIABLES = {
    "point": ("1", "index of the point in the sweep's grid (row-major over Sweep.axes()); "
                   "`xsweep sweep SPACE.yaml --emit-plan INDEX` prints its plan"),
    "feasible": ("bool", "the point has a plan that fits in GPU memory and its evaluation "
                         "converged"),
    "status": ("", "ok, pruned (the values of the level it stopped at kept: lower bounds on "
                   "times), infeasible, not_converged or overflow"),
    "level": ("", "the level of the point's values: exact, bound, closed_form (a lower bound "
                  "on the iteration time by arithmetic on the plan; NaN for metrics without "
                  "one), or none (no plan)"),
    "reason": ("", "why the point is infeasible, one line (empty when it is feasible)"),
    PLAN_DIGEST: ("", "digest of the point's plan (its bytes without its name) and pricing: "
                      "points with equal digests build the same plan and have the same "
                      "results; empty where the point has no plan"),
    "steps": ("1", "events the exact level stepped through (0 at the bound level)"),
    "max_active_flows": ("1", "most flows transferring at once (exact level)"),
    "waterfill_rounds": ("1", "most water-filling rounds one step needed (exact level)"),
}

#: Units and meaning of the axes, by the last part of their path (a pool's axes by theirs).
AXES = {
    "model": ("", "model preset of the catalog"),
    "global_batch_size": ("sequences", "sequences per iteration"),
    "schedule": ("", "pipeline schedule"),
    "resharding": ("", "resharding scheme between stages of different TP degrees"),
    "recompute": ("", "activation recomputation"),
    "sequence_parallel": ("bool", "sequence parallelism"),
    "flash_attention": ("bool", "flash attention"),
    "virtual_pipeline_stages": ("1", "virtual stages per pipeline stage (interleaved 1F1B)"),
    "dp_overlap": ("bool", "data-parallel communication overlapped with the backward pass"),
    "dp_bucket_params": ("parameters", "parameters per gradient bucket (0: Megatron-LM's "
                                       "default)"),
    "zero_stage": ("1", "ZeRO stage (3: FSDP)"),
    "pp_p2p_overlap": ("bool", "pipeline sends beside the compute (false: waited for by the "
                               "sending stage)"),
    "tp_comm_overlap": ("bool", "TP communication overlapped with the GEMMs (needs sequence "
                                "parallelism)"),
    "software": ("", "software profile of the catalog (framework and version)"),
    "fp8_param_gather": ("bool", "parameter all-gathers of the FP8 copies, FP8 weights kept"),
    "moe_dispatcher": ("", "how MoE tokens cross nodes (alltoall, or deepep: once per node, "
                           "passed on over NVLink)"),
    "moe_fp8_dispatch": ("bool", "MoE tokens dispatched in FP8 (the combines in BF16)"),
    "precision": ("", "number format of the blocks' GEMMs (bf16, or fp8 as Transformer "
                      "Engine runs it)"),
    "fabric": ("", "scale-out network topology"),
    "oversubscription": ("1", "oversubscription of the scale-out fabric"),
    "nodes": ("nodes", "nodes of the pool (0 leaves it out)"),
    "gpus_per_node": ("GPUs", "GPUs per node of the pool"),
    "nic": ("", "NIC of the pool's nodes"),
    "tp": ("1", "tensor-parallel degree of the pool"),
    "pp": ("1", "pipeline stages"),
    "cp": ("1", "context-parallel ranks per device group (each holds 1/cp of a sequence)"),
    "ep": ("1", "expert parallelism: ranks each MoE layer's routed experts are split over "
                "(inside TP, over replicas, or under CP over CP ranks)"),
    "micro_batch_size": ("sequences", "sequences per micro-batch"),
    "pipeline_mix": ("", "separate: each replica in one pool; mixed: stages across pools"),
    "layer_split": ("", "how layers are split over stages"),
    "pricing": ("", "capex (amortised purchase and power) or cloud (on-demand price)"),
}


def variable_attrs(name: str) -> dict[str, str]:
    """The ``units`` and ``description`` of a dataset variable that is not an axis."""
    if name in VARIABLES:
        units, description = VARIABLES[name]
    else:
        metric = metrics.metric_of(name)
        units, description = metric.unit, metric.description
    return {"units": units, "description": description}


def axis_attrs(path: str) -> dict[str, str]:
    """The ``units``, ``description`` and dotted ``path`` of an axis's coordinate."""
    if path.startswith("parallelism.tp."):
        part, pool = "tp", f" ({path[len('parallelism.tp.'):]})"
    else:
        part, pool = path.rsplit(".", 1)[-1], ""
    units, description = AXES.get(part, ("", path))
    return {"units": units, "description": description + pool, "path": path}


def to_dataset(grid: Grid, table: Table, attrs: dict):
    """:func:`dataset_arrays` as an ``xarray.Dataset``: the dataset a sweep's store holds."""
    return dataset_arrays(grid, table, attrs).to_xarray()


def dataset_arrays(grid: Grid, table: Table, attrs: dict) -> Arrays:
    """The table (rows = points 0..n-1 in order) as a dataset whose dimensions are the
    swept axes, named so that a person can type them (:attr:`Grid.names`: ``pp``,
    ``h100_sxm_nodes``), with their values as coordinates; single-value axes are scalar
    coordinates, and ``point`` gives each point's grid index. Every variable and
    coordinate carries ``units`` and ``description`` attributes, a coordinate also its
    axis's dotted ``path``; text is stored as fixed-width Unicode, which reads back as
    numpy ``str`` (``<U``), so ``where``, ``astype(str)`` and ``to_dataframe`` work."""
    singletons = tuple(i for i, n in enumerate(grid.shape) if n == 1)
    names = grid.names
    dims = tuple(names[path] for path in grid.dims)
    data = {}
    first = ("point", "feasible", "status", "level", "reason", *METRICS)
    kept = [name for name in table if name not in PLAN_COLUMNS]  # plans go to plans/
    for name in sorted(kept, key=lambda n: (first.index(n) if n in first else len(first), n)):
        values = table[name]
        if name in CODED:  # codes become names here, where the results are written
            values = level_names(values, CODED[name])
        values = values.reshape(grid.shape).squeeze(axis=singletons)
        data[name] = Variable(dims, _text(values), variable_attrs(name))
    coords = {names[path]: Variable((names[path],), _text(np.array(grid.axes[path])),
                                    axis_attrs(path)) for path in grid.dims}
    coords |= {names[path]: Variable((), _text(np.array(value)), axis_attrs(path))
               for path, value in grid.fixed.items()}
    return Arrays(data, coords, attrs | {"axis_paths": {names[path]: path
                                                        for path in grid.paths}})


def _text(values: np.ndarray) -> np.ndarray:
    """Text (object or any string dtype) as fixed-width Unicode; other values unchanged."""
    if values.dtype == object or values.dtype.kind in "UT":
        return values.astype(str)
    return values
