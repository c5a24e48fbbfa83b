"""The planner's arithmetic over a chunk of points at once: which points have no plan, and why.

:func:`screen` takes a chunk of a sweep's points as columns (one array of values per
axis: :func:`columns_of_grid`, :func:`columns_of_points`) and applies the rules of
:class:`~xsweep.search.space.planner.Planner` with numpy, in the planner's order: the
TP degree against a node and the heads, stages against layers, the batch against the
micro-batch, interleaving, the replicas the TP groups form, the micro-batches they get,
the GPU limit and, where one pool has nodes, the memory per GPU of every stage (the
arithmetic of :func:`xsweep.plan.memory.memory_breakdown`, operation for operation).

A point the arrays prove infeasible gets the planner's reason, word for word, its kind
(an index into :data:`~xsweep.search.space.planner.REASON_KINDS`) and, for a memory
reason, the planner's memory per GPU. Every other point is left to the per-point
planner: those the arrays find feasible (the planner builds their plan) and those whose
rules are too intricate for them (several pools with nodes, FSDP with uneven replicas,
a device-group or micro-batch limit reached, an unknown schedule, FP8's memory, context
parallelism). The arrays never
call a point infeasible that the planner would build.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from xsweep.plan.memory import (
    ADAM_BYTES_PER_PARAM,
    FSDP_GATHERED_BLOCKS,
    GRAD_BYTES_PER_PARAM,
    LSE_BYTES,
)
from xsweep.plan.workload import BF16_BYTES, MASK_BYTES, block_params, mlp_matrices, tp_shard
from xsweep.search.space.grid import Grid, Point
from xsweep.search.space.planner import REASON_KINDS
from xsweep.spec.catalog import GIB, Catalog
from xsweep.spec.limits import Limits, active_limits
from xsweep.spec.sweep import Sweep

#: The kind code of each reason kind's name (its index in ``REASON_KINDS``).
KIND = {kind.name: code for code, kind in enumerate(REASON_KINDS)}
#: The kind code of a point the arrays leave to the planner.
NO_KIND = -1


@dataclass
class Screened:
    """What the arrays decided for each point of a chunk.

    ``infeasible[i]``: the arrays proved point i has no plan, for ``reason[i]`` (the
    planner's text) of kind ``kind[i]``; ``memory_gib[i]`` is the planner's memory per
    GPU where it knows one (a memory reason), NaN otherwise. The other points go to the
    per-point planner."""

    infeasible: np.ndarray
    reason: np.ndarray
    kind: np.ndarray
    memory_gib: np.ndarray

    @property
    def to_plan(self) -> np.ndarray:
        """int64: the rows the per-point planner still has to plan."""
        return np.flatnonzero(~self.infeasible)


def columns_of_grid(grid: Grid, indices: np.ndarray) -> dict[str, np.ndarray]:
    """The axis values of grid points ``indices``, one array per axis path."""
    where = np.unravel_index(np.asarray(indices, np.int64), grid.shape)
    return {path: _array(values)[column]
            for (path, values), column in zip(grid.axes.items(), where, strict=True)}


def columns_of_points(points: Iterable[Point]) -> dict[str, np.ndarray]:
    """The values of ``points`` (dicts of axis path -> value), one array per path."""
    points = list(points)
    if not points:
        return {}
    return {path: _array([p[path] for p in points]) for path in points[0]}


def _array(values: Sequence) -> np.ndarray:
    out = np.empty(len(values), object)
    out[:] = list(values)
    if all(isinstance(v, (bool, np.bool_)) for v in values):
        return out.astype(bool)
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return out.astype(np.int64)
    return out


class _Verdicts:
    """The verdicts being made: reasons set on rows still open, in rule order."""

    def __init__(self, n: int):
        self.open = np.ones(n, bool)  # no reason yet, not left to the planner
        self.infeasible = np.zeros(n, bool)
        self.reason = np.full(n, "", object)
        self.kind = np.full(n, NO_KIND, np.int8)
        self.memory = np.full(n, np.nan)

    def fail(self, mask: np.ndarray, kind: str, text, *columns: np.ndarray) -> None:
        """Rows of ``mask`` still open get ``text(*values)`` (formatted once per distinct
        tuple of the ``columns``' values) as their reason."""
        rows = np.flatnonzero(mask & self.open)
        if not len(rows):
            return
        if columns:
            distinct, codes = [], []
            for column in columns:
                values, inverse = np.unique(np.asarray(column)[rows], return_inverse=True)
                distinct.append(values)
                codes.append(inverse.reshape(-1))
            keys, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
            texts = np.empty(len(keys), object)
            texts[:] = [text(*(values[k].item() if hasattr(values[k], "item") else values[k]
                               for values, k in zip(distinct, key, strict=True)))
                        for key in keys.tolist()]
            self.reason[rows] = texts[inverse.reshape(-1)]
        else:
            self.reason[rows] = text()
        self.kind[rows] = KIND[kind]
        self.infeasible[rows] = True
        self.open[rows] = False

    def defer(self, mask: np.ndarray) -> None:
        """Rows of ``mask`` go to the per-point planner."""
        self.open &= ~mask


def screen(sweep: Sweep, catalog: Catalog, columns: dict[str, np.ndarray],
           limits: Limits | None = None) -> Screened:
    """The verdicts of the arrays on the points of ``columns`` (see the module docstring)."""
    n = len(next(iter(columns.values()))) if columns else 0
    v = _Verdicts(n)
    if not n:
        return Screened(v.infeasible, v.reason, v.kind, v.memory)
    for model_name in np.unique(columns["model"]):
        rows = columns["model"] == model_name
        v.open = rows.copy()
        _screen_model(sweep, catalog, catalog.model(str(model_name)), columns, v,
                      limits or active_limits())
    return Screened(v.infeasible, v.reason, v.kind, v.memory)


def _col(columns: dict[str, np.ndarray], path: str, n: int, default) -> np.ndarray:
    if path in columns:
        return columns[path]
    return np.full(n, default)


def _screen_model(sweep: Sweep, catalog: Catalog, model, columns, v: _Verdicts,
                  limits: Limits) -> None:
    """The rules for the open points of ``v``, all of ``model``; each ends decided or
    left to the planner."""
    n = len(v.open)
    # experts (and expert parallelism, inside a TP group or across replicas, whose EP
    # groups need replicas of one shape): the planner's rules and memory, point by point
    v.defer(v.open if model.is_moe else (_col(columns, "parallelism.ep", n, 1) != 1))
    pools = sweep.cluster.pools
    nodes = [columns[f"cluster.pools[{i}].nodes"].astype(np.int64) for i in range(len(pools))]
    per_node = [columns[f"cluster.pools[{i}].gpus_per_node"].astype(np.int64)
                for i in range(len(pools))]
    tp = [columns[f"parallelism.tp.{pool.gpu}"].astype(np.int64) for pool in pools]
    active = [k > 0 for k in nodes]
    count = np.sum(active, axis=0)
    v.fail(count == 0, "empty", lambda: "empty cluster: every pool has 0 nodes")
    # context parallelism changes the groups, the work and the memory: its points are the
    # per-point planner's
    v.defer(_col(columns, "parallelism.cp", n, 1).astype(np.int64) > 1)
    heads, layers = model.num_attention_heads, model.num_layers
    # _check: per pool in order, its three TP rules before the next pool's
    for i, pool in enumerate(pools):
        on = active[i]
        v.fail(on & (tp[i] > per_node[i]), "tp_node",
               lambda t, g, name=pool.gpu: f"TP {t} exceeds the {g} GPUs of a {name} node",
               tp[i], per_node[i])
        v.fail(on & (per_node[i] % tp[i] != 0), "tp_node",
               lambda t, g, name=pool.gpu: f"TP {t} does not divide the {g} GPUs of a "
               f"{name} node", tp[i], per_node[i])
        v.fail(on & (tp[i] > heads), "tp_heads",
               lambda t: f"TP {t} exceeds the model's {heads} attention heads", tp[i])
    p = columns["parallelism.pp"].astype(np.int64)
    b = columns["parallelism.micro_batch_size"].astype(np.int64)
    batch = columns["training.global_batch_size"].astype(np.int64)
    virtual = _col(columns, "training.virtual_pipeline_stages", n, 1).astype(np.int64)
    schedule = columns["training.schedule"]
    v.fail(p > layers, "pipeline",
           lambda s: f"{s} pipeline stages but the model has {layers} layers", p)
    v.fail(batch % b != 0, "batch",
           lambda g, m: f"global batch {g} is not a multiple of micro-batch size {m}", batch, b)
    micro = batch // b
    # _check_precision: the first pool with nodes without FP8 tensor cores
    precision = _col(columns, "training.precision", n, "bf16")
    fp8 = precision == "fp8"
    for i, pool in enumerate(pools):
        gpu = catalog.gpu(pool.gpu)
        if not gpu.has_fp8:
            v.fail(fp8 & active[i], "precision",
                   lambda name=pool.gpu, canonical=gpu.name: f"FP8 needs FP8 tensor cores, "
                   f"and pool {name} ({canonical}) has none")
    # _check_tp_overlap
    overlap = _col(columns, "training.tp_comm_overlap", n, False).astype(bool)
    sequence_parallel = _col(columns, "training.sequence_parallel", n, True).astype(bool)
    v.fail(overlap & ~sequence_parallel, "tp_overlap",
           lambda: "TP communication overlap needs sequence parallelism")
    # _check_fp8_gather
    gather = _col(columns, "training.fp8_param_gather", n, False).astype(bool)
    zero = _col(columns, "training.zero_stage", n, 0).astype(np.int64)
    v.fail(gather & (~fp8 | ((zero != 1) & (zero != 3))), "fp8_gather",
           lambda: "FP8 parameter gathers need precision fp8 and zero_stage 1 or 3")
    # _check_interleaving
    inter = virtual != 1
    for name in np.unique(schedule):
        if name != "1f1b":
            v.fail(inter & (schedule == name), "interleaving",
                   lambda k, s=str(name): f"interleaving ({k} virtual stages) needs the 1f1b "
                   f"schedule, not {s}", virtual)
    v.fail(inter & (p < 2), "interleaving",
           lambda k, s: f"interleaving ({k} virtual stages) needs at least two pipeline "
           f"stages, not {s}", virtual, p)
    v.fail(inter & (layers % virtual != 0), "interleaving",
           lambda k: f"interleaving ({k} virtual stages): the model's {layers} layers are "
           f"no multiple of {k}", virtual)
    v.fail(inter & (p * virtual > layers), "interleaving",
           lambda k, s: f"interleaving ({k} virtual stages): {s} stages of {k} virtual stages "
           f"need {s * k} layers, the model has {layers}", virtual, p)
    v.fail(inter & (micro % p != 0), "interleaving",
           lambda k, m, s: f"interleaving ({k} virtual stages): {m} micro-batches are no "
           f"multiple of the {s} stages", virtual, micro, p)
    # _replica_count
    groups = [np.where(active[i], nodes[i] * per_node[i] // np.maximum(tp[i], 1), 0)
              for i in range(len(pools))]
    mix = _col(columns, "parallelism.pipeline_mix", n, "separate")
    separate = mix == "separate"
    replicas = np.zeros(n, np.int64)
    for i, pool in enumerate(pools):
        on = active[i] & separate
        g = groups[i]
        v.fail(on & (g < p), "pipeline",
               lambda c, t, k, q, s, name=pool.gpu: f"pool {name} has {c} TP groups (TP {t} on "
               f"{k} x {q} GPUs), fewer than pp {s}", g, tp[i], nodes[i], per_node[i], p)
        v.fail(on & (g % p != 0), "pipeline",
               lambda c, t, k, q, s, name=pool.gpu: f"pp {s} does not divide the {c} TP groups "
               f"of pool {name} (TP {t} on {k} x {q} GPUs)", g, tp[i], nodes[i], per_node[i], p)
        replicas += np.where(on, g // p, 0)
    mixed = ~separate
    total = np.sum(groups, axis=0)
    v.fail(mixed & (total % p != 0), "pipeline",
           lambda c, s: f"mixed pipelines: {c} TP groups do not form pipelines of {s} stages",
           total, p)
    mixed_replicas = np.maximum(total // p, 1)
    for i, pool in enumerate(pools):
        v.fail(mixed & active[i] & (groups[i] % mixed_replicas != 0), "pipeline",
               lambda c, r, name=pool.gpu: f"mixed pipelines: the {c} TP groups of pool {name} "
               f"do not spread evenly over {r} pipelines", groups[i], mixed_replicas)
    replicas = np.where(separate, replicas, mixed_replicas)
    unit = np.where(virtual > 1, p, 1)
    short = micro // unit < replicas
    v.fail(short & (unit > 1), "batch",
           lambda m, g, c, r, s: f"{m} micro-batches (global batch {g} / micro-batch {c}) cannot "
           f"feed {r} replicas in multiples of the {s} stages", micro, batch, b, replicas, p)
    v.fail(short & (unit == 1), "batch",
           lambda m, g, c, r: f"{m} micro-batches (global batch {g} / micro-batch {c}) cannot "
           f"feed {r} replicas", micro, batch, b, replicas)
    gpus = np.sum([np.where(active[i], nodes[i] * per_node[i], 0) for i in range(len(pools))],
                  axis=0)
    v.fail(gpus > limits.gpus, "size_limit",
           lambda c: f"the cluster's GPU count ({c:,}) exceeds the limit of {limits.gpus:,} "
           f"(set {Limits.env_name('gpus')} to raise it)", gpus)
    # beyond arithmetic: one pool with nodes only, whose stages are split evenly
    zero = _col(columns, "training.zero_stage", n, 0).astype(np.int64)
    chunks = micro // unit
    uneven = chunks % np.maximum(replicas, 1) != 0
    known = np.isin(schedule, ("gpipe", "1f1b"))
    # FP8's memory (weight copies, 1-byte saved inputs) is the planner's to count
    v.defer((count != 1) | ((zero == 3) & uneven) | ~known | fp8
            | (total > limits.device_groups))
    for i, pool in enumerate(pools):
        rows_i = np.flatnonzero(v.open & active[i])
        if len(rows_i):
            _memory(model, catalog.gpu(pool.gpu), columns, rows_i, tp[i][rows_i],
                    replicas[rows_i], v, limits)
    v.defer(v.open)  # feasible so far: the planner builds the plan


def _memory(model, gpu, columns, rows: np.ndarray, tp: np.ndarray, replicas: np.ndarray,
            v: _Verdicts, limits: Limits) -> None:
    """The planner's memory per GPU for single-pool points ``rows`` and their memory reason,
    stage by stage (the largest pipeline of the chunk sets the loop's length)."""
    take = {path: values[rows] for path, values in columns.items()}
    n = len(rows)
    p = take["parallelism.pp"].astype(np.int64)
    b = take["parallelism.micro_batch_size"].astype(np.int64)
    batch = take["training.global_batch_size"].astype(np.int64)
    virtual = _col(take, "training.virtual_pipeline_stages", n, 1).astype(np.int64)
    zero = _col(take, "training.zero_stage", n, 0).astype(np.int64)
    sp = _col(take, "training.sequence_parallel", n, False).astype(bool)
    flash = _col(take, "training.flash_attention", n, False).astype(bool)
    recompute = _col(take, "training.recompute", n, "none")
    gpipe = take["training.schedule"] == "gpipe"
    unit = np.where(virtual > 1, p, 1)
    chunks = batch // b // unit
    q, extra = chunks // replicas, chunks % replicas
    counts = [unit * q, np.where(extra > 0, unit * (q + 1), unit * q)]  # ascending
    over_micro = counts[1] > limits.micro_batches
    # the layers' units (v layers each) split evenly over p stages, the first taking more
    units = model.num_layers // virtual
    per, left = units // p, units % p
    # per-layout numbers that do not depend on the stage
    shard = {t: tp_shard(model, int(t)) for t in np.unique(tp)}
    per_block = _layer_bytes(model, tp, b, sp, recompute, flash, shard)
    params_block = np.array([_block_weights_of(model, shard[t]) for t in tp.tolist()], np.int64)
    vocab = np.array([shard[t].vocab for t in tp.tolist()], np.int64)
    fsdp_block = np.array([block_params(model, int(t)) for t in tp.tolist()], np.int64)
    h, s = model.hidden_size, model.seq_length
    split = np.where(sp, tp, 1)
    # every (micro-batch count, stage) of a row at once, in the planner's order: counts
    # ascending, then stages; a row's stages beyond its pipeline are masked out
    stage = np.tile(np.arange(int(p.max())), 2)[None, :]
    m = np.repeat(np.stack(counts, axis=1), int(p.max()), axis=1)
    col = {name: value[:, None] for name, value in dict(
        b=b, tp=tp, split=split, p=p, virtual=virtual, gpipe=gpipe, zero=zero, dp=replicas,
        recompute=recompute, per_block=per_block, params_block=params_block, vocab=vocab,
        fsdp_block=fsdp_block, per=per, left=left).items()}
    here = stage < col["p"]
    size = col["virtual"] * (col["per"] + (stage < col["left"]))
    first = 1 + col["virtual"] * (stage * col["per"] + np.minimum(stage, col["left"]))
    last = first + size - 1
    total = _stage_total(model, h, s, col["b"], col["tp"], col["split"], first, last, stage,
                         col["p"], m, col["virtual"], col["gpipe"], col["zero"], col["dp"],
                         col["recompute"], col["per_block"], col["params_block"],
                         col["vocab"], col["fsdp_block"])
    largest = np.where(here, total, -np.inf).max(axis=1)
    over = np.where(here & (total > gpu.hbm_gib), total, -np.inf)
    pick = np.argmax(over, axis=1)  # the first of the largest, as the planner's strict ">"
    rows_n = np.arange(n)
    worst = over[rows_n, pick]
    at = np.stack([np.broadcast_to(stage, total.shape)[rows_n, pick], first[rows_n, pick],
                   last[rows_n, pick], m[rows_n, pick]], axis=1)
    fits = worst == -np.inf
    v.defer(_select(rows, v.open.size, fits & ~over_micro))  # feasible, or a limit: planner
    bad = _select(rows, v.open.size, ~fits)
    v.memory[rows[~fits]] = largest[~fits]
    v.fail(bad, "memory", lambda total, stage, first, last, m, t:
           f"does not fit in GPU memory: {total:.1f} GiB per GPU on {gpu.name} "
           f"({gpu.hbm_gib:g} GiB) at stage {stage}, TP {t}, layers {first}-{last}, "
           f"{m} micro-batches",
           _spread(rows, v.open.size, worst, np.nan), _spread(rows, v.open.size, at[:, 0], 0),
           _spread(rows, v.open.size, at[:, 1], 0), _spread(rows, v.open.size, at[:, 2], 0),
           _spread(rows, v.open.size, at[:, 3], 0), _spread(rows, v.open.size, tp, 0))
    v.defer(_select(rows, v.open.size, over_micro))


def _select(rows: np.ndarray, n: int, mask: np.ndarray) -> np.ndarray:
    out = np.zeros(n, bool)
    out[rows[mask]] = True
    return out


def _spread(rows: np.ndarray, n: int, values: np.ndarray, fill) -> np.ndarray:
    out = np.full(n, fill, np.asarray(values).dtype)
    out[rows] = values
    return out


def _block_weights_of(model, shard) -> int:
    h, d = model.hidden_size, model.hidden_size // model.num_attention_heads
    return h * d * (2 * shard.heads + 2 * shard.kv_heads) + mlp_matrices(model) * h * shard.ffn + 2 * h


def _layer_bytes(model, tp, b, sp, recompute, flash, shard) -> np.ndarray:
    """:func:`xsweep.plan.memory.layer_activation_bytes`, per row."""
    h, s = model.hidden_size, model.seq_length
    d = h // model.num_attention_heads
    heads = np.array([shard[t].heads for t in tp.tolist()], np.int64)
    kv = np.array([shard[t].kv_heads for t in tp.tolist()], np.int64)
    ffn_width = np.array([shard[t].ffn for t in tp.tolist()], np.int64)
    masks = 2 * MASK_BYTES if model.dropout else 0
    unsplit = (4 * BF16_BYTES + masks) * s * b * h
    attention = s * b * (4 * d * heads + 4 * d * kv)
    kept = BF16_BYTES + (MASK_BYTES + BF16_BYTES if model.dropout else 0)
    scores = np.where(flash, LSE_BYTES * heads * s * b, kept * heads * s * s * b)
    attention = attention + np.where(recompute != "selective", scores, 0)
    ffn = mlp_matrices(model) * BF16_BYTES * s * b * ffn_width
    split_sum = unsplit / tp + attention.astype(float) + ffn.astype(float)
    whole_sum = (unsplit + attention + ffn).astype(float)
    return np.where(sp, split_sum, whole_sum)


def _stage_total(model, h, s, b, tp, split, first, last, stage, p, m, virtual, gpipe, zero,
                 dp, recompute, per_block, params_block, vocab, fsdp_block) -> np.ndarray:
    """:func:`xsweep.plan.memory.memory_breakdown`'s total, per row, for one stage."""
    last_stage = np.maximum(p - 1, 0)
    index = np.minimum(stage, last_stage)
    warmup = 2 * (p - index - 1) + (virtual - 1) * p
    flight = np.where(gpipe, m.astype(float),
                      np.where(virtual == 1, np.minimum(m, p - index).astype(float),
                               np.minimum(m.astype(float), (warmup + 1) / virtual)))
    params = (last - first + 1) * params_block
    params = params + np.where(first == 1, vocab * h, 0)
    params = params + np.where(last == model.num_layers, vocab * h + h, 0)
    weights = (BF16_BYTES * params).astype(float)
    grads = (GRAD_BYTES_PER_PARAM * params).astype(float)
    optimizer = ADAM_BYTES_PER_PARAM * params / np.where(zero > 0, dp, 1)
    fsdp = zero == 3
    weights = np.where(fsdp, weights / dp + FSDP_GATHERED_BLOCKS * BF16_BYTES * fsdp_block,
                       weights)
    grads = np.where(fsdp, grads / dp + GRAD_BYTES_PER_PARAM * fsdp_block, grads)
    blocks = last - first + 1
    full = blocks * flight * BF16_BYTES * s * b * h / split + per_block
    held = np.where(recompute == "full", full, blocks * flight * per_block)
    if model.dropout:
        held = held + np.where(first == 1, flight * MASK_BYTES * s * b * h / split, 0.0)
    held = held + np.where(last == model.num_layers, flight * 4 * s * b * vocab, 0.0)
    return weights / GIB + grads / GIB + optimizer / GIB + held / GIB
