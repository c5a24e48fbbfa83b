"""Evaluate many programs with the JAX kernels: encode, bucket, chunk, shard, collect.

The two levels see programs differently: the exact level reads the padded program
(``xsweep.evaluator.encode``), the bound a block layout (``xsweep.evaluator.blocks``,
with the contention-free durations already in it). What the host derives from a
program (the layout, the metrics' index) is kept per program object by the
evaluator (``xsweep.evaluator.derived``), so a program seen again costs only its
copy into a chunk.

Variants are grouped by shape: each variant's sizes, its metrics' index sizes and
slots rounded up (``KEY_ROUNDING``: its key, so shapes repeat across calls, and across
processes through the disk cache of compiled kernels); neighbouring groups share a
shape while that costs at most ``MERGE_FACTOR`` times their own work, and a call needs
at most ``MAX_SHAPES`` new shapes (an already compiled shape that covers a variant at
up to ``REUSE`` times its work is used as it is). The shape a key was given is
kept (beside the compiled kernels on disk), so a key runs at the same shape in every
later call and process, whatever else they hold: rerunning plans compiles nothing.
Each group runs in chunks of a few row counts (``MIN_ROWS`` times powers of
``ROWS_STEP``; a vmapped group of large programs is cut into several so that it pads
little; where variants run one after another, a shape has one row count, ``ROW_CELLS``);
the variant axis is padded to a multiple of the device count and
split over all devices with ``shard_map``: each device runs its share, vmapped or one
variant after another (``VECTORIZED``), so one CPU, one GPU or eight run the same
code. The exact level's slots (tasks and flows under way at once) are sized per
variant from its bound schedule; variants that still overflow are rerun together,
in a second pass with twice the slots of both kinds.

On an accelerator the metrics of ``xsweep.timeline`` are computed in the same compiled
call, from task times that never leave the device unless asked for; their index arrays
share one size per group too. On a CPU they are computed on the host from the task times
(``METRICS_ON_DEVICE``). While the device works on one chunk, the host encodes the next.
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
    power_of_two,
    program_sizes,
)
from xsweep.evaluator.slots import exact_slots
from xsweep.kernels import MAX_ROUNDS, Status
from xsweep.plan.program import Program

LEVELS = ("bound", "exact")
DTYPES = {"float32": np.float32, "float64": np.float64}
#: Variants per chunk and device, by platform. A CPU pays per element: the bound's
#: blocked scan runs as fast at 32-64 variants per chunk as at 256 (its times stay in
#: cache); the exact level runs its variants one after another (``VECTORIZED``), and
#: 32 per call spread the call's overhead (several ms) at few compiled row counts
#: (measured: 2-3x the rate of one variant per call on small programs, the same on
#: large ones). The accelerator sizes are first guesses, not measurements.
DEFAULT_CHUNK = {"cpu": {"bound": 64, "exact": 32}, "gpu": {"bound": 16384, "exact": 2048}}
#: Whether the variants of a chunk run vmapped, in lockstep, or one after another
#: (over the rows that hold one: ``executables._one_by_one``), each in the unbatched
#: kernel whose branches really branch and which
#: stops at its own last event. Measured on CPU: one after another wins for the
#: exact level (a vmapped event loop runs as long as its slowest member and touches
#: every slot at every step).
VECTORIZED = {"cpu": {"bound": True, "exact": False}, "gpu": {"bound": True, "exact": True}}
#: Where the metrics of ``xsweep.timeline`` are computed, by platform: on an accelerator
#: in the kernels' compiled call, from task times that never leave the device; on a CPU,
#: whose device memory is the host's, on the host from the task times the call returns
#: (``xsweep.evaluator.host_metrics``: numpy, each structure's variants at once, its index
#: unpadded). Measured on CPU (Llama-2-7B plans on 8-64 GPUs): the metrics made the bound's
#: executables 4.7 times as large (1,110 HLO instructions against 185) and 3.4 times as slow
#: to compile, the exact's 1.3 times as large, and an executable loads from the kernel store
#: in time with its size; their index added its sizes to the shape keys (147 keys against
#: 80 over 580 all-distinct plans), and a shape that programs of unlike streams shared
#: padded it 150-260 times over at the exact level.
METRICS_ON_DEVICE = {"cpu": False, "gpu": True}
#: Cost of one step of the bound's scan in gathered predecessors per variant, by
#: platform; it sets how wide the bound's blocks are (``xsweep.evaluator.blocks``).
#: On CPU the rate of the Llama-2-7B plans barely moves between 8 and 512; the
#: accelerator's (whose steps are kernel launches) is a first guess.
BLOCK_STEP_COST = {"cpu": 32, "gpu": 1024}
#: New compiled shapes one call uses at most, by level, besides reruns after an
#: overflow: each compiles once (kept on disk after, ``xsweep.runtime.use_compile_cache``).
MAX_SHAPES = {"bound": 8, "exact": 6}
#: Two groups of variants share one shape (the larger of each size) only while that
#: costs each at most this many times its own work, unless a call would need more than
#: ``MAX_SHAPES`` new shapes: padding stays below it in all but the most varied calls.
#: The exact level's work grows with its slots, and its runs are long: a few more
#: shapes cost less than the slots a loose merge adds to every step of every member.
MERGE_FACTOR = {"bound": 2.0, "exact": 1.5}
#: A variant runs at an already compiled shape that costs up to this many times its own.
REUSE = {"bound": 2.0, "exact": 1.5}
#: Beyond those factors, a group of variants still runs at a larger shape (an already
#: compiled one, or one merged with another group) while the work this adds to the
#: group in all (its load times the work per unit) stays below this, by platform and
#: level, and the larger shape costs at most ``MAX_STRETCH`` times its own: one more
#: executable costs the time to load it from the kernel store, while a few variants of
#: a shape lose less than that to padding. The exact level on CPU: loading one of its
#: executables takes 0.15-0.25 s and a unit of its work (an event at one slot unit,
#: ``_exact_work``) about 1e-8 s (measured on Llama-2-7B plans of 8-64 GPUs, sweep-like
#: and all-distinct), so 2e7 units are worth 0.2 s. Sweep-like calls, whose groups hold
#: many variants of a shape, keep their own shapes; all-distinct ones, whose groups hold
#: a few, share. The bound level's and the accelerator's are not measured: 0, no sharing
#: beyond the factors.
SPARE_WORK = {"cpu": {"bound": 0.0, "exact": 2e7}, "gpu": {"bound": 0.0, "exact": 0.0}}
MAX_STRETCH = 3.0
#: Rows of a chunk at least (a multiple of the devices, up to the chunk size) ...
MIN_ROWS = {"bound": 1, "exact": 1}
#: ... growing by this factor up to the chunk size, so that a shape needs a few
#: executables: the bound's vmapped rows in steps of 2 (each row costs its share of a
#: step), the exact level's in steps of 4.
ROWS_STEP = {"bound": 2, "exact": 4}
#: How a variant's sizes round up into its shape key, by level. The bound runs its
#: variants vmapped, and every spare cell (a slot, a gather) costs its share of each
#: step, while its executables are small (tens of kB, loaded in milliseconds): sizes on
#: the ladder, at most a third spare on each axis. The exact level's steps cost in
#: proportion to its slots, not its sizes (spare tasks and flows cost memory and a
#: little setup), its rows run one after another and skip a padded one, and its
#: executables are large (about a megabyte, a tenth to a fifth of a second to load,
#: seconds to compile): sizes on powers of two, fewer shapes. Measured on CPU (Llama-2-7B
#: plans of 8-64 GPUs, this benchmark's worker processes), against powers of two and
#: rows of 8, 32 or 64: the bound's padding went from 4.2-4.8 padded cells per real cell
#: to 1.4 on all-distinct plans and from 3.1-3.6 to 1.7-1.8 on sweep-like ones; the finer
#: keys make more shapes, so all-distinct plans ran about 6% slower warm (63 executables
#: loaded against 20-25) and compiled more when cold (65 against 25 on a second set).
KEY_ROUNDING = {"bound": ladder, "exact": power_of_two}
#: Array cells of one chunk at most where variants run one after another (the exact
#: level on a CPU), whose chunks have one row count per shape (:func:`_rows_alone`):
#: 2**23 cells are 32 MB of 4-byte values, of which only the real rows' pages are ever
#: written. Measured on CPU (this benchmark's worker processes, all-distinct Llama-2-7B
#: plans of 8-64 GPUs, a second set of plans in a warm process): one executable per shape
#: rather than one per shape and row count loaded 2.5-2.6 s of executables against
#: 4.4-4.6 s and ran 103-110 variants/s against 86-92; sweep-like plans ran as fast as
#: before (their groups fill 32 rows either way).
ROW_CELLS = 2**23
#: Work per row (``_Format.work``) from which a vmapped group is cut into several row
#: counts so that it pads little (:func:`_row_chunks`): variants run vmapped pay for every
#: row, padding included, while variants run one after another (the exact level on a
#: CPU) lose nothing to an empty row. Below it a row costs less than the extra calls and
#: executables (measured on CPU: Llama-2-7B plans of 8-64 GPUs, 1-53 thousand, ran slower
#: and compiled twice the shapes when cut; 512-GPU Llama-3-70B plans, 49-200 thousand,
#: ran their kernels 1.6x faster).
SPLIT_WORK = 2**16
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


class _Config(NamedTuple):
    level: str
    dtype: type
    max_rounds: int
    with_metrics: bool  # in the kernels' call
    task_times: bool  # returned to the caller
    host_metrics: bool  # computed here from the task times
    vectorized: bool
    step_cost: int
    spare_work: float


def _shape_groups(keys: np.ndarray, load: np.ndarray, work: Callable, max_shapes: int,
                  fixed: list[tuple[int, ...]], assigned: dict[tuple, tuple],
                  merge_factor: float = MERGE_FACTOR["bound"],
                  reuse_factor: float = REUSE["bound"], spare: float = 0.0,
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
    (:data:`SPARE_WORK`).
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


def _rungs(level: str, chunk_size: int, devices: int) -> list[int]:
    """The row counts a chunk may have: ``MIN_ROWS`` times powers of ``ROWS_STEP``, at
    most ``chunk_size``, multiples of the devices (few row counts, so groups of other
    sizes at one shape share executables)."""
    rows, out = MIN_ROWS[level], set()
    while True:
        out.add(-(-min(rows, chunk_size) // devices) * devices)
        if rows >= chunk_size:
            return sorted(out)
        rows *= ROWS_STEP[level]


def _row_chunks(count: int, level: str, chunk_size: int, devices: int,
                split: bool) -> list[int]:
    """Rows of each chunk of a group of ``count`` variants, each a rung of :func:`_rungs`.

    Without ``split``, one rung for the whole group, as far as it goes. With it, the group
    is cut into the largest rungs it fills, then the largest that the rest fills, and so
    on: it pads by less than the smallest rung (one chunk of the next rung up where that
    pads no more), in more calls and with more executables per shape."""
    rungs = _rungs(level, chunk_size, devices)
    single = next((r for r in rungs if r >= count), rungs[-1])
    if not split:
        return [single] * -(-count // single)
    sizes, left = [], count
    while left > 0:
        size = max([r for r in rungs if r <= left], default=rungs[0])
        sizes.append(size)
        left -= size
    return [single] if single >= count and single <= sum(sizes) else sizes


def _rows_alone(cells_per_row: int, level: str, chunk_size: int, devices: int) -> int:
    """Rows of every chunk of a shape whose variants run one after another: the largest
    rung of :func:`_rungs` whose arrays hold at most ``ROW_CELLS`` cells (one row at
    least). Such a chunk loses nothing to an empty row (it is skipped, and its pages are
    never written), so each shape needs one executable whatever its groups' sizes."""
    rungs = _rungs(level, chunk_size, devices)
    return max([r for r in rungs if r * cells_per_row <= ROW_CELLS], default=rungs[0])


class _Run:
    """One call of :func:`run_programs`: its configuration and the evaluator's state."""

    def __init__(self, cfg: _Config, fmt: _Format, executables: Executables,
                 derived: Derived):
        self.cfg, self.fmt, self.executables, self.derived = cfg, fmt, executables, derived

    def dispatch(self, programs: Sequence[Program], sizes: np.ndarray, with_metrics: bool,
                 slots: tuple[int, int], key: tuple, metric_dims: tuple) -> dict:
        """Encode one chunk at the (rows, *shape) ``key`` and start the kernel on it."""
        cfg, fmt, devices = self.cfg, self.fmt, self.executables.devices
        rows, shape = key[0], fmt.shape(*key[1:])
        if cfg.level == "exact":
            slots = (min(slots[0], shape.tasks + 1), min(slots[1], shape.flows))  # no more is used
        vmapped = cfg.vectorized and rows > len(devices)
        kernel, sharding = self.executables.kernel(cfg.level, slots, cfg.max_rounds, vmapped,
                                                   with_metrics)
        arrays = fmt.encode(programs, shape, dtype=cfg.dtype, num_variants=rows)
        index = scalars = None
        if with_metrics:
            index = pad_metric_index([self.derived.metric_index(p) for p in programs],
                                     shape.tasks, metric_dims, dtype=cfg.dtype,
                                     num_variants=rows)
            scalars = tuple(np.array([getattr(p, name) for p in programs]
                                     + [0.0] * (rows - len(programs)), cfg.dtype)
                            for name in _SCALARS)
        out = kernel(*jax.device_put((arrays, index, scalars), sharding))
        if not (cfg.task_times or cfg.host_metrics):
            del out["start_s"], out["end_s"]
        # rows run one after another skip the padded ones unread: only run rows count
        overhead = padding_overhead(sizes, shape, rows if vmapped else len(programs))
        return {"packed": out, "padding_overhead": np.full(len(programs), overhead)}

    def chunks(self, programs: Sequence[Program], sizes: np.ndarray, pending: np.ndarray,
               need: np.ndarray, chunk_size: int):
        """(variant indices, key, metric dims, slots) of every call: groups of one shape
        and one number of slots, in chunks of rows."""
        cfg, fmt = self.cfg, self.fmt
        devices = len(self.executables.devices)
        dims = np.array([self.derived.metric_dims(programs[i]) for i in pending]
                        if cfg.with_metrics else np.zeros((len(pending), 0)), np.int64)
        # sizes rounded as KEY_ROUNDING says; the exact level's slots on the ladder they
        # were sized on (each step costs in proportion to them)
        keys = np.concatenate([KEY_ROUNDING[cfg.level](np.concatenate(
            [sizes[pending], dims.reshape(len(pending), -1)], axis=1)),
            ladder(need[pending]).reshape(len(pending), 2)], axis=1)
        config = (cfg.level, np.dtype(cfg.dtype).name, cfg.max_rounds, cfg.with_metrics)
        groups, chosen = _shape_groups(keys, fmt.load(sizes[pending]), fmt.work,
                                       MAX_SHAPES[cfg.level], self.executables.compiled(config),
                                       self.executables.assignments(config),
                                       MERGE_FACTOR[cfg.level], REUSE[cfg.level],
                                       cfg.spare_work)
        self.executables.assign(config, chosen)
        num_fields = len(fmt.shape._fields)
        for key, local in groups:
            run = pending[local]
            self.executables.remember(config, key)
            begin = 0
            if cfg.vectorized:
                split = float(fmt.work(np.array(key))) >= SPLIT_WORK
                counts = _row_chunks(len(run), cfg.level, chunk_size, devices, split)
            else:
                rows = _rows_alone(cells(fmt.shape(*key[:num_fields])), cfg.level,
                                   chunk_size, devices)
                counts = [rows] * -(-len(run) // rows)
            for rows in counts:
                yield (run[begin: begin + rows], (rows, *key[:num_fields]), key[num_fields:-2],
                       key[-2:])
                begin += rows


def _put(target: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``target[rows] = values`` where the second axes may differ (padding: zeros)."""
    if target.ndim == 1:
        target[rows] = values
    else:
        width = min(target.shape[1], values.shape[1])
        target[rows] = 0
        target[rows, :width] = values[:, :width]


def shapes_known(executables: Executables, level: str, dtype: str, max_rounds: int) -> bool:
    """Whether some process has chosen (and compiled) shapes of ``level`` for these
    settings, with metrics, and kept them beside the kernels on disk: a warm store."""
    platform = "cpu" if executables.devices[0].platform == "cpu" else "gpu"
    config = (level, np.dtype(DTYPES[dtype]).name, max_rounds, METRICS_ON_DEVICE[platform])
    return bool(executables.assignments(config))


def run_programs(programs: Sequence[Program], level: str, *, executables: Executables,
                 derived: Derived, dtype: str = "float32", chunk_size: int | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 slots: int | None = None, max_rounds: int = MAX_ROUNDS,
                 with_metrics: bool = True, task_times: bool = False) -> dict[str, np.ndarray]:
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
    platform = "cpu" if devices[0].platform == "cpu" else "gpu"
    chunk_size = chunk_size or DEFAULT_CHUNK[platform][level] * len(devices)
    n = len(programs)
    with_metrics = with_metrics and n > 0
    on_device = METRICS_ON_DEVICE[platform]
    cfg = _Config(level, DTYPES[dtype], max_rounds, with_metrics and on_device, task_times,
                  with_metrics and not on_device, VECTORIZED[platform][level],
                  BLOCK_STEP_COST[platform], SPARE_WORK[platform][level])
    run = _Run(cfg, _format(level, cfg.step_cost, derived), executables, derived)
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
        started = unpack(started["packed"], cfg.with_metrics) | {
            "padding_overhead": started["padding_overhead"]}
        if cfg.host_metrics:
            chunk = [programs[i] for i in idx]
            started |= host_metrics(chunk, [derived.host_index(p) for p in chunk],
                                    started["start_s"][: len(idx)],
                                    started["end_s"][: len(idx)], cfg.dtype)
            if not cfg.task_times:
                del started["start_s"], started["end_s"]
        for name, value in started.items():
            value = np.asarray(value)[: len(idx)]
            if name not in result:
                result[name] = np.zeros((n,) if value.ndim == 1 else (n, widths[name]),
                                        value.dtype)
            _put(result[name], idx, value)
        finished += int(np.sum(result["status"][idx] != Status.OVERFLOW))
        if progress is not None:
            progress(finished, n)

    if level == "exact":
        need = (np.full((n, 2), slots, np.int64) if slots is not None
                else _initial_slots(programs, executables, derived))
    else:
        need = np.zeros((n, 2), np.int64)
    x64 = jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()
    with x64:
        pending = order
        while pending.size:  # each pass reruns the overflowed variants with twice the slots
            in_flight = None  # one chunk computes on the device while the next is encoded
            for idx, key, dims, value in run.chunks(programs, sizes, pending, need, chunk_size):
                need[idx] = value  # what the chunk runs with, doubled if it overflows
                started = (idx, run.dispatch([programs[i] for i in idx], sizes[idx],
                                             cfg.with_metrics, value, key, dims))
                if in_flight is not None:
                    store(*in_flight)
                in_flight = started
            if in_flight is not None:
                store(*in_flight)
            pending = pending[result["status"][pending] == Status.OVERFLOW]
            need[pending] *= 2  # task slots > tasks and flow slots >= flows cannot overflow
    if "iteration_time_s" in result:
        result["iteration_time_s"][result["status"] == Status.INFEASIBLE] = np.inf
    return result


def _initial_slots(programs: Sequence[Program], executables: Executables,
                   derived: Derived) -> np.ndarray:
    """Starting (task, flow) slots of every variant, int[N, 2], sized from its bound
    schedule. The bound runs its kernel as the bound level does (with the metrics in it
    where they are computed there): the same keys at the same shapes, so variants bounded
    before (a sweep's funnel, say) compile nothing here; metrics on the host are skipped."""
    platform = "cpu" if executables.devices[0].platform == "cpu" else "gpu"
    bound = run_programs(programs, "bound", executables=executables, derived=derived,
                         with_metrics=METRICS_ON_DEVICE[platform], task_times=True)
    return np.array([exact_slots(p, bound["start_s"][i], bound["end_s"][i])
                     for i, p in enumerate(programs)], np.int64).reshape(-1, 2)
