"""Evaluate many programs with the JAX kernels: encode, bucket, chunk, shard, collect.

The two levels see programs differently: the exact level reads the padded program
(``xsweep.evaluator.encode``), the bound a block layout (``xsweep.evaluator.blocks``,
with the contention-free durations already in it). What the host derives from a
program (the layout, the metrics' index) is kept per program object by the
evaluator (``xsweep.evaluator.derived``), so a program seen again costs only its
copy into a chunk.

Variants are grouped by shape: each variant's sizes, its metrics' index sizes and
slots rounded up (``key_rounding``: its key, so shapes repeat across calls, and across
processes through the disk cache of compiled kernels); neighbouring groups share a
shape while that costs at most ``merge_factor`` times their own work, and a call needs
at most ``max_shapes`` new shapes (an already compiled shape that covers a variant at
up to ``reuse`` times its work is used as it is). Every such setting is a field of the
level's :class:`~xsweep.evaluator.tuning.Tuning` on the platform. The shape a key was given is
kept (beside the compiled kernels on disk), so a key runs at the same shape in every
later call and process, whatever else they hold: rerunning plans compiles nothing.
Each group runs in chunks of a few row counts (``min_rows`` times powers of
``rows_step``; a vmapped group of large programs is cut into several so that it pads
little; where variants run one after another, a shape has one row count, ``ROW_CELLS``);
the variant axis is padded to a multiple of the device count and
split over all devices with ``shard_map``: each device runs its share, vmapped or one
variant after another (``vectorized``), so one CPU, one GPU or eight run the same
code. Where variants run one after another, skipping the padded rows, a chunk's
programs are dealt out over the devices' shares (:func:`spread_rows`), so that a chunk
of a few programs keeps every device busy. The exact level's slots (tasks and flows
under way at once) are sized per variant from its bound schedule; variants that still
overflow are rerun together, in a second pass with twice the slots of both kinds.

On an accelerator the metrics of ``xsweep.timeline`` are computed in the same compiled
call, from task times that never leave the device unless asked for; their index arrays
share one size per group too. On a CPU they are computed on the host from the task times
(``metrics_on_device``). While the device works on one chunk, the host encodes the next.

A call knows its chunks' keys before it encodes the first: the executables kept on disk
for them start loading then, in a thread of their own (``_Kernel.prefetch``: shapes,
dtypes and shardings name an executable, no arrays needed), while the chunks before
them are encoded and run. A caller that bounds programs and evaluates some of them
exactly next (a sweep's funnel) says so (``next_level``), and the exact executables
those programs ran at before start loading while they are bounded (:func:`anticipate`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import numpy as np

from xsweep import metrics
from xsweep.errors import InputError
from xsweep.evaluator.blocks import block_sizes, block_work, encode_blocks
from xsweep.evaluator.derived import Derived
from xsweep.evaluator.encode import encode, pad_metric_index
from xsweep.evaluator.executables import DIAGNOSTICS, Executables, unpack
from xsweep.evaluator.host_metrics import host_metrics
from xsweep.evaluator.shapes import (
    BlockShape,
    Shape,
    cells,
    ladder,
    padding_overhead,
    program_sizes,
)
from xsweep.evaluator.slots import exact_slots, grown, used_slots
from xsweep.evaluator.tuning import (
    MAX_STRETCH,
    ROW_CELLS,
    Tuning,
    platform_of,
    tuning,
)
from xsweep.kernels import MAX_ROUNDS, Status
from xsweep.plan.program import Program

LEVELS = ("bound", "exact")
DTYPES = {"float32": np.float32, "float64": np.float64}
_SCALARS = ("tokens_per_iteration", "model_flops_per_iteration", "peak_flops_per_s")


class _Format(NamedTuple):
    """How one level's kernel sees programs: sizes, rounded shapes, work, arrays."""

    shape: type  # Shape or BlockShape
    sizes: Callable  # programs -> int[N, fields of shape]
    load: Callable  # rows of sizes -> each variant's weight in the kernel's time
    work: Callable  # rows of (shape, task slots, flow slots) -> work per unit of load there
    encode: Callable  # (programs, shape, *, dtype, num_variants) -> the kernel's arrays


def _exact_events(sizes: np.ndarray) -> np.ndarray:
    """Events of each program at most: every task and every flow's start and end."""
    return (sizes[:, 0] + 2 * sizes[:, 2]).astype(float)


def _exact_work(keys: np.ndarray) -> np.ndarray:
    """Work per event: a fixed part, and a part that grows with the slots (measured on CPU:
    about 12 us per event at 64 task and 256 flow slots, 55 us at 256 and 1024)."""
    return 100.0 + keys[..., -2] + keys[..., -1]


def _format(level: str, step_cost: int, derived: Derived) -> _Format:
    if level == "exact":
        return _Format(Shape, program_sizes, _exact_events, _exact_work, encode)

    def work(keys):
        return block_work(keys[..., :-2], step_cost)

    def sizes(programs):
        return block_sizes(programs, [derived.form(p, step_cost) for p in programs])

    def encoded(programs, shape, **kwargs):
        return encode_blocks(derived.layouts(programs, shape.width), shape, **kwargs)

    return _Format(BlockShape, sizes, lambda sizes: np.ones(len(sizes)), work, encoded)


class ChunkKey(NamedTuple):
    """Where one chunk runs: its rows, its level's shape, the metrics' index sizes and the
    exact level's (task, flow) slots. The kernel store keeps a shape key flat, in this
    order without the rows (``shape + metric_dims + slots``), which is also how keys are
    grouped and merged, as arrays (:func:`_shape_groups`)."""

    rows: int
    shape: tuple[int, ...]
    metric_dims: tuple[int, ...]
    slots: tuple[int, int]

    @classmethod
    def of(cls, rows: int, flat, num_fields: int) -> ChunkKey:
        """The key of a flat shape key whose level's shape has ``num_fields`` fields."""
        flat = tuple(int(n) for n in flat)
        return cls(rows, flat[:num_fields], flat[num_fields:-2], flat[-2:])


class _Config(NamedTuple):
    level: str
    dtype: type
    max_rounds: int
    with_metrics: bool  # in the kernels' call
    task_times: bool  # returned to the caller
    host_metrics: bool  # computed here from the task times
    tune: Tuning  # how the level runs on the platform


def _shape_groups(keys: np.ndarray, load: np.ndarray, work: Callable, max_shapes: int,
                  fixed: list[tuple[int, ...]], assigned: dict[tuple, tuple],
                  merge_factor: float = 2.0, reuse_factor: float = 2.0, spare: float = 0.0,
                  ) -> tuple[list[tuple[tuple[int, ...], np.ndarray]], dict[tuple, tuple]]:
    """Variants grouped by the shape they run at: ``(shape key, variant indices)``, and the
    shape chosen here for each variant key not in ``assigned``.

    ``keys`` are each variant's own shape key (sizes, the metrics' index sizes and slots,
    each a power of two, so that keys repeat across calls and processes) and ``load`` its
    weight in the kernel's time (the variant costs ``load * work(key)``). A key
    ``assigned`` a shape before runs there again, so the same variants always run at the
    same shapes, whatever else a call holds. A new key that an already compiled or
    assigned key of ``fixed`` covers at most ``reuse_factor`` times its work runs there.
    The rest are grouped by key; two groups are merged (their elementwise largest key)
    while some merge costs each member at most ``merge_factor`` times its work, and
    while more than ``max_shapes`` groups are left, the merge that adds the least work.
    Either also happens where it adds at most ``spare`` work to the variants concerned
    in all (load times work) at up to ``MAX_STRETCH`` times their work
    (``Tuning.spare_work``).
    """
    order = np.lexsort(keys.T[::-1])
    unique, first = np.unique(keys[order], axis=0, return_index=True)
    members = np.split(order, first[1:])
    groups: dict[tuple[int, ...], list[np.ndarray]] = {}
    chosen: dict[tuple, tuple] = {}
    new_keys, new_members, new_owns = [], [], []
    fixed = list(dict.fromkeys([*fixed, *assigned.values()]))
    for key, who in zip(unique, members, strict=True):
        own = tuple(int(n) for n in key)
        if own in assigned:
            groups.setdefault(assigned[own], []).append(who)
            continue
        cost, weight = float(work(key)), float(load[who].sum())

        def affordable(other: float, cost=cost, weight=weight) -> bool:
            return other <= reuse_factor * cost or (
                other <= MAX_STRETCH * cost and (other - cost) * weight <= spare)

        covering = [k for k in fixed if len(k) == len(own)
                    and all(a >= b for a, b in zip(k, own, strict=True))
                    and affordable(float(work(np.array(k))))]
        if covering:
            chosen[own] = min(covering, key=lambda k: float(work(np.array(k))))
            groups.setdefault(chosen[own], []).append(who)
        else:
            new_keys.append(key)
            new_members.append([who])
            new_owns.append([own])
    # the least work of a member's own key, per group: a merge is judged by what it costs
    # the members, not by the groups' keys, which earlier merges have already raised
    floors = [float(work(key)) for key in new_keys]
    while len(new_keys) > 1:
        stacked = np.stack(new_keys)
        weight = np.array([sum(load[w].sum() for w in who) for who in new_members], float)
        merged = np.maximum(stacked[:, None], stacked[None, :])
        own_work = work(stacked)
        extra = work(merged) * (weight[:, None] + weight[None, :]) \
            - (own_work * weight)[:, None] - (own_work * weight)[None, :]
        np.fill_diagonal(extra, np.inf)
        i, j = np.unravel_index(np.argmin(extra), extra.shape)
        ratio = work(merged[i, j]) / min(floors[i], floors[j])
        cheap = ratio <= MAX_STRETCH and extra[i, j] <= spare
        if ratio > merge_factor and not cheap and len(new_keys) <= max_shapes:
            break
        keep = [n for n in range(len(new_keys)) if n not in (i, j)]
        new_keys = [new_keys[n] for n in keep] + [merged[i, j]]
        new_members = [new_members[n] for n in keep] + [new_members[i] + new_members[j]]
        new_owns = [new_owns[n] for n in keep] + [new_owns[i] + new_owns[j]]
        floors = [floors[n] for n in keep] + [min(floors[i], floors[j])]
    for key, who, owns in zip(new_keys, new_members, new_owns, strict=True):
        shape = tuple(int(n) for n in key)
        groups.setdefault(shape, []).extend(who)
        chosen.update(dict.fromkeys(owns, shape))
    return [(key, np.sort(np.concatenate(who))) for key, who in groups.items()], chosen


def _rungs(tune: Tuning, chunk_size: int, devices: int) -> list[int]:
    """The row counts a chunk may have: ``min_rows`` times powers of ``rows_step``, at
    most ``chunk_size``, multiples of the devices (few row counts, so groups of other
    sizes at one shape share executables)."""
    rows, out = tune.min_rows, set()
    while True:
        out.add(-(-min(rows, chunk_size) // devices) * devices)
        if rows >= chunk_size:
            return sorted(out)
        rows *= tune.rows_step


def _row_chunks(count: int, tune: Tuning, chunk_size: int, devices: int,
                split: bool) -> list[int]:
    """Rows of each chunk of a group of ``count`` variants, each a rung of :func:`_rungs`.

    Without ``split``, one rung for the whole group, as far as it goes. With it, the group
    is cut into the largest rungs it fills, then the largest that the rest fills, and so
    on: it pads by less than the smallest rung (one chunk of the next rung up where that
    pads no more), in more calls and with more executables per shape."""
    rungs = _rungs(tune, chunk_size, devices)
    single = next((r for r in rungs if r >= count), rungs[-1])
    if not split:
        return [single] * -(-count // single)
    sizes, left = [], count
    while left > 0:
        size = max([r for r in rungs if r <= left], default=rungs[0])
        sizes.append(size)
        left -= size
    return [single] if single >= count and single <= sum(sizes) else sizes


def _rows_alone(cells_per_row: int, tune: Tuning, chunk_size: int, devices: int) -> int:
    """Rows of every chunk of a shape whose variants run one after another: the largest
    rung of :func:`_rungs` whose arrays hold at most ``ROW_CELLS`` cells (one row at
    least). Such a chunk loses nothing to an empty row (it is skipped, and its pages are
    never written), so each shape needs one executable whatever its groups' sizes."""
    rungs = _rungs(tune, chunk_size, devices)
    return max([r for r in rungs if r * cells_per_row <= ROW_CELLS], default=rungs[0])


class _Run:
    """One call of :func:`run_programs`: its configuration and the evaluator's state."""

    def __init__(self, cfg: _Config, fmt: _Format, executables: Executables,
                 derived: Derived):
        self.cfg, self.fmt, self.executables, self.derived = cfg, fmt, executables, derived

    def _kernel(self, key: ChunkKey, with_metrics: bool) -> tuple[Callable, object, bool]:
        """The kernel a chunk of ``key`` runs in, its inputs' sharding, and whether its
        rows run vmapped."""
        cfg, devices = self.cfg, self.executables.devices
        slots = key.slots
        if cfg.level == "exact":
            slots = used_slots(slots, self.fmt.shape(*key.shape))
        vmapped = cfg.tune.vectorized and key.rows > len(devices)
        kernel, sharding = self.executables.kernel(cfg.level, slots, cfg.max_rounds, vmapped,
                                                   with_metrics, cfg.tune.unroll)
        return kernel, sharding, vmapped

    def _inputs(self, programs: Sequence[Program], with_metrics: bool, key: ChunkKey,
                at: np.ndarray | None) -> tuple:
        """A chunk's kernel inputs on the host: ``(arrays, index, scalars)``."""
        arrays = self.fmt.encode(programs, self.fmt.shape(*key.shape), dtype=self.cfg.dtype,
                                 num_variants=key.rows, at=at)
        if not with_metrics:
            return arrays, None, None
        return arrays, *self._metric_inputs(programs, key, at)

    def _metric_inputs(self, programs: Sequence[Program], key: ChunkKey,
                       at: np.ndarray | None) -> tuple:
        """The metrics' inputs of a chunk: the programs' padded index and scalars."""
        dtype, rows = self.cfg.dtype, key.rows
        index = pad_metric_index([self.derived.metric_index(p) for p in programs],
                                 self.fmt.shape(*key.shape).tasks, key.metric_dims,
                                 dtype=dtype, num_variants=rows, at=at)
        scalars = tuple(np.zeros(rows, dtype) for _ in _SCALARS)
        for values, name in zip(scalars, _SCALARS, strict=True):
            values[np.arange(len(programs)) if at is None else at] = \
                [getattr(p, name) for p in programs]
        return index, scalars

    def prefetch(self, program: Program, with_metrics: bool, key: ChunkKey) -> bool:
        """Start loading, in the background, the executable that a chunk of ``key`` holding
        ``program`` (and others of its shape) will run, if it is kept on disk: the
        chunks before it are encoded and run meanwhile. Its inputs' shapes are those of an
        empty chunk of ``key`` (the metrics' index of ``program`` gives their ranks)."""
        kernel, sharding, _ = self._kernel(key, with_metrics)
        arrays = self.fmt.encode([], self.fmt.shape(*key.shape), dtype=self.cfg.dtype,
                                 num_variants=key.rows)
        # the index padded needs one to pad: the program's, at the chunk's sizes
        inputs = (arrays, *(self._metric_inputs([program], key, None) if with_metrics
                            else (None, None)))
        return kernel.prefetch(*jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, jax.dtypes.canonicalize_dtype(a.dtype),
                                           sharding=sharding), inputs))

    def dispatch(self, programs: Sequence[Program], sizes: np.ndarray, with_metrics: bool,
                 key: ChunkKey) -> dict:
        """Encode one chunk at its ``key`` and start the kernel on it."""
        devices, rows = self.executables.devices, key.rows
        shape = self.fmt.shape(*key.shape)
        kernel, sharding, vmapped = self._kernel(key, with_metrics)
        # rows run one after another: the programs dealt out over the devices' shares, so
        # that each device runs as many (vmapped rows cost alike, padded or not)
        at = None if vmapped else spread_rows(len(programs), rows, len(devices))
        arrays, index, scalars = self._inputs(programs, with_metrics, key, at)
        out = kernel(*jax.device_put((arrays, index, scalars), sharding))
        cfg = self.cfg
        if not (cfg.task_times or cfg.host_metrics):
            del out["start_s"], out["end_s"]
        # rows run one after another skip the padded ones unread: only run rows count
        overhead = padding_overhead(sizes, shape, rows if vmapped else len(programs))
        return {"packed": out, "padding_overhead": np.full(len(programs), overhead),
                "rows": slice(0, len(programs)) if at is None else at}

    def chunks(self, programs: Sequence[Program], sizes: np.ndarray, pending: np.ndarray,
               need: np.ndarray, chunk_size: int):
        """``(variant indices, ChunkKey)`` of every call: groups of one shape and one
        number of slots, in chunks of rows."""
        cfg, fmt, tune = self.cfg, self.fmt, self.cfg.tune
        devices = len(self.executables.devices)
        dims = np.array([self.derived.metric_dims(programs[i]) for i in pending]
                        if cfg.with_metrics else np.zeros((len(pending), 0)), np.int64)
        # flat keys, as the kernel store keeps them (see ChunkKey): sizes rounded as the
        # tuning says; the exact level's slots on the ladder they were sized on (each step
        # costs in proportion to them)
        keys = np.concatenate([tune.key_rounding(np.concatenate(
            [sizes[pending], dims.reshape(len(pending), -1)], axis=1)),
            ladder(need[pending]).reshape(len(pending), 2)], axis=1)
        config = (cfg.level, np.dtype(cfg.dtype).name, cfg.max_rounds, cfg.with_metrics)
        groups, chosen = _shape_groups(keys, fmt.load(sizes[pending]), fmt.work,
                                       tune.max_shapes, self.executables.compiled(config),
                                       self.executables.assignments(config),
                                       tune.merge_factor, tune.reuse, tune.spare_work)
        self.executables.assign(config, chosen)
        num_fields = len(fmt.shape._fields)
        for flat, local in groups:
            run = pending[local]
            self.executables.remember(config, flat)
            key = ChunkKey.of(0, flat, num_fields)
            begin = 0
            if tune.vectorized:
                split = float(fmt.work(np.array(flat))) >= tune.split_work
                counts = _row_chunks(len(run), tune, chunk_size, devices, split)
            else:
                rows = _rows_alone(cells(fmt.shape(*key.shape)), tune, chunk_size, devices)
                counts = [rows] * -(-len(run) // rows)
            for rows in counts:
                yield run[begin: begin + rows], key._replace(rows=rows)
                begin += rows


def _put(target: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``target[rows] = values`` where the second axes may differ (padding: zeros)."""
    if target.ndim == 1:
        target[rows] = values
    else:
        width = min(target.shape[1], values.shape[1])
        target[rows] = 0
        target[rows, :width] = values[:, :width]


def spread_rows(count: int, rows: int, devices: int) -> np.ndarray | None:
    """Rows for ``count`` programs in a chunk of ``rows`` (a multiple of ``devices``) that
    ``devices`` take in equal shares, one after another: program ``i`` in share
    ``i % devices``, so that the shares hold as many programs as can be. None where that
    is the first ``count`` rows."""
    share = rows // devices
    at = np.arange(count)
    at = (at % devices) * share + at // devices
    return None if np.array_equal(at, np.arange(count)) else at


def shapes_known(executables: Executables, level: str, dtype: str, max_rounds: int,
                 platform: str | None = None) -> bool:
    """Whether some process has chosen (and compiled) shapes of ``level`` for these
    settings, with metrics, and kept them beside the kernels on disk: a warm store."""
    on_device = tuning(platform or platform_of(executables.devices), level).metrics_on_device
    config = (level, np.dtype(DTYPES[dtype]).name, max_rounds, on_device)
    return bool(executables.assignments(config))


def run_programs(programs: Sequence[Program], level: str, *, executables: Executables,
                 derived: Derived, dtype: str = "float32", chunk_size: int | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 slots: int | None = None, max_rounds: int = MAX_ROUNDS,
                 with_metrics: bool = True, task_times: bool = False,
                 platform: str | None = None,
                 next_level: str | None = None) -> dict[str, np.ndarray]:
    """Iteration time, metrics, status and diagnostics of every program, on all devices.

    Args:
      programs: the programs (any order; results come back in the same order).
      level: ``"bound"`` (contention-free lower bound) or ``"exact"``.
      executables, derived: the evaluator's compiled calls and per-program memo.
      dtype: ``"float32"`` or ``"float64"`` (runs under ``jax.enable_x64``).
      chunk_size: variants per kernel call (bounds memory); default per level and platform.
      progress: called as ``progress(done, total)`` after each chunk.
      slots: initial task slots and flow slots of the exact level, both this many
        (doubled for variants that overflow); by default each variant's own, sized from
        its bound schedule (:func:`xsweep.evaluator.slots.exact_slots`).
      max_rounds: water-filling round cap per event.
      with_metrics: compute the metrics of ``xsweep.timeline`` (the iteration time,
        status and diagnostics come back either way).
      task_times: also return ``start_s`` and ``end_s``, float[N, most tasks], 0-padded.
      platform: whose tuning record the call runs by (``"cpu"`` or ``"gpu"``; default:
        the devices'): tests run an accelerator's code path on CPU devices with ``"gpu"``.
      next_level: the level the caller will evaluate some of these programs at next, if
        any: its kept executables start loading while this call runs (:func:`anticipate`).

    Returns:
      Arrays over the variants: ``iteration_time_s`` (``inf`` where the status is
      infeasible); ``status`` (``xsweep.kernels.Status`` codes), ``steps``,
      ``max_active_flows``, ``waterfill_rounds`` (int32); ``padding_overhead`` of each
      variant's chunk; with metrics, every name of ``xsweep.metrics.STREAM_METRICS`` as
      float[N, most streams] (0 past a program's streams) and the other summaries of
      ``xsweep.timeline.summarize`` as float[N]. No programs: empty arrays, no metrics.
    """
    if level not in LEVELS:
        raise InputError(None, "level", level, f"must be one of {', '.join(LEVELS)}")
    if dtype not in DTYPES:
        raise InputError(None, "dtype", dtype, f"must be one of {', '.join(DTYPES)}")
    devices = executables.devices
    platform = platform or platform_of(devices)
    tune = tuning(platform, level)
    chunk_size = chunk_size or tune.chunk * len(devices)
    n = len(programs)
    with_metrics = with_metrics and n > 0
    on_device = tune.metrics_on_device
    cfg = _Config(level, DTYPES[dtype], max_rounds, with_metrics and on_device, task_times,
                  with_metrics and not on_device, tune)
    run = _Run(cfg, _format(level, tune.step_cost, derived), executables, derived)
    sizes = run.fmt.sizes(programs)
    order = np.arange(n)
    widths = dict.fromkeys(("start_s", "end_s"), max([p.num_tasks for p in programs] + [1]))
    widths |= dict.fromkeys(metrics.STREAM_METRICS,
                            max([p.num_streams for p in programs] + [1]))
    result: dict[str, np.ndarray] = {name: np.zeros(0, np.int32) for name in DIAGNOSTICS} | {
        "iteration_time_s": np.zeros(0, DTYPES[dtype]), "padding_overhead": np.zeros(0)
    } if n == 0 else {}
    finished = 0

    def store(idx: np.ndarray, started: dict) -> None:
        nonlocal finished
        rows, overhead = started["rows"], started["padding_overhead"]  # the programs' rows
        started = {name: np.asarray(value)[rows] for name, value in
                   unpack(started["packed"], cfg.with_metrics).items()}
        started["padding_overhead"] = overhead
        if cfg.host_metrics:
            chunk = [programs[i] for i in idx]
            started |= host_metrics(chunk, [derived.host_index(p) for p in chunk],
                                    started["start_s"], started["end_s"], cfg.dtype)
            if not cfg.task_times:
                del started["start_s"], started["end_s"]
        for name, value in started.items():
            value = np.asarray(value)
            if name not in result:
                result[name] = np.zeros((n,) if value.ndim == 1 else (n, widths[name]),
                                        value.dtype)
            _put(result[name], idx, value)
        finished += int(np.sum(result["status"][idx] != Status.OVERFLOW))
        if progress is not None:
            progress(finished, n)

    if level == "exact":
        need = (np.full((n, 2), slots, np.int64) if slots is not None
                else _initial_slots(programs, executables, derived, platform))
    else:
        need = np.zeros((n, 2), np.int64)
    x64 = jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()
    with x64:
        pending = order
        while pending.size:  # each pass reruns the overflowed variants with twice the slots
            in_flight = None  # one chunk computes on the device while the next is encoded
            chunks = list(run.chunks(programs, sizes, pending, need, chunk_size))
            for idx, key in chunks:  # kept kernels load while the chunks before them run
                run.prefetch(programs[idx[0]], cfg.with_metrics, key)
            if next_level not in (None, level):  # after this call's own, in the one queue
                anticipate(programs, next_level, executables=executables, derived=derived,
                           dtype=dtype, max_rounds=max_rounds, platform=platform)
                next_level = None
            for idx, key in chunks:
                need[idx] = key.slots  # what the chunk runs with, grown if it overflows
                started = (idx, run.dispatch([programs[i] for i in idx], sizes[idx],
                                             cfg.with_metrics, key))
                if in_flight is not None:
                    store(*in_flight)
                in_flight = started
            if in_flight is not None:
                store(*in_flight)
            pending = pending[result["status"][pending] == Status.OVERFLOW]
            need[pending] = grown(need[pending])
    if "iteration_time_s" in result:
        result["iteration_time_s"][result["status"] == Status.INFEASIBLE] = np.inf
    return result


#: Kept executables of the next level a call starts loading at most
#: (:func:`anticipate`).
MAX_ANTICIPATED = 2


def anticipate(programs: Sequence[Program], level: str, *, executables: Executables,
               derived: Derived, dtype: str = "float32", chunk_size: int | None = None,
               max_rounds: int = MAX_ROUNDS, platform: str | None = None) -> int:
    """Start loading, in the background, the kept executables that some of ``programs``
    are likely to run at ``level`` (a caller about to bound programs, some of which it will
    evaluate exactly next: a sweep's funnel): returns how many loads it started.

    A variant's shape key at the exact level ends in its slots, which its bound schedule
    sizes, not known yet; the shapes the kernel store assigned to keys that agree with a
    program's in everything else are what it ran at before (a rerun's, or a neighbour's).
    The shapes the most programs point to are loaded, at most :data:`MAX_ANTICIPATED`,
    while these programs are bounded. Where the level runs its variants vmapped, a
    chunk's rows depend on how many it holds: nothing is anticipated there."""
    platform = platform or platform_of(executables.devices)
    tune = tuning(platform, level)
    if tune.vectorized or not programs:
        return 0
    on_device = tune.metrics_on_device
    cfg = _Config(level, DTYPES[dtype], max_rounds, on_device, False, False, tune)
    run = _Run(cfg, _format(level, tune.step_cost, derived), executables, derived)
    config = (level, np.dtype(cfg.dtype).name, max_rounds, on_device)
    shapes: dict[tuple, set] = {}  # a key without its slots -> the shapes assigned to it
    for own, shape in executables.assignments(config).items():
        shapes.setdefault(own[:-2], set()).add(shape)
    dims = np.array([derived.metric_dims(p) for p in programs] if on_device
                    else np.zeros((len(programs), 0)), np.int64)
    prefixes = tune.key_rounding(np.concatenate(
        [run.fmt.sizes(programs), dims.reshape(len(programs), -1)], axis=1))
    wanted: dict[tuple, list[int]] = {}  # shape -> the programs that may run at it
    for i, prefix in enumerate(prefixes.tolist()):
        for shape in shapes.get(tuple(prefix), ()):
            wanted.setdefault(shape, []).append(i)
    devices, started = len(executables.devices), 0
    chunk_size = chunk_size or tune.chunk * devices
    num_fields = len(run.fmt.shape._fields)
    for shape, who in sorted(wanted.items(), key=lambda item: -len(item[1]))[:MAX_ANTICIPATED]:
        key = ChunkKey.of(0, shape, num_fields)
        rows = _rows_alone(cells(run.fmt.shape(*key.shape)), tune, chunk_size, devices)
        started += run.prefetch(programs[who[0]], on_device, key._replace(rows=rows))
    return started


def _initial_slots(programs: Sequence[Program], executables: Executables,
                   derived: Derived, platform: str | None = None) -> np.ndarray:
    """Starting (task, flow) slots of every variant, int[N, 2], sized from its bound
    schedule. The bound runs its kernel as the bound level does (with the metrics in it
    where they are computed there): the same keys at the same shapes, so variants bounded
    before (a sweep's funnel, say) compile nothing here; metrics on the host are skipped."""
    platform = platform or platform_of(executables.devices)
    on_device = tuning(platform, "bound").metrics_on_device
    bound = run_programs(programs, "bound", executables=executables, derived=derived,
                         with_metrics=on_device, task_times=True, platform=platform)
    return np.array([exact_slots(p, bound["start_s"][i], bound["end_s"][i])
                     for i, p in enumerate(programs)], np.int64).reshape(-1, 2)
