"""The bound's form of a program: its DAG cut into blocks of independent tasks.

:func:`block_layout` computes each program's contention-free durations and cuts
its DAG into blocks of tasks that do not depend on each other; :func:`encode_blocks`
pads a batch of layouts to one :class:`~xsweep.evaluator.shapes.BlockShape`. What is
derived from one program is kept per program object by the caller
(:class:`~xsweep.evaluator.derived.Derived`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from xsweep.evaluator.encode import rows_by_object
from xsweep.evaluator.host import host_full
from xsweep.evaluator.shapes import BlockShape, ladder
from xsweep.kernels.types import BlockedProgram
from xsweep.plan.program import Program
from xsweep.ragged import owners_and_places

#: Most predecessors one node of the bound's block layout gathers; a task with more
#: waits on max nodes (measured plans: most tasks have at most 8, a few barriers and
#: optimizer steps dozens).
MAX_PREDS = 8


def contention_free_durations(program: Program) -> np.ndarray:
    """float64[T]: each task's duration with every flow alone at its path's bottleneck.

    The formula of ``xsweep.kernels.contention_free_durations``, on the program's
    arrays in float64, once per class of flows that carry the same numbers and once per
    set of classes that tasks share (``Program.flow_classes``).
    """
    return structure_durations([program])[0]


def structure_durations(programs: Sequence[Program]) -> np.ndarray:
    """float64[N, T]: :func:`contention_free_durations` of programs of one structure (the
    numeric variants of one plan shape, which share their tasks, flows and classes of
    flows), in one pass over their stacked numbers."""
    out = np.stack([q.task_duration_s for q in programs]).astype(np.float64)
    if programs[0].num_flows:
        task_set = programs[0].flow_classes().task_set
        has_flows = task_set >= 0
        out[:, has_flows] = _set_durations(programs)[:, task_set[has_flows]]
    return out


def _set_durations(programs: Sequence[Program]) -> np.ndarray:
    """float64[N, sets]: the time of each set of flow classes that tasks share (its slowest
    class, each flow alone at its path's bottleneck), for programs of one structure."""
    n, c = len(programs), programs[0].flow_classes()
    capacity = np.concatenate([np.stack([q.link_capacity for q in programs]),
                               np.full((n, 1), np.inf)], axis=1)
    bottleneck = capacity[:, c.paths].min(axis=2)
    flow_s = (np.stack([q.flow_latency_s[c.flow] for q in programs])
              + np.stack([q.flow_bytes[c.flow] for q in programs]) / bottleneck)
    return np.maximum.reduceat(flow_s[:, c.set_classes], c.set_ptr[:-1], axis=1)


def slot_sources(program: Program, task_slot: np.ndarray, num_slots: int) -> np.ndarray:
    """int64[num_slots]: where the duration of each slot of a layout (``task_slot``, slot 0
    none) comes from, in the row ``[task durations, flow-set durations, 0]`` of a
    program of this structure: a task with flows takes its set's, one without its own."""
    num_tasks = program.num_tasks
    source = np.arange(num_tasks)
    num_sets = 0
    if program.num_flows:
        c = program.flow_classes()
        num_sets = len(c.set_ptr) - 1
        has_flows = c.task_set >= 0
        source[has_flows] = num_tasks + c.task_set[has_flows]
    out = np.full(num_slots, num_tasks + num_sets, np.int64)
    out[task_slot] = source
    return out


class DagNodes(NamedTuple):
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


def dag_nodes(program: Program) -> DagNodes:
    """The nodes of the bound's layout, at most D predecessors each.

    A task with more predecessors waits on max nodes that fold D of them at a
    time, lowest levels first, so the task's own level grows as little as it can.
    """
    most = _preds_per_node(program)
    num_tasks = program.num_tasks
    deg = np.diff(program.dep_ptr)
    # most tasks continue a chain: their one predecessor is the task just before them (a
    # TP task after its compute, the phases of a transfer), one level up. Chains are
    # runs of ids; only the level of each run's first task needs a Python step.
    ids = np.arange(num_tasks)
    single = deg == 1
    chained = np.zeros(num_tasks, bool)
    chained[single] = program.dep_idx[program.dep_ptr[:-1][single]] == ids[single] - 1
    firsts = np.flatnonzero(~chained)
    run = np.cumsum(~chained) - 1
    offset = ids - firsts[run]
    run_of, offset_of = run.tolist(), offset.tolist()
    idx = program.dep_idx.tolist()
    first_level = [0] * len(firsts)

    def level_of(q: int) -> int:
        return first_level[run_of[q]] + offset_of[q]

    max_levels: list[int] = []  # of the max nodes, ids num_tasks, num_tasks + 1, ...
    folds: list[tuple[int, list[int]]] = []  # (node, its predecessors) of max nodes, wide tasks
    # a plain Python pass: each level needs its predecessors' (most tasks have one)
    for r, (t, a, d) in enumerate(zip(firsts.tolist(), program.dep_ptr[firsts].tolist(),
                                      deg[firsts].tolist(), strict=True)):
        if d == 1:
            first_level[r] = level_of(idx[a]) + 1
        elif d > most:
            heap = sorted((level_of(q), q) for q in idx[a: a + d])
            while len(heap) > most:
                folded = [heapq.heappop(heap) for _ in range(most)]
                max_levels.append(folded[-1][0] + 1)
                folds.append((num_tasks + len(max_levels) - 1, [n for _, n in folded]))
                heapq.heappush(heap, (max_levels[-1], folds[-1][0]))
            folds.append((t, [n for _, n in heap]))
            first_level[r] = max(heap)[0] + 1
        elif d:
            first_level[r] = max(map(level_of, idx[a: a + d])) + 1
    level = np.concatenate([np.array(first_level, np.int64)[run] + offset,
                            np.array(max_levels, np.int64)])
    owner, col = owners_and_places(deg)
    plain = deg[owner] <= most
    fold_owner, fold_col = owners_and_places(np.array([len(q) for _, q in folds], np.int64))
    fold_node = np.array([n for n, _ in folds], np.int64)[fold_owner]
    fold_pred = np.fromiter((n for _, q in folds for n in q), np.int64, len(fold_owner))
    return DagNodes(level,
                  np.concatenate([owner[plain], fold_node]),
                  np.concatenate([col[plain], fold_col]),
                  np.concatenate([program.dep_idx[plain].astype(np.int64), fold_pred]), most)


def block_form(program: Program, step_cost: int,
               nodes: DagNodes | None = None) -> tuple[int, int, int]:
    """Slots per block, predecessors per slot and blocks of one program's best layout.

    The slots per block (on the ladder) minimise steps * (step_cost + slots * D):
    wider blocks take fewer steps but pad more.

    Args:
      program: the program.
      step_cost: cost of one scan step, in gathered predecessors per variant.
      nodes: the program's :func:`dag_nodes`, if already known.
    """
    nodes = nodes if nodes is not None else dag_nodes(program)
    level_sizes = np.bincount(nodes.level)
    widths = np.unique(ladder(np.arange(1, int(level_sizes.max(initial=1)) + 1)))
    steps = (-(-level_sizes[None, :] // widths[:, None])).sum(axis=1)
    best = int(np.argmin(steps * (step_cost + widths * nodes.most_preds)))
    return int(widths[best]), nodes.most_preds, int(steps[best])


def block_slots(program: Program, width: int,
                nodes: DagNodes | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The structure of the bound's form with ``width`` slots per block: int32[B, W, D]
    slots of each slot's predecessors, and int32[T] the slot of each task.

    Slots count from 1, 0 is no slot. ``nodes``: the program's :func:`dag_nodes`, if
    already known.
    """
    nodes = nodes if nodes is not None else dag_nodes(program)
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
    return (slot_pred[1:].reshape(num_blocks, width, nodes.most_preds),
            slot[: program.num_tasks])


def block_durations(programs: Sequence[Program], slot_pred: np.ndarray,
                    task_slot: np.ndarray, sources: np.ndarray | None = None) -> np.ndarray:
    """float64[N, B, W]: the contention-free duration of each slot's task (0 elsewhere),
    for programs of one structure laid out as ``slot_pred`` and ``task_slot``
    (``sources``: their :func:`slot_sources`, if already known)."""
    blocks, width, _ = slot_pred.shape
    first = programs[0]
    if sources is None:
        sources = slot_sources(first, task_slot, 1 + blocks * width)
    parts = [np.stack([q.task_duration_s for q in programs]).astype(np.float64, copy=False)]
    if first.num_flows:
        parts.append(_set_durations(programs))
    parts.append(np.zeros((len(programs), 1)))
    # one gather from [tasks, sets, 0]: the same numbers structure_durations places
    return np.concatenate(parts, axis=1)[:, sources[1:]].reshape(len(programs), blocks, width)


def block_layout(program: Program, width: int,
                 nodes: DagNodes | None = None) -> BlockedProgram:
    """The bound's form of one program with ``width`` slots per block (numpy, unpadded,
    durations in float64)."""
    slot_pred, task_slot = block_slots(program, width, nodes)
    return BlockedProgram(slot_pred, block_durations([program], slot_pred, task_slot)[0],
                          task_slot)


def block_sizes(programs: Sequence[Program], forms: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """int64[N, 4]: each program's layout sizes at its :func:`block_form`, as a BlockShape."""
    out = np.zeros((len(programs), len(BlockShape._fields)), np.int64)
    for row, (p, (width, preds, blocks)) in enumerate(zip(programs, forms, strict=True)):
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


def encode_blocks(layouts: Sequence[BlockedProgram], shape: BlockShape, *, dtype=np.float32,
                  num_variants: int | None = None,
                  at: np.ndarray | None = None) -> BlockedProgram:
    """Stack block layouts (all at ``shape.width`` slots per block) into one padded batch.

    Padding is zeros (slot 0 is no slot), so the arrays need no filling. ``at`` is the
    row of each layout (default the first ``len(layouts)``); the other rows, up to
    ``num_variants``, are empty variants.

    Raises:
      ValueError: a layout does not fit ``shape`` or ``num_variants`` is too small.
    """
    rows = len(layouts) if num_variants is None else num_variants
    T, B, W, D = shape
    sizes = np.array([(b.task_slot.shape[0], *b.slot_pred.shape) for b in layouts],
                     np.int64).reshape(-1, 4)
    if rows < len(layouts) or np.any(sizes > np.array(shape)):
        raise ValueError(f"layouts of sizes up to {sizes.max(axis=0).tolist()} do not fit "
                         f"{rows} variants of shape {tuple(shape)}")
    out = BlockedProgram(host_full((rows, B, W, D), 0, np.int32),
                         host_full((rows, B, W), 0, dtype), host_full((rows, T), 0, np.int32))
    at = np.arange(len(layouts)) if at is None else np.asarray(at, np.int64)
    # a structure shared by several rows is copied once; durations row by row
    for slot_pred, where in rows_by_object([b.slot_pred for b in layouts]):
        blocks, _, preds = slot_pred.shape
        out.slot_pred[at[where], :blocks, :, :preds] = slot_pred
        out.task_slot[at[where], : layouts[where[0]].task_slot.shape[0]] = \
            layouts[where[0]].task_slot
    for row, b in zip(at.tolist(), layouts, strict=True):
        out.slot_duration_s[row, : b.slot_duration_s.shape[0]] = b.slot_duration_s
    return out
