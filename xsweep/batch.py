"""Evaluate many programs with the JAX kernels: encode, bucket, chunk, shard, collect.

Programs are sorted by predicted size (tasks + flows) and cut into chunks of at
most ``chunk_size``; each chunk is encoded at its laddered shape, so neighbours in
size share a chunk (little padding, and the vmapped event loop waits little for
its slowest member) and similar chunks share compiled code. The chunk's variant
axis is padded to a multiple of the device count and split over all devices with
``shard_map``: each device runs its own loop, so one CPU, one GPU or eight run the
same code. Variants that overflow their flow slots are rerun with twice the slots.
The metrics of ``xsweep.metrics`` are computed on the device, inside the same call.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from xsweep import metrics
from xsweep.encode import (
    batch_shape,
    encode,
    encode_metric_index,
    ladder,
    padding_overhead,
    predicted_size,
    program_sizes,
)
from xsweep.errors import InputError
from xsweep.kernels import MAX_ROUNDS, ProgramArrays, Status, bound, exact
from xsweep.plan.program import Program

LEVELS = ("bound", "exact")
DTYPES = {"float32": np.float32, "float64": np.float64}
#: Variants per chunk and device, by platform. The exact loop runs every variant of
#: a chunk to its slowest member, and a CPU pays per element, so CPU chunks stay
#: small (measured on CPU; the accelerator sizes are first guesses, not measurements).
DEFAULT_CHUNK = {"cpu": {"bound": 256, "exact": 32}, "gpu": {"bound": 16384, "exact": 2048}}
#: Initial flow slots of the exact level; variants that need more are rerun with twice
#: as many (measured plans: median 12 flows under way at once, 99th percentile 96).
DEFAULT_SLOTS = 32
#: Diagnostics of the kernels, int32 per variant.
DIAGNOSTICS = ("status", "steps", "max_active_flows", "waterfill_rounds")

_AXIS = "variant"


def _evaluate_one(level: str, slots: int, max_rounds: int, with_metrics: bool,
                  task_times: bool, arrays: ProgramArrays, index: metrics.MetricIndex,
                  scalars: tuple) -> dict:
    """Schedule one program and read its metrics (the function that gets vmapped)."""
    schedule = bound(arrays) if level == "bound" else exact(arrays, slots, max_rounds)
    out = dict(zip(DIAGNOSTICS, (schedule.status, schedule.steps, schedule.max_active_flows,
                                 schedule.max_rounds), strict=True))
    out["iteration_time_s"] = schedule.iteration_time_s
    if with_metrics:
        per_stream = metrics.stream_metrics(jnp, index, schedule.start_s, schedule.end_s)
        per_stream = {name: jnp.where(index.stream_weight > 0, value, 0)
                      for name, value in per_stream.items()}
        out |= per_stream | metrics.summarize(jnp, index, per_stream, schedule.start_s,
                                              schedule.end_s, *scalars)
    if task_times:
        out |= {"start_s": schedule.start_s, "end_s": schedule.end_s}
    return out


@functools.cache
def _compiled(level: str, slots: int, max_rounds: int, with_metrics: bool, task_times: bool,
              devices: tuple) -> tuple[Callable, NamedSharding]:
    """The jitted, vmapped, device-sharded evaluation (one per configuration)."""
    single = functools.partial(_evaluate_one, level, slots, max_rounds, with_metrics,
                               task_times)
    mesh = Mesh(np.array(devices), (_AXIS,))
    spec = PartitionSpec(_AXIS)
    batched = jax.shard_map(jax.vmap(single), mesh=mesh, in_specs=spec, out_specs=spec,
                            check_vma=False)  # the kernels know nothing of the mesh
    return jax.jit(batched), NamedSharding(mesh, spec)


class _Config(NamedTuple):
    level: str
    dtype: type
    max_rounds: int
    with_metrics: bool
    task_times: bool
    devices: tuple


def _dispatch(programs: Sequence[Program], cfg: _Config, slots: int) -> dict:
    """Encode one chunk and start the kernel on it (asynchronously)."""
    shape = batch_shape(program_sizes(programs))
    rows = -(-ladder(len(programs)) // len(cfg.devices)) * len(cfg.devices)
    arrays = encode(programs, shape, dtype=cfg.dtype, num_variants=rows)
    index = encode_metric_index(programs, shape.tasks, dtype=cfg.dtype, num_variants=rows) \
        if cfg.with_metrics else None
    padding = [0.0] * (rows - len(programs))
    scalars = tuple(np.array([getattr(p, name) for p in programs] + padding, cfg.dtype)
                    for name in ("tokens_per_iteration", "model_flops_per_iteration",
                                 "peak_flops_per_s"))
    fn, sharding = _compiled(cfg.level, min(slots, shape.flows) if cfg.level == "exact" else 0,
                             cfg.max_rounds, cfg.with_metrics, cfg.task_times, cfg.devices)
    return fn(*jax.device_put((arrays, index, scalars), sharding))


def _collect(programs: Sequence[Program], cfg: _Config, slots: int,
             started: dict) -> dict[str, np.ndarray]:
    """Wait for a dispatched chunk; rerun its overflowed variants with twice the slots."""
    out = {name: np.array(value[: len(programs)]) for name, value in started.items()}
    overflow = np.flatnonzero(out["status"] == Status.OVERFLOW)
    if overflow.size:  # slots >= flows cannot overflow, so the reruns end
        again = [programs[i] for i in overflow]
        rerun = _collect(again, cfg, 2 * slots, _dispatch(again, cfg, 2 * slots))
        for name, value in out.items():
            _put(value, overflow, rerun[name])
    return out


def _put(target: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``target[rows] = values`` where the second axes may differ (padding: zeros)."""
    if target.ndim == 1:
        target[rows] = values
    else:
        width = min(target.shape[1], values.shape[1])
        target[rows] = 0
        target[rows, :width] = values[:, :width]


def evaluate_programs(programs: Sequence[Program], level: str = "exact", *,
                      dtype: str = "float32", chunk_size: int | None = None,
                      devices: Sequence | None = None,
                      progress: Callable[[int, int], None] | None = None,
                      slots: int = DEFAULT_SLOTS, max_rounds: int = MAX_ROUNDS,
                      with_metrics: bool = True, task_times: bool = False,
                      ) -> dict[str, np.ndarray]:
    """Iteration time, metrics, status and diagnostics of every program, on all devices.

    Args:
      programs: the programs (any order; results come back in the same order).
      level: ``"bound"`` (contention-free lower bound) or ``"exact"``.
      dtype: ``"float32"`` or ``"float64"`` (runs under ``jax.enable_x64``).
      chunk_size: variants per kernel call (bounds memory); default per level.
      devices: devices to shard over (default: all of ``jax.devices()``).
      progress: called as ``progress(done, total)`` after each chunk.
      slots: initial flow slots of the exact level (doubled for variants that overflow).
      max_rounds: water-filling round cap per event.
      with_metrics: compute the metrics of ``xsweep.metrics`` (the iteration time,
        status and diagnostics come back either way).
      task_times: also return ``start_s`` and ``end_s``, float[N, most tasks], 0-padded.

    Returns:
      Arrays over the variants: ``iteration_time_s`` (``inf`` where the status is
      infeasible); ``status`` (``xsweep.kernels.Status`` codes), ``steps``,
      ``max_active_flows``, ``waterfill_rounds`` (int32); ``padding_overhead`` of each
      variant's chunk; with metrics, every name of ``xsweep.metrics.RANK_METRICS`` as
      float[N, most streams] (0 past a program's streams) and the summaries of
      ``xsweep.metrics.summarize`` as float[N].
    """
    if level not in LEVELS:
        raise InputError(None, "level", level, f"must be one of {', '.join(LEVELS)}")
    if dtype not in DTYPES:
        raise InputError(None, "dtype", dtype, f"must be one of {', '.join(DTYPES)}")
    devices = tuple(devices or jax.devices())
    platform = "cpu" if devices[0].platform == "cpu" else "gpu"
    chunk_size = chunk_size or DEFAULT_CHUNK[platform][level] * len(devices)
    cfg = _Config(level, DTYPES[dtype], max_rounds, with_metrics, task_times, devices)
    sizes = program_sizes(programs)
    n = len(programs)
    order = np.argsort(predicted_size(sizes), kind="stable")
    chunks = [order[i: i + chunk_size] for i in range(0, n, chunk_size)]
    widths = dict.fromkeys(("start_s", "end_s"), int(sizes[:, 0].max(initial=1)))
    widths |= dict.fromkeys(metrics.RANK_METRICS, max([p.num_streams for p in programs] + [1]))
    result: dict[str, np.ndarray] = {"padding_overhead": np.zeros(n)}
    finished = 0

    def store(idx: np.ndarray, started: dict) -> None:
        nonlocal finished
        out = _collect([programs[i] for i in idx], cfg, slots, started)
        for name, value in out.items():
            if name not in result:
                result[name] = np.zeros((n,) if value.ndim == 1 else (n, widths[name]),
                                        value.dtype)
            _put(result[name], idx, value)
        result["padding_overhead"][idx] = padding_overhead(sizes[idx], batch_shape(sizes[idx]))
        finished += len(idx)
        if progress is not None:
            progress(finished, n)

    x64 = jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()
    with x64:
        # keep one chunk in flight: the next one is encoded while the device computes
        in_flight = None
        for idx in chunks:
            started = (idx, _dispatch([programs[i] for i in idx], cfg, slots))
            if in_flight is not None:
                store(*in_flight)
            in_flight = started
        if in_flight is not None:
            store(*in_flight)
    if "iteration_time_s" in result:
        result["iteration_time_s"][result["status"] == Status.INFEASIBLE] = np.inf
    return result
