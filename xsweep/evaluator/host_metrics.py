"""The metrics of ``xsweep.timeline`` computed on the host, from the task times a kernel
returned: what a CPU host does instead of compiling them into every kernel.

The kernels' compiled call computes the metrics from task times that never leave the
device, which suits an accelerator. On a CPU the device's memory is the host's, and
the metrics in the call cost more than they save: they made the bound level's
executables several times as large (and as slow to compile and to load from the
kernel store), and their index added its own sizes to the shapes programs share
(``xsweep.evaluator.driver``).

Here they are computed with numpy, for the numeric variants of a structure at once, on
the structure's index without its padding (:class:`HostIndex`, built once per
structure): a stream's tasks are one run of cells, so the per-stream sums and maxima of
:func:`xsweep.timeline.stream_metrics` are ``reduceat`` over the runs, and the last
predecessor is looked for only among the tasks that may have waited for a transfer, a
pass per predecessor. The timeline's own functions, over the padded index, cost about
three times as much (numpy reduces over a last axis of two predecessors slowly, and
pays for every padding cell). The definitions are the timeline's (its module
docstring); the summaries are its very function, :func:`xsweep.timeline.summarize`,
over rows of their own weights. Sums add up in another order than the timeline's, so
values agree to rounding, not bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from xsweep import timeline
from xsweep.evaluator.encode import rows_by_object
from xsweep.metrics import STREAM_METRICS, SUMMARIES, summary_name
from xsweep.plan.program import Category, Program

_SCALARS = ("tokens_per_iteration", "model_flops_per_iteration", "peak_flops_per_s")
_COMPUTE = (Category.FORWARD, Category.BACKWARD, Category.OPTIMIZER)
_BEFORE_OPTIMIZER = (Category.FORWARD, Category.BACKWARD, Category.TP)


def metric_names() -> tuple[str, ...]:
    """The scalar metrics besides the iteration time, as the kernels' call names them."""
    return ("tokens_per_s", "mfu",
            *(summary_name(name, how) for name in STREAM_METRICS for how in SUMMARIES))


class HostIndex(NamedTuple):
    """A :class:`~xsweep.timeline.MetricIndex` without its padding. Cells are the stream
    tasks, by stream and then in execution order (C cells; a stream's cells are one run);
    the predecessors are kept only for the R cells that may have waited for a transfer
    (a PP, RESHARD, DP or TP_BESIDE task among their direct predecessors): the others add to no
    exposed figure whichever predecessor finished last."""

    cell_task: np.ndarray  # int64[C]
    cell_stream: np.ndarray  # int64[C]
    compute: np.ndarray  # bool[C]: FORWARD, BACKWARD or OPTIMIZER
    tp: np.ndarray  # bool[C]
    before_optimizer: np.ndarray  # bool[C]: FORWARD, BACKWARD or TP
    first: np.ndarray  # bool[C]: the first task of its stream
    run_first: np.ndarray  # int64[runs]: the first cell of each stream that has cells
    run_stream: np.ndarray  # int64[runs]: that stream
    waiting: np.ndarray  # int64[R]: the cells that may have waited for a transfer
    waiting_first: np.ndarray  # int64[runs]: the first of them on each stream that has any
    waiting_stream: np.ndarray  # int64[runs]: that stream
    preds: np.ndarray  # int64[D, R]: their direct predecessors ascending, -1 past the last
    pred_category: np.ndarray  # int64[D, R]: their Category, -1 past the last
    pred_head: np.ndarray  # int64[D, R]: first phase of their transfer, 0 past the last
    optimizer: np.ndarray  # int64[S]: first OPTIMIZER task of each stream, -1 none
    barriers: np.ndarray  # int64[S, B]: BARRIER tasks each stream feeds, -1 pad
    after_optimizer: np.ndarray  # int64[S, A]: DP tasks right after its optimizer, -1 pad
    stream_weight: np.ndarray  # float64[S]: ranks of each stream (0: no stream)
    num_tasks: int


_TRANSFERS = (Category.PP, Category.RESHARD, Category.DP, Category.TP_BESIDE)


def _among(category: np.ndarray, kinds: tuple) -> np.ndarray:
    """``category`` is one of ``kinds`` (``np.isin`` sorts: slower on arrays this size)."""
    out = category == kinds[0]
    for kind in kinds[1:]:
        out |= category == kind
    return out


def host_index(index: timeline.MetricIndex) -> HostIndex:
    """The cells and the waiting cells' predecessors of ``index`` (once per structure)."""
    tasks = index.stream_tasks
    stream, place = np.nonzero(tasks >= 0)  # row-major: by stream, then in order
    category = index.stream_task_category[stream, place]
    pred_category = index.stream_pred_category[stream, place]  # [C, D]
    waiting = np.flatnonzero(_among(pred_category, _TRANSFERS).any(axis=1))
    preds = index.stream_task_preds[stream, place][waiting]
    depth = max(int((preds >= 0).sum(axis=1).max(initial=0)), 1)
    first = place == 0
    waiting_stream = stream[waiting]
    waiting_first = np.flatnonzero(np.r_[True, waiting_stream[1:] != waiting_stream[:-1]]
                                   ) if waiting.size else waiting
    return HostIndex(
        cell_task=tasks[stream, place].astype(np.int64),
        cell_stream=stream.astype(np.int64),
        compute=_among(category, _COMPUTE),
        tp=category == Category.TP,
        before_optimizer=_among(category, _BEFORE_OPTIMIZER),
        first=first,
        run_first=np.flatnonzero(first),
        run_stream=stream[first].astype(np.int64),
        waiting=waiting,
        waiting_first=waiting_first,
        waiting_stream=waiting_stream[waiting_first].astype(np.int64),
        preds=np.ascontiguousarray(preds[:, :depth].T, np.int64),
        pred_category=np.ascontiguousarray(pred_category[waiting][:, :depth].T, np.int64),
        pred_head=np.ascontiguousarray(np.maximum(
            index.stream_pred_head[stream, place][waiting][:, :depth].T, 0), np.int64),
        optimizer=index.stream_optimizer.astype(np.int64),
        barriers=index.stream_barriers.astype(np.int64),
        after_optimizer=index.stream_after_optimizer.astype(np.int64),
        stream_weight=np.asarray(index.stream_weight, np.float64),
        num_tasks=int(index.task_valid.sum()),
    )


def _per_stream(index: HostIndex, values: np.ndarray, rows: int, first: np.ndarray | None = None,
                stream: np.ndarray | None = None) -> np.ndarray:
    """[rows, S] sums of ``values`` [rows, C] over each stream's run of cells (or of the
    runs that start at ``first``, of streams ``stream``)."""
    first = index.run_first if first is None else first
    out = np.zeros((rows, len(index.stream_weight)))
    if first.size:
        out[:, index.run_stream if stream is None else stream] = np.add.reduceat(
            values, first, axis=1)
    return out


def _gathered_max(times: np.ndarray, tasks: np.ndarray) -> np.ndarray:
    """[rows, S] largest time of each stream's tasks ``tasks`` [S, X] (-1 pad), and 0."""
    return np.max(np.where(tasks >= 0, times[:, np.maximum(tasks, 0)], 0.0), axis=-1,
                  initial=0.0)


def stream_values(index: HostIndex, start: np.ndarray, end: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`xsweep.timeline.stream_metrics` of rows of one structure, [rows, S], from
    their task times [rows, at least the tasks] in float64."""
    rows = start.shape[0]
    t_start = start[:, index.cell_task]
    t_end = end[:, index.cell_task]
    span = t_end - t_start
    busy = _per_stream(index, np.where(index.compute, span, 0.0), rows)
    exposed_tp = _per_stream(index, np.where(index.tp, span, 0.0), rows)
    t0 = np.zeros_like(busy)
    if index.run_first.size:
        t0[:, index.run_stream] = np.maximum.reduceat(
            np.where(index.before_optimizer, t_end, 0.0), index.run_first, axis=1)
    opt = index.optimizer
    t_opt = np.where(opt >= 0, start[:, np.maximum(opt, 0)], t0)

    gap_from = np.empty_like(t_end)
    gap_from[:, 1:] = t_end[:, :-1]
    gap_from[:, index.first] = 0.0
    in_bubble = t_start <= t0[:, index.cell_stream]
    bubble = _per_stream(index, np.where(in_bubble, t_start - gap_from, 0.0), rows)

    # the waiting cells' last-finishing direct predecessor, ties to the lowest task index
    w = index.waiting
    best = np.full((rows, len(w)), -np.inf)
    c_cat = np.full(best.shape, -1, np.int64)
    c_head = np.zeros(best.shape, np.int64)
    for preds, category, head in zip(index.preds, index.pred_category, index.pred_head,
                                     strict=True):
        finish = np.where(preds >= 0, end[:, np.maximum(preds, 0)], -np.inf)
        later = finish > best
        best = np.where(later, finish, best)
        c_cat = np.where(later, category, c_cat)
        c_head = np.where(later, head, c_head)
    waited = t_start[:, w] - np.maximum(gap_from[:, w], np.take_along_axis(start, c_head, 1))
    waited = np.where(in_bubble[:, w], waited, 0.0)
    exposed = {kind: _per_stream(index, np.where(c_cat == kind, waited, 0.0), rows,
                                 index.waiting_first, index.waiting_stream)
               for kind in _TRANSFERS}

    # a wait for TP traffic beside the compute is exposed TP time, not bubble
    bubble = bubble - exposed[Category.TP_BESIDE]
    exposed_tp = exposed_tp + exposed[Category.TP_BESIDE]
    barriers = index.barriers
    has_barrier = barriers[:, 0] >= 0
    release = _gathered_max(end, barriers)
    return timeline.stream_figures(np, busy, exposed_tp, bubble, exposed, has_barrier, release,
                                   t0, t_opt, np.where(opt >= 0, end[:, np.maximum(opt, 0)], t0),
                                   _gathered_max(end, index.after_optimizer))


def host_metrics(programs: Sequence[Program], indices: Sequence[HostIndex],
                 start_s: np.ndarray, end_s: np.ndarray, dtype) -> dict[str, np.ndarray]:
    """Metrics of every program from its task times, as the kernels' call gives them.

    Args:
      programs: the programs, one per row of the times.
      indices: each program's :func:`host_index` (one object per structure: rows that
        share it are laid out together).
      start_s, end_s: task times, [N, at least each program's tasks].
      dtype: the type of the results (the evaluation's); they are computed in float64.

    Returns:
      Each name of ``xsweep.metrics.STREAM_METRICS`` as [N, most streams] (0 past a
      program's streams) and every name of :func:`metric_names` as [N].
    """
    n = len(programs)
    width = max([p.num_streams for p in programs] + [1])
    per_stream = {name: np.zeros((n, width)) for name in STREAM_METRICS}
    weight = np.zeros((n, width))
    iteration = np.zeros(n)
    for index, rows in rows_by_object(indices):
        tasks = index.num_tasks
        start = np.asarray(start_s[rows, :tasks], np.float64)
        end = np.asarray(end_s[rows, :tasks], np.float64)
        iteration[rows] = np.max(end, axis=1, initial=0.0)
        streams = min(len(index.stream_weight), width)
        for name, value in stream_values(index, start, end).items():
            per_stream[name][rows, :streams] = value[:, :streams]
        weight[rows, :streams] = index.stream_weight[:streams]
    per_stream["idle_s"] = iteration[:, None] - per_stream["busy_s"] - per_stream["exposed_tp_s"]
    # the summaries read the iteration time as the largest end of valid tasks: one each
    ends = SimpleNamespace(task_valid=np.ones((n, 1), bool), stream_weight=weight)
    summary = timeline.summarize(np, ends, per_stream, None, iteration[:, None],
                                 *(np.array([getattr(p, name) for p in programs], np.float64)
                                   for name in _SCALARS))
    out = {name: np.where(weight > 0, per_stream[name], 0.0).astype(dtype)
           for name in STREAM_METRICS}
    return out | {name: np.asarray(summary[name], dtype) for name in metric_names()}
