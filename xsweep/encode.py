"""Program IR -> padded arrays for the kernels, a batch of programs at a time.

Programs of one batch share one shape ``(T, D, E, F, P, L)``: tasks, predecessors
per task, dependencies, flows, links per path, links. Sizes are rounded up to a short ladder
(1, 2, 3, 4, 6, 8, 12, 16, 24, ...) so that batches of similar programs repeat
the same shapes and reuse compiled kernels. Encoding is vectorised over the whole
batch (one concatenation per field, then scatters), so it costs microseconds per
program. Padding follows the convention of ``xsweep.kernels.types``: padded tasks
are zero-duration compute tasks without predecessors, padded flows belong to no
task, padded links carry nothing, and a padded variant (a row past the real
programs) is a program of padded tasks only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from xsweep.kernels.types import ProgramArrays
from xsweep.metrics import MetricIndex, metric_index, stack_metric_indices
from xsweep.plan.program import Program, TaskKind


class Shape(NamedTuple):
    """Array sizes of one encoded batch (per variant)."""

    tasks: int
    preds: int
    edges: int
    flows: int
    hops: int
    links: int


def program_sizes(programs: Sequence[Program]) -> np.ndarray:
    """int64[N, 6]: each program's sizes in the order of :class:`Shape`."""
    out = np.zeros((len(programs), len(Shape._fields)), np.int64)
    if not programs:
        return out
    out[:, 0] = [p.num_tasks for p in programs]
    out[:, 3] = [p.num_flows for p in programs]
    out[:, 5] = [p.num_links for p in programs]
    # widest row of each CSR: one max-reduction over all programs' row lengths
    for column, rows, name in ((1, 0, "dep_ptr"), (4, 3, "path_ptr")):
        counts = _ptr_counts([getattr(p, name) for p in programs])
        starts = np.cumsum(out[:, rows]) - out[:, rows]
        has = out[:, rows] > 0  # reduceat needs non-empty groups
        out[has, column] = np.maximum.reduceat(counts, starts[has]) if has.any() else 0
    out[:, 2] = [int(p.dep_ptr[-1]) for p in programs]
    return out


def predicted_size(sizes: np.ndarray) -> np.ndarray:
    """Tasks + flows of each row of ``sizes``: predicts the number of events well."""
    return sizes[:, Shape._fields.index("tasks")] + sizes[:, Shape._fields.index("flows")]


def ladder(n: int) -> int:
    """Smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (2^k and 1.5 * 2^k) that is >= n."""
    if n <= 2:
        return max(int(n), 1)
    power = 1 << (int(n) - 1).bit_length()  # smallest power of two >= n
    return power * 3 // 4 if power * 3 // 4 >= n else power


def batch_shape(sizes: np.ndarray) -> Shape:
    """Laddered shape that fits every row of ``sizes`` (from :func:`program_sizes`)."""
    largest = sizes.max(axis=0) if len(sizes) else np.zeros(len(Shape._fields), np.int64)
    return Shape(*(ladder(int(n)) for n in largest))


def padding_overhead(sizes: np.ndarray, shape: Shape, num_variants: int | None = None) -> float:
    """Padded cells per real cell of the encoded arrays (0 means no padding).

    Cells: one per task, predecessor slot, edge, flow, path slot and link.
    """
    tasks, preds, edges, flows, hops, links = sizes.astype(float).T
    # real cells: predecessor and path slots counted by their widest row, a fair floor
    real = np.sum(tasks * (1 + preds) + edges + flows * (1 + hops) + links)
    rows = len(sizes) if num_variants is None else num_variants
    allocated = rows * (shape.tasks * (1 + shape.preds) + shape.edges
                        + shape.flows * (1 + shape.hops) + shape.links)
    return float(allocated / max(real, 1.0) - 1.0)


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
    T, D, E, F, P, L = shape
    out = ProgramArrays(
        task_valid=np.zeros((rows, T), bool), task_is_comm=np.zeros((rows, T), bool),
        task_duration_s=np.zeros((rows, T), dtype), task_preds=np.full((rows, T, D), -1, np.int32),
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
    dep_owner, dep_slot = _rows_and_cols(_ptr_counts([p.dep_ptr for p in programs]))
    dep_idx = cat("dep_idx")
    out.task_preds[task_row[dep_owner], task_col[dep_owner], dep_slot] = dep_idx
    edge_row, edge_col = _rows_and_cols(sizes[:, 2])
    out.dep_task[edge_row, edge_col] = task_col[dep_owner]
    out.dep_pred[edge_row, edge_col] = dep_idx

    flow_row, flow_col = _rows_and_cols(sizes[:, 3])
    flow_owner, _ = _rows_and_cols(_ptr_counts([p.flow_ptr for p in programs]))
    out.flow_task[flow_row, flow_col] = task_col[flow_owner]
    out.flow_bytes[flow_row, flow_col] = cat("flow_bytes")
    out.flow_latency_s[flow_row, flow_col] = cat("flow_latency_s")
    hop_owner, hop_slot = _rows_and_cols(_ptr_counts([p.path_ptr for p in programs]))
    out.flow_path[flow_row[hop_owner], flow_col[hop_owner], hop_slot] = cat("path_links")

    link_row, link_col = _rows_and_cols(sizes[:, 5])
    out.link_capacity[link_row, link_col] = cat("link_capacity")
    return out


def encode_metric_index(programs: Sequence[Program], num_tasks: int, *, dtype=np.float32,
                        num_variants: int | None = None) -> MetricIndex:
    """The programs' :class:`~xsweep.metrics.MetricIndex`, stacked at laddered sizes.

    Padding follows ``xsweep.metrics`` (ints -1, floats 0, masks False); ``task_valid``
    is widened to ``num_tasks`` to match the kernel's task axis, and rows past the
    programs are empty variants.
    """
    stacked = stack_metric_indices([metric_index(p) for p in programs])
    rows = len(programs) if num_variants is None else num_variants
    padded = []
    for name, a in zip(MetricIndex._fields, stacked, strict=True):
        shape = (rows, num_tasks) if name == "task_valid" else (
            rows, *(ladder(n) for n in a.shape[1:]))
        kind = a.dtype.kind
        out = np.full(shape, {"i": -1, "f": 0.0, "b": False}[kind],
                      dtype if kind == "f" else a.dtype)
        out[tuple(slice(0, n) for n in a.shape)] = a
        padded.append(out)
    return MetricIndex(*padded)
