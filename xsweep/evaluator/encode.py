"""Program IR -> the padded arrays of the exact kernel and the metrics, a batch at a time.

Encoding is vectorised over the whole batch (one concatenation per field, then
scatters), so it costs microseconds per program. Padding follows the convention of
``xsweep.kernels.types``: padded tasks are zero-duration compute tasks without
predecessors, padded flows belong to no task, padded links carry nothing, and a
padded variant (a row past the real programs) is a program of padded tasks only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xsweep.evaluator.host import host_full
from xsweep.evaluator.shapes import Shape, batch_shape, power_of_two, program_sizes
from xsweep.kernels.types import ProgramArrays
from xsweep.plan.program import Program, TaskKind
from xsweep.ragged import owners_and_places, ptr_counts
from xsweep.timeline import MetricIndex


def encode(programs: Sequence[Program], shape: Shape | None = None, *,
           dtype=np.float32, num_variants: int | None = None,
           at: np.ndarray | None = None) -> ProgramArrays:
    """Stack ``programs`` into one :class:`ProgramArrays` of numpy arrays.

    Args:
      programs: the programs, in the order of the variant axis.
      shape: per-variant sizes; default: :func:`batch_shape` of the programs.
      dtype: float type of times, bytes and capacities.
      num_variants: rows of the variant axis (default ``len(programs)``); rows past
        the programs are empty padded variants.
      at: the row of each program (distinct; default the first ``len(programs)``): the
        other rows are the padded variants.

    Raises:
      ValueError: a program does not fit ``shape`` or ``num_variants`` is too small.
    """
    sizes = program_sizes(programs)
    shape = shape or batch_shape(sizes)
    rows = len(programs) if num_variants is None else num_variants
    if rows < len(programs) or np.any(sizes > np.array(shape)):
        raise ValueError(f"programs of sizes up to {sizes.max(axis=0).tolist()} do not fit "
                         f"{rows} variants of shape {tuple(shape)}")
    n = len(programs)
    at = np.arange(n) if at is None else np.asarray(at, np.int64)
    T, E, F, P, L = shape
    out = ProgramArrays(
        task_valid=host_full((rows, T), 0, bool), task_is_comm=host_full((rows, T), 0, bool),
        task_duration_s=host_full((rows, T), 0, dtype),
        dep_task=host_full((rows, E), 0, np.int32), dep_pred=host_full((rows, E), 0, np.int32),
        succ_task=host_full((rows, E), 0, np.int32),
        flow_task=host_full((rows, F), 0, np.int32), flow_bytes=host_full((rows, F), 0, dtype),
        flow_latency_s=host_full((rows, F), 0, dtype),
        flow_path=host_full((rows, F, P), 0, np.int32), link_capacity=host_full((rows, L), 0, dtype))
    # the programs' rows padded as ProgramArrays says; the other rows stay zeros (no valid
    # task: the kernels finish them at once), which cost nothing until read
    for array, fill in ((out.dep_task, -1), (out.dep_pred, -1), (out.succ_task, -1),
                        (out.flow_task, -1), (out.flow_path, -1), (out.link_capacity, 1)):
        array[at] = fill
    if not programs:
        return out

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in programs])

    task_owner, task_col = owners_and_places(sizes[:, 0])
    task_row = at[task_owner]
    out.task_valid[task_row, task_col] = True
    out.task_is_comm[task_row, task_col] = cat("task_kind") == TaskKind.COMM
    out.task_duration_s[task_row, task_col] = cat("task_duration_s")
    dep_owner, _ = owners_and_places(ptr_counts([p.dep_ptr for p in programs]))
    edge_owner, edge_col = owners_and_places(sizes[:, 1])
    edge_row = at[edge_owner]
    dep_task, dep_pred = task_col[dep_owner], cat("dep_idx")
    out.dep_task[edge_row, edge_col] = dep_task
    out.dep_pred[edge_row, edge_col] = dep_pred
    # the successor lists the exact kernel walks: each program's edges by predecessor, in
    # one stable sort of the batch (programs stay in their rows); a sort in the kernel
    # would cost its padded size for every variant
    by_pred = np.argsort(edge_owner * (1 << 32) + dep_pred, kind="stable")
    out.succ_task[edge_row, edge_col] = dep_task[by_pred]

    flow_program, flow_col = owners_and_places(sizes[:, 2])
    flow_row = at[flow_program]
    flow_owner, _ = owners_and_places(ptr_counts([p.flow_ptr for p in programs]))
    out.flow_task[flow_row, flow_col] = task_col[flow_owner]
    out.flow_bytes[flow_row, flow_col] = cat("flow_bytes")
    out.flow_latency_s[flow_row, flow_col] = cat("flow_latency_s")
    hop_owner, hop_slot = owners_and_places(ptr_counts([p.path_ptr for p in programs]))
    out.flow_path[flow_row[hop_owner], flow_col[hop_owner], hop_slot] = cat("path_links")

    link_owner, link_col = owners_and_places(sizes[:, 4])
    out.link_capacity[at[link_owner], link_col] = cat("link_capacity")
    return out


def metric_index_dims(indices: Sequence[MetricIndex]) -> tuple[int, ...]:
    """Sizes (powers of two) that fit every index, all fields but ``task_valid`` in a row."""
    dims = []
    for name in MetricIndex._fields:
        if name != "task_valid":
            shapes = np.array([getattr(ix, name).shape for ix in indices])
            dims += [power_of_two(int(n)) for n in shapes.max(axis=0)]
    return tuple(dims)


def rows_by_object(items: Sequence) -> list[tuple[object, np.ndarray]]:
    """Each distinct object of ``items`` (by identity) and the rows that hold it."""
    rows: dict[int, tuple[object, list[int]]] = {}
    for row, item in enumerate(items):
        rows.setdefault(id(item), (item, []))[1].append(row)
    return [(item, np.array(where)) for item, where in rows.values()]


def pad_metric_index(indices: Sequence[MetricIndex], num_tasks: int, dims: Sequence[int], *,
                     dtype=np.float32, num_variants: int | None = None,
                     at: np.ndarray | None = None) -> MetricIndex:
    """Per-program :class:`~xsweep.timeline.MetricIndex` stacked and padded to ``dims``.

    ``dims`` as from :func:`metric_index_dims` (or larger). Padding follows
    ``xsweep.timeline`` (ints -1, floats 0, masks False); ``task_valid`` is widened
    to ``num_tasks``, the kernel's task axis; ``at`` is the row of each index (default the
    first ``len(indices)``), the other rows are empty variants.
    Integers are stored as narrow as they fit (categories in int8, task ids in int16
    below 2**15 tasks): the metrics only compare and gather with them.
    """
    rows = len(indices) if num_variants is None else num_variants
    task_id = np.int16 if num_tasks < 2**15 else np.int32
    sizes = iter(dims)
    groups = rows_by_object(indices)  # an index shared by several rows is copied once
    if at is not None:
        groups = [(ix, np.asarray(at, np.int64)[where]) for ix, where in groups]
    padded = []
    for name in MetricIndex._fields:
        first = getattr(indices[0], name)
        shape = (rows, num_tasks) if name == "task_valid" else (
            rows, *(next(sizes) for _ in first.shape))
        kind = first.dtype.kind
        narrow = {"f": dtype, "b": bool, "i": np.int8 if "category" in name else task_id}[kind]
        out = host_full(shape, {"i": -1, "f": 0.0, "b": False}[kind], narrow)
        for ix, where in groups:
            a = getattr(ix, name)
            out[(where, *(slice(0, n) for n in a.shape))] = a
        padded.append(out)
    return MetricIndex(*padded)
