"""The bound level: every flow alone on its path, then the max-plus schedule.

Why this is a lower bound on the exact iteration time (and on every task time):

1. In the exact model a flow waits its latency and then transfers at its max-min
   fair rate, which never exceeds the capacity of any link on its path. So it
   finishes no earlier than ``latency + bytes / (smallest capacity on its path)``
   after its task starts, and a COMM task lasts at least the largest of these
   over its flows (0 without flows). COMPUTE durations are the same in both.
2. Both levels start a task exactly when its last predecessor finishes (the IR
   spells stream order out as dependencies; nothing else queues). The schedule
   ``start[t] = max(end[p] for p in preds(t))``, ``end[t] = start[t] + d[t]`` is
   built from ``max`` and ``+`` only, so it is monotone in the durations.
3. By induction over the topological order, every exact start and end is at
   least the bound's, and so is the exact iteration time (the largest end).

The schedule is one ``lax.scan`` over the tasks in their (topological) order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array, lax

from .types import ProgramArrays, Schedule, Status


def contention_free_durations(p: ProgramArrays) -> Array:
    """Duration of every task with each flow alone at its path's bottleneck (float[T])."""
    num_tasks = p.task_duration_s.shape[0]
    inf = jnp.asarray(jnp.inf, p.link_capacity.dtype)
    hop_capacity = jnp.where(p.flow_path >= 0, p.link_capacity[jnp.maximum(p.flow_path, 0)], inf)
    flow_s = p.flow_latency_s + p.flow_bytes / jnp.min(hop_capacity, axis=1)
    comm_s = jax.ops.segment_max(flow_s, p.flow_task, num_segments=num_tasks)
    return jnp.where(p.task_is_comm, jnp.maximum(comm_s, 0), p.task_duration_s)


def max_plus_schedule(preds: Array, duration_s: Array) -> tuple[Array, Array]:
    """Start and end of every task when each starts as its last predecessor ends."""
    num_tasks = duration_s.shape[0]

    def body(end_s, task):
        t, pred, d = task
        start = jnp.max(jnp.where(pred >= 0, end_s[pred], 0), initial=0)
        return end_s.at[t].set(start + d), start

    end_s, start_s = lax.scan(
        body, jnp.zeros_like(duration_s), (jnp.arange(num_tasks), preds, duration_s))
    return start_s, end_s


def bound(p: ProgramArrays) -> Schedule:
    """Lower-bound schedule of one program (see the module docstring for the proof)."""
    start_s, end_s = max_plus_schedule(p.task_preds, contention_free_durations(p))
    zero = jnp.int32(0)
    return Schedule(start_s, end_s, jnp.max(end_s, initial=0), jnp.int32(Status.OK), zero,
                    zero, zero)
