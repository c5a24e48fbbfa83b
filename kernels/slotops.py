"""Reductions, prefix sums and range lookups over slot-sized arrays, in few operations.

The exact level's event loop works on arrays of tens to hundreds of slots and runs
about a hundred small operations per event. On a CPU each compiled operation is
dispatched on its own, and on short arrays the dispatch costs more than the
arithmetic, so what matters is how many operations the compiler makes of the
loop's body. These helpers are written to compile into few:

* a library prefix sum is a multi-level scan of several operations, so up to
  ``DENSE_MAX`` elements :func:`prefix_sum` is one masked sum over an ``n x n``
  triangle (``n * n`` work, which on short arrays costs less than the scan);
* :func:`owners` finds, for every position, the range that holds it, and
  :func:`inverse` the entry that holds each rank, by one comparison and reduction
  on short arrays, by a scatter (and a running maximum) on long ones, whose
  comparisons would grow with the square of the slots;
* :func:`scatter` and :func:`segment` update at computed indices either by XLA's
  scatter or one index after another; the second keeps a loop body free of scatters,
  which XLA's CPU compiler then emits as one function;
* :func:`hoisted` keeps a constant array out of the loop: the compiler would move a
  broadcast constant into the loop body and rebuild it at every event;
* :func:`reduce` and :func:`total` keep integer sums in their input's dtype, so a
  loop's carried counters keep their type under ``jax_enable_x64``.

Every helper gives the same integers as its plain form, on every backend.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array, lax

#: Longest array whose prefix sums are one triangular reduction, and most comparisons
#: (ranges x positions) :func:`owners` makes in one reduction. The work of both grows
#: with the square of the slots while the scan and the scatter that replace them grow
#: linearly, and a loop compiled whole (``xsweep.runtime.use_compiled_loops``) runs them
#: without a dispatch per operation. Measured on CPU, the exact kernel on four Llama-2-7B
#: programs at 16-64 task and 24-192 flow slots: 32 and 1,024 took 25% less time than 64
#: and 16,384 (the sum of thirteen runs: 84 ms against 112), 16 and 1,024 as little.
DENSE_MAX = 32
DENSE_OWNERS_MAX = DENSE_MAX * DENSE_MAX

_REDUCERS = {"max": jnp.max, "min": jnp.min, "any": jnp.any, "all": jnp.all}


def reduce(x: Array, kind: str) -> Array:
    """``kind`` (sum, max, min, any, all) of ``x`` over its last axis.

    Sums keep the input's dtype (int32 for bools), whatever ``jax_enable_x64`` says.
    """
    if kind != "sum":
        return _REDUCERS[kind](x, axis=-1)
    x = x.astype(jnp.int32) if x.dtype == jnp.bool_ else x
    return jnp.sum(x, axis=-1, dtype=x.dtype)


def total(x: Array, kind: str) -> Array:
    """``kind`` of every element of ``x`` (a scalar)."""
    return reduce(x.reshape(-1), kind)


def prefix_sum(x: Array) -> Array:
    """Inclusive prefix sums of an int or bool vector, as int32."""
    x = x.astype(jnp.int32)
    n = x.shape[0]
    if n > DENSE_MAX:
        return jnp.cumsum(x, dtype=jnp.int32)
    upto = jnp.arange(n)[None, :] <= jnp.arange(n)[:, None]  # [i, j]: j <= i
    return reduce(jnp.where(upto, x[None, :], 0), "sum")


def owners(first: Array, length: int, sequential: bool = False) -> Array:
    """For each position ``0..length-1``, the last entry whose ``first`` is at or before it.

    ``first`` holds non-decreasing start positions of consecutive ranges (entries
    with empty ranges may hold anything past ``length``); positions before every
    range get 0. Returns int32[length]. ``sequential``: as :func:`scatter`.
    """
    entries = jnp.arange(first.shape[0], dtype=jnp.int32)
    if first.shape[0] * length > DENSE_OWNERS_MAX:
        marks = scatter(jnp.zeros((length,), jnp.int32), first, entries, "max", sequential)
        return lax.cummax(marks)
    at_or_before = first[None, :] <= jnp.arange(length, dtype=jnp.int32)[:, None]
    return reduce(jnp.where(at_or_before, entries[None, :], 0), "max")


def inverse(rank: Array, length: int, sequential: bool = False) -> Array:
    """For each rank ``0..length-1``, the entry of ``rank`` that holds it (the last one
    if several do), -1 if none; entries outside ``0..length-1`` hold no rank.

    Up to ``DENSE_OWNERS_MAX`` comparisons (entries x ranks), one comparison and
    reduction; beyond, one scatter (``sequential``: as :func:`scatter`), since the
    comparisons grow with the product and the scatter with the entries alone.
    Returns int32[length].
    """
    entries = jnp.arange(rank.shape[0], dtype=jnp.int32)
    if rank.shape[0] * length > DENSE_OWNERS_MAX:
        inside = (rank >= 0) & (rank < length)
        return scatter(jnp.full((length,), -1, jnp.int32), jnp.where(inside, rank, length),
                       entries, "max", sequential)
    holds = rank[None, :] == jnp.arange(length, dtype=jnp.int32)[:, None]
    return reduce(jnp.where(holds, entries[None, :], -1), "max")


def hoisted(x: Array) -> Array:
    """``x``, computed where it is written and kept there, out of any loop using it."""
    return lax.optimization_barrier(x)


_COMBINE = {"add": jnp.add, "max": jnp.maximum, "min": jnp.minimum,
            "set": lambda old, new: new}


def scatter(target: Array, index: Array, values: Array, how: str,
            sequential: bool = False) -> Array:
    """``target.at[index].<how>(values, mode="drop")``: ``how`` is add, max, min or set;
    ``index`` holds no negative index, and one past the end changes nothing.

    ``sequential``: one update after another, each a slice read and written (a loop of
    ``len(index)`` short steps), instead of XLA's scatter. XLA's CPU compiler emits a
    loop whose body holds no scatter as one compiled function rather than an operation
    at a time (given ``xsweep.runtime.use_compiled_loops``), which for the exact level's
    event loop, tens of small operations per event, costs far less than the loop's own
    steps; under ``vmap`` (an accelerator's batch) a loop of slices would become a loop
    of scatters, so batched callers keep XLA's.
    """
    if not sequential:
        return getattr(target.at[index], how)(values, mode="drop")
    size, combine = target.shape[0], _COMBINE[how]
    values = jnp.broadcast_to(values, index.shape + target.shape[1:]).astype(target.dtype)

    def one(i, target):
        place = jnp.minimum(index[i], size - 1)
        at = (place,) + (jnp.zeros_like(place),) * (target.ndim - 1)
        old = lax.dynamic_slice(target, at, (1,) + target.shape[1:])
        inside = index[i] < size
        return lax.dynamic_update_slice(
            target, jnp.where(inside, combine(old, values[i][None]), old), at)

    return lax.fori_loop(0, index.shape[0], one, target)


def segment(values: Array, segments: Array, num_segments: int, how: str,
            sequential: bool = False) -> Array:
    """Per-segment ``how`` (add or min) of ``values`` (segments on the first axis), as
    ``jax.ops.segment_sum`` / ``segment_min``: empty segments hold 0 / the dtype's
    largest value. ``sequential``: as :func:`scatter`."""
    if not sequential:
        reduce_by = jax.ops.segment_sum if how == "add" else jax.ops.segment_min
        return reduce_by(values, segments, num_segments=num_segments)
    shape, dtype = (num_segments, *values.shape[1:]), values.dtype
    if how == "add":
        start = jnp.zeros(shape, dtype)
    else:
        largest = jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).max
        start = jnp.full(shape, largest, dtype)
    return scatter(start, segments, values, how, sequential=True)
