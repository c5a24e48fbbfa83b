"""Evaluate many programs with the JAX kernels: encode, bucket, chunk, shard, collect.

The two levels see programs differently: the exact level reads the padded program
(``xsweep.evaluator.encode``), the bound a block layout (``xsweep.evaluator.blocks``,
with the contention-free durations already in it). What the host derives from a
program (the layout, the metrics' index) is kept per program object by the
evaluator (``xsweep.evaluator.derived``), so a program seen again costs only its
copy into a chunk.

Programs are sorted by predicted size (exact: tasks + flows; bound: the work of
its layout) and cut into chunks, so neighbours in size share a chunk: little
padding, and the vmapped event loop waits little for its slowest member. Runs of
neighbours share one rounded shape (a bucket) while it costs at most
``REUSE_FACTOR`` times the work of the run's smallest member's own; a bucket holds
at least 1/``MAX_BUCKETS`` of the call's variants and ``MIN_BUCKET`` of them, and a
chunk at least ``MIN_ROWS`` rows; a later call reuses an already compiled shape that
covers it within the same factor. All this keeps the number of compilations
small. The variant axis is padded to a multiple of the device count and split
over all devices with ``shard_map``: each device runs its share, vmapped or one
variant after another (``VECTORIZED``), so one CPU, one GPU or eight run the same
code. The exact level's slots (tasks and flows under way at once) are sized per
variant from its bound schedule, and a bucket runs with the most any member needs
(buckets are cut where slots too grow past ``REUSE_FACTOR``); variants that still
overflow are rerun together, in a second pass with twice the slots of both kinds.
The metrics of ``xsweep.timeline`` are computed on the device by a second,
loop-free call on the task times, which never leave the device unless asked for;
its index arrays share one size per bucket too. While the device works on one
chunk, the host encodes the next.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import numpy as np

from xsweep import metrics
from xsweep.errors import InputError
from xsweep.evaluator.blocks import block_shapes, block_sizes, block_work, encode_blocks
from xsweep.evaluator.derived import Derived
from xsweep.evaluator.encode import encode, metric_index_dims, pad_metric_index
from xsweep.evaluator.executables import DIAGNOSTICS, REUSE_FACTOR, Executables
from xsweep.evaluator.shapes import (
    BlockShape,
    Shape,
    ladder,
    padding_overhead,
    predicted_size,
    program_shapes,
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
#: (``lax.map``), each in the unbatched kernel whose branches really branch and which
#: stops at its own last event. Measured on CPU: one after another wins for the
#: exact level (a vmapped event loop runs as long as its slowest member and touches
#: every slot at every step).
VECTORIZED = {"cpu": {"bound": True, "exact": False}, "gpu": {"bound": True, "exact": True}}
#: Cost of one step of the bound's scan in gathered predecessors per variant, by
#: platform; it sets how wide the bound's blocks are (``xsweep.evaluator.blocks``).
#: On CPU the rate of the Llama-2-7B plans barely moves between 8 and 512; the
#: accelerator's (whose steps are kernel launches) is a first guess.
BLOCK_STEP_COST = {"cpu": 32, "gpu": 1024}
#: Shapes (compilations) one call uses at most, besides reruns after an overflow.
MAX_BUCKETS = 8
#: Variants of one bucket at least, by level. A bound chunk runs in milliseconds on
#: CPU while a new shape compiles in 0.2-0.5 s (with the metrics): a shape of its
#: own pays off only for tens of thousands of variants.
MIN_BUCKET = {"bound": 16384, "exact": 1}
#: Rows of a chunk at least (up to the chunk size), by level: 64 bound variants of
#: up to 64 GPUs take a few ms on CPU, far less than compiling another row count, so
#: small calls and large ones share executables. Larger programs get fewer rows: at
#: least as many as ``MIN_CHUNK_WORK`` (the format's work units) holds, so a call of a
#: few large programs does not run dozens of empty ones.
MIN_ROWS = {"bound": 64, "exact": 1}
MIN_CHUNK_WORK = {"bound": 64 * 16384, "exact": 0}
_SCALARS = ("tokens_per_iteration", "model_flops_per_iteration", "peak_flops_per_s")


class _Format(NamedTuple):
    """How one level's kernel sees programs: sizes, rounded shapes, work, arrays."""

    shape: type  # Shape or BlockShape
    sizes: Callable  # programs -> int[N, fields of shape]
    rounded: Callable  # rows of sizes -> the rounded shapes that fit them
    work: Callable  # rows of rounded shapes -> work of one variant at that shape
    order: Callable  # rows of sizes -> sort key (neighbours share chunks)
    encode: Callable  # (programs, shape, *, dtype, num_variants) -> the kernel's arrays


def _exact_work(shapes: np.ndarray) -> np.ndarray:
    """Per-event work grows with tasks, edges and flows."""
    return shapes[..., 0] + shapes[..., 1] + shapes[..., 2]


def _format(level: str, step_cost: int, derived: Derived) -> _Format:
    if level == "exact":
        return _Format(Shape, program_sizes, program_shapes, _exact_work, predicted_size, encode)
    work = functools.partial(block_work, step_cost=step_cost)

    def sizes(programs):
        return block_sizes(programs, [derived.form(p, step_cost) for p in programs])

    def encoded(programs, shape, **kwargs):
        return encode_blocks([derived.layout(p, shape.width) for p in programs], shape, **kwargs)

    return _Format(BlockShape, sizes, block_shapes, work, work, encoded)


class _Config(NamedTuple):
    level: str
    dtype: type
    max_rounds: int
    with_metrics: bool
    task_times: bool
    vectorized: bool
    step_cost: int


def _buckets(sizes: np.ndarray, slots: np.ndarray, order: np.ndarray, min_members: int,
             fmt: _Format) -> list[np.ndarray]:
    """Cut the size-sorted variants into runs that each share one shape and slots.

    A run grows while its shape costs at most ``REUSE_FACTOR`` times its first
    member's own and so do its slots (the most any member needs), and always to
    ``min_members``, which bounds the number of shapes (compilations) of one call.
    """
    runs, begin = [], 0
    while begin < len(order):
        grown = np.maximum.accumulate(sizes[order[begin:]], axis=0)  # shape if the run ends here
        cost = fmt.work(fmt.rounded(grown))
        slot_cost = np.maximum.accumulate(slots[order[begin:]], axis=0).sum(axis=1)
        too_big = (cost > REUSE_FACTOR * cost[0]) | (slot_cost > REUSE_FACTOR * slot_cost[0])
        too_big[:min_members] = False
        end = begin + (int(np.argmax(too_big)) if too_big.any() else len(grown))
        runs.append(order[begin:end])
        begin = end
    return runs


class _Run:
    """One call of :func:`run_programs`: its configuration and the evaluator's state."""

    def __init__(self, cfg: _Config, fmt: _Format, executables: Executables,
                 derived: Derived):
        self.cfg, self.fmt, self.executables, self.derived = cfg, fmt, executables, derived

    def dispatch(self, programs: Sequence[Program], sizes: np.ndarray, with_metrics: bool,
                 slots: tuple[int, int], key: tuple, metric_dims: tuple) -> dict:
        """Encode one chunk at the (rows, *shape) ``key`` and start the kernels on it."""
        cfg, fmt, devices = self.cfg, self.fmt, self.executables.devices
        rows, shape = key[0], fmt.shape(*key[1:])
        if cfg.level == "exact":
            slots = (min(slots[0], shape.tasks + 1), min(slots[1], shape.flows))  # no more is used
        schedule, sharding = self.executables.scheduler(
            cfg.level, slots, cfg.max_rounds, cfg.vectorized and rows > len(devices))
        arrays = fmt.encode(programs, shape, dtype=cfg.dtype, num_variants=rows)
        out = schedule(jax.device_put(arrays, sharding))
        if with_metrics:
            index = pad_metric_index([self.derived.metric_index(p) for p in programs],
                                     shape.tasks, metric_dims, dtype=cfg.dtype,
                                     num_variants=rows)
            scalars = tuple(np.array([getattr(p, name) for p in programs]
                                     + [0.0] * (rows - len(programs)), cfg.dtype)
                            for name in _SCALARS)
            read, sharding = self.executables.metrics()
            out |= read(out["start_s"], out["end_s"], *jax.device_put((index, scalars), sharding))
        if not cfg.task_times:
            del out["start_s"], out["end_s"]
        overhead = padding_overhead(sizes, shape, rows)
        return out | {"padding_overhead": np.full(len(programs), overhead)}

    def chunks(self, programs: Sequence[Program], sizes: np.ndarray, order: np.ndarray,
               need: np.ndarray, chunk_size: int):
        """(variant indices, key, metric dims, slots) of every call: buckets of one shape
        and one number of slots (the most any member needs), in chunks."""
        cfg, fmt = self.cfg, self.fmt
        devices = len(self.executables.devices)
        min_members = max(-(-len(order) // MAX_BUCKETS), MIN_BUCKET[cfg.level])
        for run in _buckets(sizes, need, order, min_members, fmt):
            slots = tuple(int(n) for n in need[run].max(axis=0))
            shape = fmt.rounded(sizes[run].max(axis=0))
            least = min(MIN_ROWS[cfg.level], MIN_CHUNK_WORK[cfg.level] // int(fmt.work(shape)))
            rows = min(chunk_size, max(ladder(len(run)), least))
            rows = -(-rows // devices) * devices
            key = self.executables.fit(cfg, (rows, *(int(n) for n in shape), *slots), fmt.work)
            key, slots = key[:-2], key[-2:]
            metric_dims = (metric_index_dims([self.derived.metric_index(programs[i])
                                              for i in run]) if cfg.with_metrics else ())
            for begin in range(0, len(run), key[0]):
                yield run[begin: begin + key[0]], key, metric_dims, slots


def _put(target: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``target[rows] = values`` where the second axes may differ (padding: zeros)."""
    if target.ndim == 1:
        target[rows] = values
    else:
        width = min(target.shape[1], values.shape[1])
        target[rows] = 0
        target[rows, :width] = values[:, :width]


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
    cfg = _Config(level, DTYPES[dtype], max_rounds, with_metrics and n > 0, task_times,
                  VECTORIZED[platform][level], BLOCK_STEP_COST[platform])
    run = _Run(cfg, _format(level, cfg.step_cost, derived), executables, derived)
    sizes = run.fmt.sizes(programs)
    order = np.argsort(run.fmt.order(sizes), kind="stable")
    widths = dict.fromkeys(("start_s", "end_s"), max([p.num_tasks for p in programs] + [1]))
    widths |= dict.fromkeys(metrics.STREAM_METRICS,
                            max([p.num_streams for p in programs] + [1]))
    result: dict[str, np.ndarray] = {name: np.zeros(0, np.int32) for name in DIAGNOSTICS} | {
        "iteration_time_s": np.zeros(0, DTYPES[dtype]), "padding_overhead": np.zeros(0)
    } if n == 0 else {}
    finished = 0

    def store(idx: np.ndarray, started: dict) -> None:
        nonlocal finished
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
    schedule."""
    bound = run_programs(programs, "bound", executables=executables, derived=derived,
                         with_metrics=False, task_times=True)
    return np.array([exact_slots(p, bound["start_s"][i], bound["end_s"][i])
                     for i, p in enumerate(programs)], np.int64).reshape(-1, 2)
