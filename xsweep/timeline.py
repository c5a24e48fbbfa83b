"""Timeline metrics of one iteration, per stream and summarised, from task start and end times.

Written once as array code over an array namespace ``xp`` (``numpy`` or
``jax.numpy``): the exact simulator calls it with numpy on its own times, and the
batched evaluator calls the very same functions under ``jit``/``vmap`` on its
times. Only fixed-shape gathers, masks and reductions over fixed axes are used:
no boolean indexing and no Python branching on values.

The static structure the metrics need is a :class:`MetricIndex`, built once per
program by :func:`metric_index`. Padding convention: index arrays are padded
with ``-1`` (a gather uses index ``max(i, 0)`` and the result is masked by
``i >= 0``), category arrays with ``-1``, weights with ``0`` and validity masks
with ``False``; every axis has length at least 1.

Definitions, per stream ``s`` (every rank of a stream gets its stream's values):

* ``busy_s``: total duration of COMPUTE tasks on ``s``;
* ``exposed_tp_s``: total duration of TP tasks on ``s`` (they block the stream), plus,
  for TP traffic that runs beside the compute (``tp_comm_overlap``: TP_BESIDE tasks off
  the stream), the gaps before a stream task that waited for it (counted as for
  pipeline transfers below, and not in ``bubble_s``): the part of the traffic that
  outlasted the compute;
* ``t0``: largest end of the FORWARD/BACKWARD/TP tasks of ``s`` (0 if none);
  ``t_opt``: start of the first OPTIMIZER task of ``s`` (``t0`` if none);
* ``bubble_s``: idle time of ``s`` before ``t0``, the gaps between consecutive
  stream tasks (and from time 0 to the first) that end at or before ``t0``, less the
  waits for TP traffic beside the compute;
* ``exposed_pp_s`` / ``exposed_reshard_s``: the part of each such gap ``[a, b]``
  before task ``u`` that overlaps the transfer ``u`` waited for: ``u``'s
  last-finishing direct predecessor ``c`` (ties: the lowest task index), when ``c``
  is a PP (RESHARD) task, counted from the start of the transfer's first phase
  ``h``: ``b - max(a, start_h)``; they are parts of ``bubble_s``. A transfer's phases
  are a chain: a task of phase ``> 0`` whose only predecessor has its category
  continues that predecessor's transfer;
* ``straggler_wait_s``: ``max(0, min(release, t_opt) - t0)``, where ``release``
  is the last end of the BARRIER tasks with a direct predecessor on ``s``
  (0 when there is no such barrier);
* ``exposed_dp_s``: the data-parallel communication the stream waits for:
  ``max(0, t_opt - t0 - straggler_wait_s)`` with a barrier; plus the gaps before
  ``t0`` spent on a DP predecessor (parameter all-gathers: FSDP, overlapped ZeRO-1),
  counted as for pipeline transfers (also parts of ``bubble_s``); plus, after the
  optimizer, ``max(0, end - end_opt)`` with ``end`` the last end of the DP tasks that
  directly follow the optimizer (ZeRO-1's parameter all-gather);
* ``idle_s``: ``iteration_time - busy_s - exposed_tp_s``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from xsweep.metrics import STREAM_METRICS, SUMMARIES, summary_name
from xsweep.plan.program import Category, Program
from xsweep.ragged import owners_and_places, padded_rows


class MetricIndex(NamedTuple):
    """Static structure of one program for the metrics (shapes: S streams, K, D, B, T)."""

    stream_tasks: np.ndarray  # int32[S, K]: tasks of each stream in execution order, -1 pad
    stream_task_category: np.ndarray  # int32[S, K]: their Category, -1 pad
    stream_task_preds: np.ndarray  # int32[S, K, D]: their direct predecessors ascending, -1 pad
    stream_pred_category: np.ndarray  # int32[S, K, D]: the predecessors' Category, -1 pad
    stream_pred_head: np.ndarray  # int32[S, K, D]: first phase of each predecessor's transfer
    stream_barriers: np.ndarray  # int32[S, B]: BARRIER tasks fed by the stream, -1 pad
    stream_optimizer: np.ndarray  # int32[S]: first OPTIMIZER task of the stream, -1 none
    stream_after_optimizer: np.ndarray  # int32[S, A]: DP tasks right after it, -1 pad
    stream_weight: np.ndarray  # float64[S]: ranks of the stream (0 for padding streams)
    task_valid: np.ndarray  # bool[T]: False for padding tasks


def metric_index(program: Program) -> MetricIndex:
    """Gather the static structure of ``program`` that the metrics read."""
    p = program
    S = p.num_streams
    category = p.task_category.astype(np.int32)
    # stream tasks in execution order: by stream, then by index
    on_stream = np.flatnonzero(p.task_stream >= 0)
    ordered = on_stream[np.argsort(p.task_stream[on_stream], kind="stable")]
    stream_of = p.task_stream[ordered]
    _, place = owners_and_places(np.bincount(stream_of, minlength=S))
    K = int(place.max(initial=0)) + 1
    tasks = np.full((max(S, 1), K), -1, np.int32)
    tasks[stream_of, place] = ordered
    # their direct predecessors, ascending
    counts = np.diff(p.dep_ptr)[ordered]
    owner, col = owners_and_places(counts)
    preds = p.dep_idx[p.dep_ptr[ordered][owner] + col]
    preds = preds[np.lexsort((preds, owner))]
    task_preds = np.full((max(S, 1), K, max(int(counts.max(initial=0)), 1)), -1, np.int32)
    task_preds[stream_of[owner], place[owner], col] = preds
    barrier_rows = [[] for _ in range(S)]
    for t in np.flatnonzero(category == Category.BARRIER):
        for s in sorted({int(x) for x in p.task_stream[p.deps(int(t))] if x >= 0}):
            barrier_rows[s].append(int(t))
    optimizer = np.full(max(S, 1), -1, np.int32)
    is_opt = category[ordered] == Category.OPTIMIZER
    with_opt, first = np.unique(stream_of[is_opt], return_index=True)
    optimizer[with_opt] = ordered[is_opt][first]
    after_rows = [[] for _ in range(S)]
    owner_of_dep = np.repeat(np.arange(p.num_tasks), np.diff(p.dep_ptr))
    of_optimizer = np.full(p.num_tasks, -1)
    of_optimizer[optimizer[:S][optimizer[:S] >= 0]] = np.flatnonzero(optimizer[:S] >= 0)
    stream_of_dep = of_optimizer[p.dep_idx]
    for t, s in zip(owner_of_dep[stream_of_dep >= 0], stream_of_dep[stream_of_dep >= 0],
                    strict=True):
        if category[t] == Category.DP:
            after_rows[s].append(int(t))
    weight = np.zeros(max(S, 1))
    weight[:S] = np.diff(p.stream_rank_ptr)
    head = transfer_heads(p)
    return MetricIndex(
        stream_tasks=tasks,
        stream_task_category=np.where(tasks >= 0, category[np.maximum(tasks, 0)], -1),
        stream_task_preds=task_preds,
        stream_pred_category=np.where(task_preds >= 0, category[np.maximum(task_preds, 0)], -1),
        stream_pred_head=np.where(task_preds >= 0, head[np.maximum(task_preds, 0)], -1),
        stream_barriers=padded_rows(barrier_rows),
        stream_optimizer=optimizer,
        stream_after_optimizer=padded_rows(after_rows),
        stream_weight=weight,
        task_valid=np.arange(max(p.num_tasks, 1)) < p.num_tasks,
    )


def transfer_heads(program: Program) -> np.ndarray:
    """int32[max(T, 1)]: per task, the first task of the multi-phase transfer it ends (itself
    unless it is a phase ``> 0`` whose only predecessor has its category)."""
    p = program
    parent = np.arange(max(p.num_tasks, 1), dtype=np.int32)
    single = np.flatnonzero((np.diff(p.dep_ptr) == 1) & (p.task_phase > 0))
    pred = p.dep_idx[p.dep_ptr[single]]
    chained = p.task_category[pred] == p.task_category[single]
    parent[single[chained]] = pred[chained]
    while True:  # pointer jumping: the chain's first task in log(phases) rounds
        grand = parent[parent]
        if np.array_equal(grand, parent):
            return parent
        parent = grand


def _take(xp, values, idx):
    """``values[..., idx]`` with -1 padding gathered as element 0 (callers mask it)."""
    return values[..., xp.maximum(idx, 0)]


def _take_each(xp, values, idx):
    """:func:`_take` where each leading row of ``values`` [..., T] has its own ``idx``
    [..., *shape] (indices that came from that row's times)."""
    if values.ndim == 1:
        return _take(xp, values, idx)
    flat = xp.maximum(idx, 0).reshape(*values.shape[:-1], -1)
    return xp.take_along_axis(values, flat, axis=-1).reshape(idx.shape)


def _iteration_time(xp, index: MetricIndex, end):
    return xp.max(xp.where(index.task_valid, end, 0.0), axis=-1)


def stream_metrics(xp, index: MetricIndex, start, end) -> dict:
    """Per-stream metrics (``xsweep.metrics.STREAM_METRICS``, each float[S]) from task
    start/end times [T]; times of several variants of one program at once, [..., T],
    give metrics [..., S]."""
    tasks = index.stream_tasks
    valid = tasks >= 0
    cat = index.stream_task_category
    t_start = xp.where(valid, _take(xp, start, tasks), 0.0)
    t_end = xp.where(valid, _take(xp, end, tasks), 0.0)
    span = t_end - t_start
    is_compute = (cat == Category.FORWARD) | (cat == Category.BACKWARD) | (cat == Category.OPTIMIZER)
    is_tp = cat == Category.TP
    busy = xp.sum(xp.where(is_compute, span, 0.0), axis=-1)
    exposed_tp = xp.sum(xp.where(is_tp, span, 0.0), axis=-1)
    t0 = xp.max(xp.where(is_tp | (cat == Category.FORWARD) | (cat == Category.BACKWARD),
                         t_end, 0.0), axis=-1)
    opt = index.stream_optimizer
    t_opt = xp.where(opt >= 0, _take(xp, start, opt), t0)

    # gaps [a, b] before each stream task: a = previous task's end (0 for the first)
    gap_from = xp.concatenate([xp.zeros_like(t_end[..., :1]), t_end[..., :-1]], axis=-1)
    in_bubble = valid & (t_start <= t0[..., None])
    bubble = xp.sum(xp.where(in_bubble, t_start - gap_from, 0.0), axis=-1)

    preds = index.stream_task_preds
    pred_end = xp.where(preds >= 0, _take(xp, end, preds), -xp.inf)
    last = xp.argmax(pred_end, axis=-1)[..., None]  # first maximum = lowest task index
    # the last predecessor's fields, selected by a mask (elementwise, cheaper than a gather)
    pick = xp.arange(preds.shape[-1]) == last
    c, c_cat, c_head = (xp.sum(xp.where(pick, x, 0), axis=-1) for x in (
        preds, index.stream_pred_category, index.stream_pred_head))
    waited = t_start - xp.maximum(gap_from, _take_each(xp, start, c_head))
    exposed = {kind: xp.sum(xp.where(in_bubble & (c >= 0) & (c_cat == kind), waited, 0.0),
                            axis=-1)
               for kind in (Category.PP, Category.RESHARD, Category.DP, Category.TP_BESIDE)}
    # a wait for TP traffic that ran beside the compute is exposed TP time, not bubble
    bubble = bubble - exposed[Category.TP_BESIDE]
    exposed_tp = exposed_tp + exposed[Category.TP_BESIDE]

    barriers = index.stream_barriers
    has_barrier = barriers[:, 0] >= 0
    release = xp.max(xp.where(barriers >= 0, _take(xp, end, barriers), 0.0), axis=-1)
    after = index.stream_after_optimizer
    gathered = xp.max(xp.where(after >= 0, _take(xp, end, after), 0.0), axis=-1)
    figures = stream_figures(xp, busy, exposed_tp, bubble, exposed, has_barrier, release, t0,
                             t_opt, xp.where(opt >= 0, _take(xp, end, opt), t0), gathered)
    return {"idle_s": _iteration_time(xp, index, end)[..., None] - busy - exposed_tp} | figures


def stream_figures(xp, busy, exposed_tp, bubble, exposed: dict, has_barrier, release, t0,
                   t_opt, opt_end, gathered) -> dict:
    """The per-stream metrics but ``idle_s`` from the stream's sums and times (see the
    module's definitions): the straggler wait and the exposed DP time follow from the
    release of its barriers, ``t0``, the optimizer's start and end, and the end of the
    DP tasks right after the optimizer (``gathered``)."""
    straggler = xp.where(has_barrier, xp.maximum(0.0, xp.minimum(release, t_opt) - t0), 0.0)
    exposed_dp = (xp.where(has_barrier, xp.maximum(0.0, t_opt - t0 - straggler), 0.0)
                  + exposed[Category.DP] + xp.maximum(0.0, gathered - opt_end))
    return {
        "busy_s": busy,
        "bubble_s": bubble,
        "straggler_wait_s": straggler,
        "exposed_tp_s": exposed_tp,
        "exposed_pp_s": exposed[Category.PP],
        "exposed_reshard_s": exposed[Category.RESHARD],
        "exposed_dp_s": exposed_dp,
    }


def summarize(xp, index: MetricIndex, per_stream: dict, start, end, tokens_per_iteration,
              model_flops_per_iteration, peak_flops_per_s) -> dict:
    """Iteration time, tokens/s, MFU, and ``<metric>_mean`` / ``<metric>_max`` over ranks."""
    del start  # the summary needs only end times; kept for a uniform signature
    it = _iteration_time(xp, index, end)
    positive = it > 0
    safe_it = xp.where(positive, it, 1.0)
    safe_peak = xp.where(peak_flops_per_s > 0, peak_flops_per_s, 1.0)
    out = {
        "iteration_time_s": it,
        "tokens_per_s": xp.where(positive, tokens_per_iteration / safe_it, 0.0),
        "mfu": xp.where(positive & (peak_flops_per_s > 0),
                        model_flops_per_iteration / (safe_it * safe_peak), 0.0),
    }
    w = index.stream_weight
    total = xp.maximum(xp.sum(w, axis=-1), 1.0)
    for name in STREAM_METRICS:
        x = per_stream[name]
        summaries = {"mean": xp.sum(w * x, axis=-1) / total,
                     "max": xp.max(xp.where(w > 0, x, 0.0), axis=-1)}
        for how in SUMMARIES:
            out[summary_name(name, how)] = summaries[how]
    return out
