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

The schedule is computed in one of two ways, with the same result (``max`` is
exact in floating point, so the order in which predecessors are folded in does
not change it):

* :func:`bound` reads the padded program: one ``lax.scan`` over the tasks in their
  (topological) order, each task preceded by its incoming dependency edges, so
  ``T + E`` sequential steps;
* :func:`blocked_bound` reads a :class:`BlockedProgram` laid out on the host
  (``xsweep.encode.block_layout``), the durations of point 1 already computed
  there in float64: a task's level is one more than its predecessors' highest,
  tasks of one level never depend on each other, so a block of up to ``W`` of
  them takes a single step (gather its predecessors' ends, take the maxima, add
  the durations). The steps number about the DAG's depth (more where a level
  holds more than ``W`` tasks). A task with more than ``D`` predecessors waits
  on zero-duration max nodes that each fold up to ``D`` of them; a max node ends
  at the largest end it folds, so the task starts at the same time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array, lax

from .types import BlockedProgram, ProgramArrays, Schedule, Status


def contention_free_durations(p: ProgramArrays) -> Array:
    """Duration of every task with each flow alone at its path's bottleneck (float[T])."""
    num_tasks = p.task_duration_s.shape[0]
    inf = jnp.asarray(jnp.inf, p.link_capacity.dtype)
    hop_capacity = jnp.where(p.flow_path >= 0, p.link_capacity[jnp.maximum(p.flow_path, 0)], inf)
    flow_s = p.flow_latency_s + p.flow_bytes / jnp.min(hop_capacity, axis=1)
    comm_s = jax.ops.segment_max(flow_s, p.flow_task, num_segments=num_tasks)
    return jnp.where(p.task_is_comm, jnp.maximum(comm_s, 0), p.task_duration_s)


def max_plus_schedule(dep_task: Array, dep_pred: Array,
                      duration_s: Array) -> tuple[Array, Array]:
    """Start and end of every task when each starts as its last predecessor ends.

    One ``lax.scan`` over the tasks in topological order, each task preceded by its
    incoming edges: an edge raises its task's start to its predecessor's end, the
    task's own item sets its end. ``dep_task`` must list the real edges first, in
    ascending task order (as the encoder writes them), then the padding.
    """
    dep_task, dep_pred, duration_s = (jnp.asarray(x) for x in (dep_task, dep_pred, duration_s))
    num_tasks, num_edges = duration_s.shape[0], dep_task.shape[0]
    real = dep_task >= 0
    edges_upto = jnp.cumsum(jax.ops.segment_sum(real.astype(jnp.int32), dep_task,
                                                num_segments=num_tasks), dtype=jnp.int32)
    # positions in the scan: edge e of task t after the items of tasks < t and edges < e
    edge_at = jnp.arange(num_edges, dtype=jnp.int32) + jnp.where(real, dep_task, num_tasks)
    task_at = edges_upto + jnp.arange(num_tasks, dtype=jnp.int32)
    size = num_edges + num_tasks
    item_task = jnp.full(size, -1, jnp.int32).at[edge_at].set(dep_task).at[task_at].set(
        jnp.arange(num_tasks, dtype=jnp.int32))
    item_pred = jnp.full(size, -1, jnp.int32).at[edge_at].set(dep_pred)

    def body(times, item):
        start_s, end_s = times
        task, pred = item
        t = jnp.maximum(task, 0)  # padding items rewrite task 0 with its own values
        start = jnp.where(pred >= 0, jnp.maximum(start_s[t], end_s[jnp.maximum(pred, 0)]),
                          start_s[t])
        end = jnp.where((task >= 0) & (pred < 0), start + duration_s[t], end_s[t])
        return (start_s.at[t].set(start), end_s.at[t].set(end)), None

    zeros = jnp.zeros_like(duration_s)
    (start_s, end_s), _ = lax.scan(body, (zeros, zeros), (item_task, item_pred))
    return start_s, end_s


def blocked_schedule(b: BlockedProgram, unroll: int = 1) -> tuple[Array, Array]:
    """Start and end of every task, one ``lax.scan`` step per block of independent nodes
    (``unroll`` steps per iteration of the compiled loop: the same results)."""
    num_blocks, width, _ = b.slot_pred.shape

    def body(end_s, block):
        index, pred, duration_s = block
        start_s = jnp.max(end_s[pred], axis=-1)  # slot 0, "no predecessor", holds 0
        # the block's slots are contiguous: one in-place write per step
        return lax.dynamic_update_slice(end_s, start_s + duration_s, (1 + index * width,)), start_s

    zeros = jnp.zeros(1 + num_blocks * width, b.slot_duration_s.dtype)
    end_s, start_s = lax.scan(body, zeros, (jnp.arange(num_blocks, dtype=jnp.int32),
                                            b.slot_pred, b.slot_duration_s), unroll=unroll)
    start_s = jnp.concatenate([zeros[:1], start_s.reshape(-1)])
    return start_s[b.task_slot], end_s[b.task_slot]


def _bound_schedule(start_s: Array, end_s: Array) -> Schedule:
    zero = jnp.int32(0)
    return Schedule(start_s, end_s, jnp.max(end_s, initial=0), jnp.int32(Status.OK), zero,
                    zero, zero)


def bound(p: ProgramArrays) -> Schedule:
    """Lower-bound schedule of one padded program (see the module docstring for the proof)."""
    return _bound_schedule(*max_plus_schedule(p.dep_task, p.dep_pred,
                                              contention_free_durations(p)))


def blocked_bound(b: BlockedProgram, unroll: int = 1) -> Schedule:
    """The same lower-bound schedule from a program's block layout; ``unroll`` steps per
    iteration of the compiled loop (static): fewer iterations, each the loop's fixed
    cost (on a GPU, a round trip to the host to test the loop's condition)."""
    return _bound_schedule(*blocked_schedule(b, unroll))
