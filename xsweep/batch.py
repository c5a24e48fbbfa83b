"""Evaluate many programs with the JAX kernels: encode, bucket, chunk, shard, collect.

Programs are sorted by predicted size (tasks + flows) and cut into chunks of at
most ``chunk_size``; each chunk is encoded at its laddered shape, so neighbours in
size share a chunk (little padding, and the vmapped event loop waits little for
its slowest member) and similar chunks share compiled code. The chunk's variant
axis is padded to a multiple of the device count and split over all devices with
``shard_map``: each device runs its own loop, so one CPU, one GPU or eight run the
same code. Variants that overflow their flow slots are rerun with twice the slots.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from xsweep.encode import Shape, batch_shape, encode, ladder, padding_overhead, program_sizes
from xsweep.errors import InputError
from xsweep.kernels import MAX_ROUNDS, Schedule, Status, bound, exact
from xsweep.plan.program import Program

LEVELS = ("bound", "exact")
DTYPES = {"float32": np.float32, "float64": np.float64}
#: Variants per chunk: the exact loop runs every variant to its chunk's slowest, so
#: its chunks stay small; the bound is a fixed-length scan and likes big ones.
DEFAULT_CHUNK = {"bound": 4096, "exact": 64}
#: Initial flow slots of the exact level (measured programs keep <= 64 flows moving).
DEFAULT_SLOTS = 64

_AXIS = "variant"


@functools.lru_cache(maxsize=None)
def _kernel(level: str, slots: int, max_rounds: int, devices: tuple) -> tuple[Callable, NamedSharding]:
    """The jitted, vmapped, device-sharded kernel (one per configuration; jit caches shapes)."""
    single = bound if level == "bound" else functools.partial(
        exact, slots=slots, max_rounds=max_rounds)
    mesh = Mesh(np.array(devices), (_AXIS,))
    spec = PartitionSpec(_AXIS)
    batched = jax.shard_map(jax.vmap(single), mesh=mesh, in_specs=spec, out_specs=spec,
                            check_vma=False)  # kernels know nothing of the mesh
    return jax.jit(batched), NamedSharding(mesh, spec)


def _run(programs: Sequence[Program], level: str, shape: Shape, dtype, slots: int,
         max_rounds: int, devices: tuple) -> Schedule:
    """One chunk through the kernel; returns the Schedule as numpy arrays, real rows only."""
    rows = -(-ladder(len(programs)) // len(devices)) * len(devices)
    arrays = encode(programs, shape, dtype=dtype, num_variants=rows)
    fn, sharding = _kernel(level, min(slots, shape.flows) if level == "exact" else 0,
                           max_rounds, devices)
    out = fn(jax.device_put(arrays, sharding))
    return Schedule(*(np.array(x[: len(programs)]) for x in out))


def _run_with_retries(programs: Sequence[Program], level: str, dtype, slots: int,
                      max_rounds: int, devices: tuple) -> Schedule:
    """Run a chunk; rerun the variants that overflowed with twice the slots."""
    shape = batch_shape(program_sizes(programs))
    out = _run(programs, level, shape, dtype, slots, max_rounds, devices)
    overflow = np.flatnonzero(out.status == Status.OVERFLOW)
    if overflow.size:  # slots >= flows cannot overflow, so this ends
        again = _run_with_retries([programs[i] for i in overflow], level, dtype,
                                  max(2 * slots, 1), max_rounds, devices)
        for mine, theirs in zip(out, again, strict=True):
            if mine.ndim == 2:  # task times: the rerun's shape may be narrower
                mine[overflow] = 0
                mine[overflow, : theirs.shape[1]] = theirs
            else:
                mine[overflow] = theirs
    return out


def evaluate_programs(programs: Sequence[Program], level: str = "exact", *,
                      dtype: str = "float32", chunk_size: int | None = None,
                      devices: Sequence | None = None,
                      progress: Callable[[int, int], None] | None = None,
                      slots: int = DEFAULT_SLOTS, max_rounds: int = MAX_ROUNDS,
                      task_times: bool = False) -> dict[str, np.ndarray]:
    """Iteration time, status and diagnostics of every program, batched on all devices.

    Args:
      programs: the programs (any order; results come back in the same order).
      level: ``"bound"`` (contention-free lower bound) or ``"exact"``.
      dtype: ``"float32"`` or ``"float64"`` (runs under ``jax.enable_x64``).
      chunk_size: variants per kernel call (bounds memory); default per level.
      devices: devices to shard over (default: all of ``jax.devices()``).
      progress: called as ``progress(done, total)`` after each chunk.
      slots: initial flow slots of the exact level (doubled for variants that overflow).
      max_rounds: water-filling round cap per event.
      task_times: also return ``start_s`` and ``end_s``, float[N, most tasks], 0-padded.

    Returns:
      float arrays ``iteration_time_s`` (``inf`` for infeasible variants) and
      ``padding_overhead`` (of each variant's chunk); int arrays ``status``
      (``xsweep.kernels.Status`` codes), ``steps``, ``max_active_flows``,
      ``waterfill_rounds``; all over the variants.
    """
    if level not in LEVELS:
        raise InputError(None, "level", level, f"must be one of {', '.join(LEVELS)}")
    if dtype not in DTYPES:
        raise InputError(None, "dtype", dtype, f"must be one of {', '.join(DTYPES)}")
    devices = tuple(devices or jax.devices())
    chunk_size = chunk_size or DEFAULT_CHUNK[level]
    sizes = program_sizes(programs)
    order = np.argsort(sizes[:, 0] + sizes[:, 2], kind="stable")
    n = len(programs)
    float_dtype = DTYPES[dtype]
    result = {name: np.zeros(n, np.int32) for name in
              ("status", "steps", "max_active_flows", "waterfill_rounds")}
    result["iteration_time_s"] = np.zeros(n, float_dtype)
    result["padding_overhead"] = np.zeros(n)
    if task_times:
        width = int(sizes[:, 0].max(initial=0))
        result["start_s"] = np.zeros((n, width), float_dtype)
        result["end_s"] = np.zeros((n, width), float_dtype)
    x64 = jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()
    with x64:
        for begin in range(0, n, chunk_size):
            idx = order[begin: begin + chunk_size]
            chunk = [programs[i] for i in idx]
            out = _run_with_retries(chunk, level, float_dtype, slots, max_rounds, devices)
            result["status"][idx] = out.status
            result["steps"][idx] = out.steps
            result["max_active_flows"][idx] = out.max_active_flows
            result["waterfill_rounds"][idx] = out.max_rounds
            result["iteration_time_s"][idx] = np.where(
                out.status == Status.INFEASIBLE, np.inf, out.iteration_time_s)
            result["padding_overhead"][idx] = padding_overhead(
                sizes[idx], batch_shape(sizes[idx]))
            if task_times:
                result["start_s"][idx, : out.start_s.shape[1]] = out.start_s
                result["end_s"][idx, : out.end_s.shape[1]] = out.end_s
            if progress is not None:
                progress(min(begin + chunk_size, n), n)
    return result
