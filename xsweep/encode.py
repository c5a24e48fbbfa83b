"""Program IR -> padded arrays for the kernels, a batch of programs at a time.

Programs of one batch share one shape ``(T, E, F, P, L)``: tasks, dependency
edges, flows, links per path, links. Sizes are rounded up so that batches of
similar programs repeat shapes and reuse compiled kernels: tasks and edges, which
set the cost of every event step and of the bound's scan, to 1, 2, 3, 4, 6, 8, 12,
16, 24, ...; flows, path lengths and links, which the kernels touch only when a
flow starts, to powers of two. Encoding is vectorised over the whole batch (one
concatenation per field, then scatters), so it costs microseconds per program.
Padding follows the convention of ``xsweep.kernels.types``: padded tasks are
zero-duration compute tasks without predecessors, padded flows belong to no task,
padded links carry nothing, and a padded variant (a row past the real programs)
is a program of padded tasks only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from xsweep.kernels.types import ProgramArrays
from xsweep.metrics import MetricIndex
from xsweep.plan.program import Program, TaskKind


class Shape(NamedTuple):
    """Array sizes of one encoded batch (per variant)."""

    tasks: int
    edges: int
    flows: int
    hops: int
    links: int


def program_sizes(programs: Sequence[Program]) -> np.ndarray:
    """int64[N, 5]: each program's sizes in the order of :class:`Shape` (hops: longest path)."""
    out = np.zeros((len(programs), len(Shape._fields)), np.int64)
    if not programs:
        return out
    out[:, 0] = [p.num_tasks for p in programs]
    out[:, 1] = [int(p.dep_ptr[-1]) for p in programs]
    out[:, 2] = [p.num_flows for p in programs]
    out[:, 4] = [p.num_links for p in programs]
    # longest path of each program: one max-reduction over all programs' path lengths
    lengths = _ptr_counts([p.path_ptr for p in programs])
    has = out[:, 2] > 0  # reduceat needs non-empty groups
    if has.any():
        out[has, 3] = np.maximum.reduceat(lengths, (np.cumsum(out[:, 2]) - out[:, 2])[has])
    return out


def predicted_size(sizes: np.ndarray) -> np.ndarray:
    """Tasks + flows of each row of ``sizes``: predicts the number of events well."""
    return sizes[:, 0] + sizes[:, 2]


def power_of_two(n):
    """Smallest power of two >= n (and >= 1); works on ints and integer arrays."""
    n = np.maximum(np.asarray(n, np.int64), 1)
    out = np.left_shift(1, np.ceil(np.log2(n)).astype(np.int64))
    return int(out) if out.ndim == 0 else out


def ladder(n):
    """Smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (2^k and 1.5 * 2^k) that is >= n.

    Works on ints and integer arrays.
    """
    power = np.asarray(power_of_two(n))
    three_quarters = power * 3 // 4
    out = np.where((three_quarters >= np.asarray(n)) & (three_quarters >= 1), three_quarters,
                   power)
    return int(out) if out.ndim == 0 else out


def batch_shape(sizes: np.ndarray) -> Shape:
    """Rounded shape that fits every row of ``sizes`` (from :func:`program_sizes`)."""
    largest = Shape(*(int(n) for n in (sizes.max(axis=0) if len(sizes) else [0] * 5)))
    return Shape(ladder(largest.tasks), ladder(largest.edges), power_of_two(largest.flows),
                 power_of_two(largest.hops), power_of_two(largest.links))


def cells(shape: Shape) -> int:
    """Array cells of one encoded variant: tasks, edges, flows and their path slots, links."""
    return shape.tasks + shape.edges + shape.flows * (1 + shape.hops) + shape.links


def padding_overhead(sizes: np.ndarray, shape: Shape, num_variants: int | None = None) -> float:
    """Padded cells per real cell of the encoded arrays (0 means no padding).

    A program's path slots count by its longest path, a fair floor.
    """
    real = sum(cells(Shape(*row)) for row in sizes.tolist())
    rows = len(sizes) if num_variants is None else num_variants
    return float(rows * cells(shape) / max(real, 1) - 1.0)


def _rows_and_cols(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For items grouped ``counts[i]`` per owner: each item's owner and index in its group."""
    owner = np.repeat(np.arange(len(counts)), counts)
    first = np.cumsum(counts) - counts
    return owner, np.arange(int(counts.sum())) - first[owner]


def _ptr_counts(ptrs: list[np.ndarray]) -> np.ndarray:
    """Concatenated ``diff`` of many CSR pointer arrays, in one vectorised pass."""
    if not ptrs:
        return np.zeros(0, np.int64)
    joined = np.concatenate(ptrs).astype(np.int64)
    keep = np.ones(len(joined) - 1, bool)
    keep[np.cumsum([len(p) for p in ptrs])[:-1] - 1] = False  # diffs across program borders
    return np.diff(joined)[keep]


def encode(programs: Sequence[Program], shape: Shape | None = None, *,
           dtype=np.float32, num_variants: int | None = None) -> ProgramArrays:
    """Stack ``programs`` into one :class:`ProgramArrays` of numpy arrays.

    Args:
      programs: the programs, in the order of the variant axis.
      shape: per-variant sizes; default: :func:`batch_shape` of the programs.
      dtype: float type of times, bytes and capacities.
      num_variants: rows of the variant axis (default ``len(programs)``); rows past
        the programs are empty padded variants.

    Raises:
      ValueError: a program does not fit ``shape`` or ``num_variants`` is too small.
    """
    sizes = program_sizes(programs)
    shape = shape or batch_shape(sizes)
    rows = len(programs) if num_variants is None else num_variants
    if rows < len(programs) or np.any(sizes > np.array(shape)):
        raise ValueError(f"programs of sizes up to {sizes.max(axis=0).tolist()} do not fit "
                         f"{rows} variants of shape {tuple(shape)}")
    T, E, F, P, L = shape
    out = ProgramArrays(
        task_valid=np.zeros((rows, T), bool), task_is_comm=np.zeros((rows, T), bool),
        task_duration_s=np.zeros((rows, T), dtype),
        dep_task=np.full((rows, E), -1, np.int32), dep_pred=np.full((rows, E), -1, np.int32),
        flow_task=np.full((rows, F), -1, np.int32), flow_bytes=np.zeros((rows, F), dtype),
        flow_latency_s=np.zeros((rows, F), dtype), flow_path=np.full((rows, F, P), -1, np.int32),
        link_capacity=np.ones((rows, L), dtype))
    if not programs:
        return out

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in programs])

    task_row, task_col = _rows_and_cols(sizes[:, 0])
    out.task_valid[task_row, task_col] = True
    out.task_is_comm[task_row, task_col] = cat("task_kind") == TaskKind.COMM
    out.task_duration_s[task_row, task_col] = cat("task_duration_s")
    dep_owner, _ = _rows_and_cols(_ptr_counts([p.dep_ptr for p in programs]))
    edge_row, edge_col = _rows_and_cols(sizes[:, 1])
    out.dep_task[edge_row, edge_col] = task_col[dep_owner]
    out.dep_pred[edge_row, edge_col] = cat("dep_idx")

    flow_row, flow_col = _rows_and_cols(sizes[:, 2])
    flow_owner, _ = _rows_and_cols(_ptr_counts([p.flow_ptr for p in programs]))
    out.flow_task[flow_row, flow_col] = task_col[flow_owner]
    out.flow_bytes[flow_row, flow_col] = cat("flow_bytes")
    out.flow_latency_s[flow_row, flow_col] = cat("flow_latency_s")
    hop_owner, hop_slot = _rows_and_cols(_ptr_counts([p.path_ptr for p in programs]))
    out.flow_path[flow_row[hop_owner], flow_col[hop_owner], hop_slot] = cat("path_links")

    link_row, link_col = _rows_and_cols(sizes[:, 4])
    out.link_capacity[link_row, link_col] = cat("link_capacity")
    return out


def metric_index_dims(indices: Sequence[MetricIndex]) -> tuple[int, ...]:
    """Rounded sizes that fit every index, all fields but ``task_valid`` in a row."""
    dims = []
    for name in MetricIndex._fields:
        if name != "task_valid":
            shapes = np.array([getattr(ix, name).shape for ix in indices])
            dims += [ladder(int(n)) for n in shapes.max(axis=0)]
    return tuple(dims)


def pad_metric_index(indices: Sequence[MetricIndex], num_tasks: int, dims: Sequence[int], *,
                     dtype=np.float32, num_variants: int | None = None) -> MetricIndex:
    """Per-program :class:`~xsweep.metrics.MetricIndex` stacked and padded to ``dims``.

    ``dims`` as from :func:`metric_index_dims` (or larger). Padding follows
    ``xsweep.metrics`` (ints -1, floats 0, masks False); ``task_valid`` is widened
    to ``num_tasks``, the kernel's task axis; rows past the programs are empty variants.
    """
    rows = len(indices) if num_variants is None else num_variants
    sizes = iter(dims)
    padded = []
    for name in MetricIndex._fields:
        first = getattr(indices[0], name)
        shape = (rows, num_tasks) if name == "task_valid" else (
            rows, *(next(sizes) for _ in first.shape))
        kind = first.dtype.kind
        out = np.full(shape, {"i": -1, "f": 0.0, "b": False}[kind],
                      dtype if kind == "f" else first.dtype)
        for row, ix in enumerate(indices):
            a = getattr(ix, name)
            out[(row, *(slice(0, n) for n in a.shape))] = a
        padded.append(out)
    return MetricIndex(*padded)
