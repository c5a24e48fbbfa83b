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

The bound reads a different form, a :class:`~xsweep.kernels.types.BlockedProgram`:
:func:`block_layout` computes each program's contention-free durations and cuts
its DAG into blocks of tasks that do not depend on each other (once per program
object), and :func:`encode_blocks` pads a batch of layouts to one
:class:`BlockShape` (tasks and blocks on the 1, 2, 3, 4, 6, ... ladder).
"""

from __future__ import annotations

import functools
import heapq
import weakref
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from xsweep.kernels.types import BlockedProgram, ProgramArrays
from xsweep.metrics import MetricIndex
from xsweep.plan.program import Program, TaskKind

#: Most predecessors one node of the bound's block layout gathers; a task with more
#: waits on max nodes (measured plans: most tasks have at most 8, a few barriers and
#: optimizer steps dozens).
MAX_PREDS = 8


class Shape(NamedTuple):
    """Array sizes of one encoded batch (per variant)."""

    tasks: int
    edges: int
    flows: int
    hops: int
    links: int


class BlockShape(NamedTuple):
    """Array sizes of one batch of block layouts (per variant)."""

    tasks: int
    blocks: int
    width: int  # slots per block
    preds: int  # predecessors per slot


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


def program_shapes(sizes: np.ndarray) -> np.ndarray:
    """Rounded :class:`Shape` of every row of ``sizes`` (from :func:`program_sizes`)."""
    sizes = np.asarray(sizes)
    return ladder(np.asarray(sizes))


def batch_shape(sizes: np.ndarray) -> Shape:
    """Rounded shape that fits every row of ``sizes`` (from :func:`program_sizes`)."""
    largest = sizes.max(axis=0) if len(sizes) else np.zeros(len(Shape._fields), np.int64)
    return Shape(*(int(n) for n in program_shapes(largest)))


def cells(shape: Shape | BlockShape) -> int:
    """Array cells of one encoded variant.

    :class:`Shape`: tasks, edges, flows and their path slots, links;
    :class:`BlockShape`: slots with their predecessors, tasks.
    """
    if isinstance(shape, BlockShape):
        return shape.blocks * shape.width * (1 + shape.preds) + shape.tasks
    return shape.tasks + shape.edges + shape.flows * (1 + shape.hops) + shape.links


def padding_overhead(sizes: np.ndarray, shape: Shape | BlockShape,
                     num_variants: int | None = None) -> float:
    """Padded cells per real cell of the encoded arrays (0 means no padding).

    ``sizes``: rows of the shape's fields. A program's path slots count by its
    longest path, a fair floor.
    """
    real = sum(cells(type(shape)(*row)) for row in sizes.tolist())
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


def _rows_by_object(items: Sequence) -> list[tuple[object, np.ndarray]]:
    """Each distinct object of ``items`` (by identity) and the rows that hold it."""
    rows: dict[int, tuple[object, list[int]]] = {}
    for row, item in enumerate(items):
        rows.setdefault(id(item), (item, []))[1].append(row)
    return [(item, np.array(where)) for item, where in rows.values()]


def pad_metric_index(indices: Sequence[MetricIndex], num_tasks: int, dims: Sequence[int], *,
                     dtype=np.float32, num_variants: int | None = None) -> MetricIndex:
    """Per-program :class:`~xsweep.metrics.MetricIndex` stacked and padded to ``dims``.

    ``dims`` as from :func:`metric_index_dims` (or larger). Padding follows
    ``xsweep.metrics`` (ints -1, floats 0, masks False); ``task_valid`` is widened
    to ``num_tasks``, the kernel's task axis; rows past the programs are empty variants.
    Integers are stored as narrow as they fit (categories in int8, task ids in int16
    below 2**15 tasks): the metrics only compare and gather with them.
    """
    rows = len(indices) if num_variants is None else num_variants
    task_id = np.int16 if num_tasks < 2**15 else np.int32
    sizes = iter(dims)
    groups = _rows_by_object(indices)  # an index shared by several rows is copied once
    padded = []
    for name in MetricIndex._fields:
        first = getattr(indices[0], name)
        shape = (rows, num_tasks) if name == "task_valid" else (
            rows, *(next(sizes) for _ in first.shape))
        kind = first.dtype.kind
        narrow = {"f": dtype, "b": bool, "i": np.int8 if "category" in name else task_id}[kind]
        out = np.full(shape, {"i": -1, "f": 0.0, "b": False}[kind], narrow)
        for ix, where in groups:
            a = getattr(ix, name)
            out[(where, *(slice(0, n) for n in a.shape))] = a
        padded.append(out)
    return MetricIndex(*padded)


def per_program(fn: Callable) -> Callable:
    """``fn(program, *args)``, remembered per program object and arguments.

    Programs are immutable, so what is derived from one stays valid; entries go
    when their program does.
    """
    cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @functools.wraps(fn)
    def cached(program: Program, *args):
        results = cache.setdefault(program, {})
        if args not in results:
            results[args] = fn(program, *args)
        return results[args]

    return cached


def contention_free_durations(program: Program) -> np.ndarray:
    """float64[T]: each task's duration with every flow alone at its path's bottleneck.

    The formula of ``xsweep.kernels.contention_free_durations``, on the program's
    CSR arrays in float64.
    """
    p = program
    out = p.task_duration_s.astype(np.float64)
    if p.num_flows:
        bottleneck = np.minimum.reduceat(p.link_capacity[p.path_links], p.path_ptr[:-1])
        flow_s = p.flow_latency_s + p.flow_bytes / bottleneck
        has_flows = np.diff(p.flow_ptr) > 0  # reduceat needs non-empty groups
        out[has_flows] = np.maximum.reduceat(flow_s, p.flow_ptr[:-1][has_flows])
    return out


class _Nodes(NamedTuple):
    """A program's DAG as the bound's nodes: its tasks (ids 0 to T-1), then max nodes."""

    level: np.ndarray  # int64[N], one more than the predecessors' highest (0 without)
    owner: np.ndarray  # int64[M], the node of each predecessor edge
    col: np.ndarray  # int64[M], the edge's place among its node's predecessors
    pred: np.ndarray  # int64[M], the predecessor node
    most_preds: int  # predecessors of one node at most (D)


def _preds_per_node(program: Program) -> int:
    """D: enough predecessors for 95% of the tasks, on the ladder, at most ``MAX_PREDS``.

    Measured plans: most tasks have one or two, a few barriers and optimizer steps
    dozens; folding those costs a few levels, padding every node to them far more.
    """
    deg = np.diff(program.dep_ptr)
    if deg.max(initial=0) <= 2:
        return max(int(deg.max(initial=1)), 1)
    return min(ladder(max(2, int(np.ceil(np.percentile(deg, 95))))), MAX_PREDS)


@per_program
def _nodes(program: Program) -> _Nodes:
    """The nodes of the bound's layout, at most D predecessors each.

    A task with more predecessors waits on max nodes that fold D of them at a
    time, lowest levels first, so the task's own level grows as little as it can.
    """
    most = _preds_per_node(program)
    num_tasks = program.num_tasks
    deg = np.diff(program.dep_ptr)
    idx = program.dep_idx.tolist()
    level = [0] * num_tasks
    level_of = level.__getitem__
    max_levels: list[int] = []  # of the max nodes, ids num_tasks, num_tasks + 1, ...
    folds: list[tuple[int, list[int]]] = []  # (node, its predecessors) of max nodes, wide tasks
    # a plain Python pass: each level needs its predecessors' (most tasks have one)
    for t, a, d in zip(range(num_tasks), program.dep_ptr.tolist(), deg.tolist(), strict=False):
        if d == 1:
            level[t] = level[idx[a]] + 1
        elif d > most:
            heap = sorted((level[q], q) for q in idx[a: a + d])
            while len(heap) > most:
                folded = [heapq.heappop(heap) for _ in range(most)]
                max_levels.append(folded[-1][0] + 1)
                folds.append((num_tasks + len(max_levels) - 1, [n for _, n in folded]))
                heapq.heappush(heap, (max_levels[-1], folds[-1][0]))
            folds.append((t, [n for _, n in heap]))
            level[t] = max(heap)[0] + 1
        elif d:
            level[t] = max(map(level_of, idx[a: a + d])) + 1
    owner, col = _rows_and_cols(deg)
    plain = deg[owner] <= most
    fold_owner, fold_col = _rows_and_cols(np.array([len(q) for _, q in folds], np.int64))
    fold_node = np.array([n for n, _ in folds], np.int64)[fold_owner]
    fold_pred = np.fromiter((n for _, q in folds for n in q), np.int64, len(fold_owner))
    return _Nodes(np.array(level + max_levels, np.int64),
                  np.concatenate([owner[plain], fold_node]),
                  np.concatenate([col[plain], fold_col]),
                  np.concatenate([program.dep_idx[plain].astype(np.int64), fold_pred]), most)


@per_program
def block_form(program: Program, step_cost: int) -> tuple[int, int, int]:
    """Slots per block, predecessors per slot and blocks of one program's best layout.

    The slots per block (on the ladder) minimise steps * (step_cost + slots * D):
    wider blocks take fewer steps but pad more.

    Args:
      program: the program.
      step_cost: cost of one scan step, in gathered predecessors per variant.
    """
    nodes = _nodes(program)
    level_sizes = np.bincount(nodes.level)
    widths = np.unique(ladder(np.arange(1, int(level_sizes.max(initial=1)) + 1)))
    steps = (-(-level_sizes[None, :] // widths[:, None])).sum(axis=1)
    best = int(np.argmin(steps * (step_cost + widths * nodes.most_preds)))
    return int(widths[best]), nodes.most_preds, int(steps[best])


@per_program
def block_layout(program: Program, width: int) -> BlockedProgram:
    """The bound's form of one program with ``width`` slots per block.

    numpy, unpadded, durations in float64; slots count from 1, 0 is no slot.
    """
    nodes = _nodes(program)
    level = nodes.level
    level_sizes = np.bincount(level)
    level_blocks = -(-level_sizes // width)
    num_blocks = int(level_blocks.sum())
    # slot = 1 + first block of the node's level * width + rank of the node in its level
    rank = np.empty(len(level), np.int64)
    order = np.argsort(level, kind="stable")
    rank[order] = np.arange(len(level)) - (np.cumsum(level_sizes) - level_sizes)[level[order]]
    slot = ((np.cumsum(level_blocks) - level_blocks)[level] * width + rank + 1).astype(np.int32)

    slot_pred = np.zeros((1 + num_blocks * width, nodes.most_preds), np.int32)
    slot_pred[slot[nodes.owner], nodes.col] = slot[nodes.pred]
    task_slot = slot[: program.num_tasks]
    duration_s = np.zeros(1 + num_blocks * width)
    duration_s[task_slot] = contention_free_durations(program)
    return BlockedProgram(slot_pred[1:].reshape(num_blocks, width, nodes.most_preds),
                          duration_s[1:].reshape(num_blocks, width), task_slot)


def block_sizes(programs: Sequence[Program], step_cost: int) -> np.ndarray:
    """int64[N, 4]: each program's layout sizes, at its :func:`block_form`, as a BlockShape."""
    out = np.zeros((len(programs), len(BlockShape._fields)), np.int64)
    for row, p in enumerate(programs):
        width, preds, blocks = block_form(p, step_cost)
        out[row] = (p.num_tasks, blocks, width, preds)
    return out


def block_shapes(sizes: np.ndarray) -> np.ndarray:
    """Rounded :class:`BlockShape` of every row of ``sizes`` (widths are on the ladder)."""
    sizes = np.asarray(sizes)
    return np.stack([ladder(sizes[..., 0]), ladder(sizes[..., 1]), np.maximum(sizes[..., 2], 1),
                     np.maximum(sizes[..., 3], 1)], axis=-1)


def block_work(shapes: np.ndarray, step_cost: int) -> np.ndarray:
    """Work of one variant at each rounded :class:`BlockShape` row: steps and gathers."""
    shapes = np.asarray(shapes)
    blocks, width, preds = shapes[..., 1], shapes[..., 2], shapes[..., 3]
    return blocks * (step_cost + width * preds) + shapes[..., 0]


def encode_blocks(programs: Sequence[Program], shape: BlockShape, *, dtype=np.float32,
                  num_variants: int | None = None) -> BlockedProgram:
    """Stack the block layouts of ``programs``, at ``shape.width``, into one padded batch.

    Padding is zeros (slot 0 is no slot), so the arrays need no filling. Rows past
    the programs (up to ``num_variants``) are empty variants.

    Raises:
      ValueError: a layout does not fit ``shape`` or ``num_variants`` is too small.
    """
    rows = len(programs) if num_variants is None else num_variants
    layouts = [block_layout(p, shape.width) for p in programs]
    T, B, W, D = shape
    sizes = np.array([(b.task_slot.shape[0], *b.slot_pred.shape) for b in layouts],
                     np.int64).reshape(-1, 4)
    if rows < len(programs) or np.any(sizes > np.array(shape)):
        raise ValueError(f"layouts of sizes up to {sizes.max(axis=0).tolist()} do not fit "
                         f"{rows} variants of shape {tuple(shape)}")
    out = BlockedProgram(np.zeros((rows, B, W, D), np.int32), np.zeros((rows, B, W), dtype),
                         np.zeros((rows, T), np.int32))
    for b, where in _rows_by_object(layouts):  # a layout shared by several rows is copied once
        blocks, _, preds = b.slot_pred.shape
        out.slot_pred[where, :blocks, :, :preds] = b.slot_pred
        out.slot_duration_s[where, :blocks] = b.slot_duration_s
        out.task_slot[where, : b.task_slot.shape[0]] = b.task_slot
    return out
