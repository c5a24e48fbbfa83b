"""The exact level: lockstep event stepping, the simulator's semantics in one loop.

Flows live in ``slots`` slots from the moment their task starts (latency) until
they drain; everything per event works on the slots, the tasks and the edges, never
on all ``F`` flows. Each step of the ``lax.while_loop``:

1. *settle* the current instant: every event within a relative tolerance of it
   happens now (latencies end, drained flows and finished compute tasks complete,
   COMM tasks whose flows are all done complete), tasks whose last predecessor
   finished start, and the flows of a starting COMM task are packed into free
   slots. One COMM task is placed per pass (so placing needs a prefix sum over the
   slots only); passes repeat at the same instant while COMM tasks wait or while
   a task that started also finishes at once (zero-duration compute, COMM without
   timed flows);
2. water-fill the transferring slots;
3. advance to the next event: the earliest compute end, latency end, or flow
   drain (remaining bytes / rate), and move every transferring flow's bytes.

A COMM task whose flows do not fit in the free slots stops the variant with
status ``OVERFLOW``; the driver reruns it with more slots.

Every step completes at least one event (the earliest one is within tolerance of
itself), so a program with ``T`` tasks and ``F`` flows needs at most ``T + 2F``
steps; that is the step cap, and reaching it or running out of events before
every task is done gives status ``INFEASIBLE``.

Precision: times are absolute (``start + duration``, ``start + latency``), never
sums of step lengths; events closer than ``EVENT_RTOL_ULPS`` machine epsilons
(relative to the current time) coincide. With float32 the task times differ from
a float64 simulation by about 1e-6 of the iteration time.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import Array, lax

from .types import ProgramArrays, Schedule, Status
from .waterfill import MAX_ROUNDS, packed_waterfill, waterfill

#: Events closer than this many machine epsilons of the current time coincide.
EVENT_RTOL_ULPS = 4
#: Blocks of tasks whose COMM tasks one settling pass places (see ``_pick_blocks``).
PLACE_BLOCKS = 16


class _State(NamedTuple):
    now: Array
    start_s: Array  # [T]
    end_s: Array  # [T]
    started: Array  # [T]
    done: Array  # [T]
    pending: Array  # [T], unfinished predecessors
    open_flows: Array  # [T], unfinished flows
    slot_flow: Array  # [K], flow id, F when free
    slot_task: Array  # [K], its task, -1 when free
    slot_moving: Array  # [K], latency over: transferring
    slot_latency_end_s: Array  # [K]
    slot_left_bytes: Array  # [K]
    slot_path: Array  # [K, P]
    steps: Array
    status: Array
    max_active_flows: Array
    max_rounds: Array


def _pick_blocks(need: Array) -> tuple[Array, Array, Array]:
    """The tasks whose flows one pass places: those of the first few blocks that need any.

    Finding each flow's slot takes a prefix sum over the tasks placed. Over all ``T``
    tasks that would cost more than the rest of a pass (a prefix sum is slow on a
    CPU), so the tasks go in blocks of ``B`` and a pass takes the first
    ``PLACE_BLOCKS`` blocks holding a ready COMM task: two prefix sums of about
    ``sqrt(T)`` each. Tasks of later blocks wait for another pass at the same instant.

    Args:
      need: int32[T], flows each task would place now (0 for most).

    Returns:
      ``(task, task_need, picked)``: ids and needs of the picked blocks' tasks
      (int32[M * B], in task order; ids past ``T`` are padding with need 0), and
      bool[T], which tasks lie in a picked block.
    """
    num_tasks = need.shape[0]
    width = max(8, 1 << round(math.log2(max(num_tasks / PLACE_BLOCKS, 1)) / 2))
    num_blocks = -(-num_tasks // width)
    count = min(PLACE_BLOCKS, num_blocks)
    blocks = jnp.pad(need, (0, num_blocks * width - num_tasks)).reshape(num_blocks, width)
    has = jnp.any(blocks > 0, axis=1)
    order = jnp.cumsum(has, dtype=jnp.int32) - 1
    block_ids = jnp.arange(num_blocks, dtype=jnp.int32)
    chosen = jnp.full((count,), num_blocks, jnp.int32).at[
        jnp.where(has, order, count)].set(block_ids, mode="drop")
    task_need = jnp.take(blocks, chosen, axis=0, mode="fill", fill_value=0).reshape(-1)
    task = (chosen[:, None] * width + jnp.arange(width, dtype=jnp.int32)).reshape(-1)
    picked = jnp.repeat(has & (order < count), width, total_repeat_length=num_blocks * width)
    return task, task_need, picked[:num_tasks]


def max_steps(num_tasks: int, num_flows: int) -> int:
    """Steps that always suffice: each step completes at least one of T + 2F events."""
    return num_tasks + 2 * num_flows + 1


def exact(p: ProgramArrays, slots: int, max_rounds: int = MAX_ROUNDS,
          batched: bool = True) -> Schedule:
    """Exact schedule of one program under the program IR's fluid-flow semantics.

    Args:
      p: the program's padded arrays.
      slots: how many flows may be under way at once (static); more gives ``OVERFLOW``.
      max_rounds: water-filling round cap per step (static).
      batched: whether the caller vmaps this (static). Unbatched, each step
        water-fills only a prefix of packed slots that holds the moving flows
        (:func:`~xsweep.kernels.waterfill.packed_waterfill`), a real branch outside
        ``vmap``; batched, all slots every time. Results are the same.
    """
    fill = waterfill if batched else packed_waterfill
    num_tasks, num_flows = p.task_duration_s.shape[0], p.flow_bytes.shape[0]
    dtype = p.link_capacity.dtype
    rtol = EVENT_RTOL_ULPS * jnp.finfo(dtype).eps
    inf = jnp.asarray(jnp.inf, dtype)
    flow_real = p.flow_task >= 0
    edge_pred = jnp.maximum(p.dep_pred, 0)

    def per_task(values: Array, segments: Array) -> Array:
        """Per-task counts of ``values``; segments of -1 count nowhere."""
        return jax.ops.segment_sum(values.astype(jnp.int32), segments, num_segments=num_tasks)

    flow_count = per_task(flow_real, p.flow_task)
    # a task's flows are contiguous: the first one is its count's exclusive prefix sum
    flow_first = jnp.cumsum(flow_count, dtype=jnp.int32) - flow_count
    # tasks that finish the instant they start: their successors start then too
    timed = per_task(flow_real & ((p.flow_latency_s > 0) | (p.flow_bytes > 0)), p.flow_task)
    instant = jnp.where(p.task_is_comm, timed == 0, p.task_duration_s <= 0)

    def settle_body(carry):
        s, _ = carry
        due = s.now + s.now * rtol
        # flow events: latencies end, drained flows finish and free their slots
        live = s.slot_flow < num_flows
        moving = live & (s.slot_moving | (s.slot_latency_end_s <= due))
        drained = live & moving & (s.slot_left_bytes <= 0)
        open_flows = s.open_flows - per_task(drained, s.slot_task)
        slot_flow = jnp.where(drained, num_flows, s.slot_flow)
        # task events
        finished = s.started & ~s.done & jnp.where(
            p.task_is_comm, open_flows == 0, s.start_s + p.task_duration_s <= due)
        pending = s.pending - per_task(finished[edge_pred], p.dep_task)
        ready = ~s.started & (pending == 0)
        # start every ready task; the flows of the ready COMM tasks, in task order, go
        # to the free slots in slot order: free slot r takes the r-th of those flows
        need = jnp.where(ready & p.task_is_comm, flow_count, 0)
        task, task_need, picked = _pick_blocks(need)
        before = jnp.cumsum(task_need, dtype=jnp.int32)  # flows of the picked tasks up to each
        free = slot_flow == num_flows
        rank = jnp.cumsum(free, dtype=jnp.int32) - 1
        overflow = before[-1] > rank[-1] + 1
        take = free & (rank < before[-1]) & ~overflow
        # the picked task owning the r-th placed flow: the last whose first flow is at r
        # or before
        first_rank = jnp.where(task_need > 0, before - task_need, slots)
        owner = lax.cummax(jnp.zeros((slots,), jnp.int32).at[first_rank].max(
            jnp.arange(task.shape[0], dtype=jnp.int32), mode="drop"))[jnp.clip(rank, 0, slots - 1)]
        flow = jnp.where(take, flow_first[task[owner]] + rank - (before[owner] - task_need[owner]),
                         0)
        latency_end_s = s.now + p.flow_latency_s[flow]
        starts = ready & ~overflow & (picked | (need == 0))
        s = s._replace(
            start_s=jnp.where(starts, s.now, s.start_s), started=s.started | starts,
            done=s.done | finished, end_s=jnp.where(finished, s.now, s.end_s),
            pending=pending, open_flows=open_flows,
            slot_flow=jnp.where(take, flow, slot_flow),
            slot_task=jnp.where(take, task[owner], jnp.where(drained, -1, s.slot_task)),
            slot_moving=jnp.where(take, latency_end_s <= due, moving & ~drained),
            slot_latency_end_s=jnp.where(take, latency_end_s, s.slot_latency_end_s),
            slot_left_bytes=jnp.where(take, p.flow_bytes[flow], s.slot_left_bytes),
            slot_path=jnp.where(take[:, None], p.flow_path[flow], s.slot_path),
            status=jnp.where(overflow, Status.OVERFLOW, s.status))
        # pass again at this instant while ready COMM tasks wait for the next blocks, a
        # started task is already over, or a placed flow needs no time at all
        again = (jnp.any(ready & ~starts) | jnp.any(starts & instant)
                 | jnp.any(take & (latency_end_s <= due) & (p.flow_bytes[flow] <= 0)))
        return s, again & ~overflow

    def running(s: _State) -> Array:
        return ~jnp.all(s.done) & (s.status <= Status.NOT_CONVERGED)

    def step(s: _State) -> _State:
        live = s.slot_flow < num_flows
        moving = live & s.slot_moving
        rates, converged, rounds = fill(p.link_capacity, s.slot_path, moving, max_rounds)
        drain_s = jnp.where(moving & (rates > 0),
                            s.slot_left_bytes / jnp.where(rates > 0, rates, 1), inf)
        busy = s.started & ~s.done & ~p.task_is_comm
        next_s = jnp.minimum(
            jnp.min(jnp.where(busy, s.start_s + p.task_duration_s, inf)),
            jnp.min(jnp.where(live & ~s.slot_moving, s.slot_latency_end_s, inf)))
        next_s = jnp.minimum(next_s, s.now + jnp.min(drain_s))
        dt = next_s - s.now
        left = jnp.where(drain_s <= dt + next_s * rtol, 0,
                         jnp.maximum(s.slot_left_bytes - rates * dt, 0))
        stuck = jnp.isinf(next_s)
        status = jnp.where(~converged & (s.status == Status.OK), Status.NOT_CONVERGED, s.status)
        return s._replace(
            now=jnp.where(stuck, s.now, next_s),
            slot_left_bytes=jnp.where(moving & ~stuck, left, s.slot_left_bytes),
            steps=s.steps + 1, status=jnp.where(stuck, Status.INFEASIBLE, status),
            max_active_flows=jnp.maximum(s.max_active_flows, jnp.sum(moving, dtype=jnp.int32)),
            max_rounds=jnp.maximum(s.max_rounds, rounds))

    def settle_then_step(carry):
        """One settling pass; when the instant is settled, also step to the next event."""
        s, again = settle_body(carry)
        return lax.cond(again | ~running(s), lambda x: x, step, s), again

    zeros_t = jnp.zeros((num_tasks,), dtype)
    no_t = jnp.zeros((num_tasks,), bool)
    zero = jnp.int32(0)
    init = _State(
        jnp.asarray(0, dtype), zeros_t, zeros_t, no_t, no_t, per_task(p.dep_task >= 0, p.dep_task),
        flow_count, jnp.full((slots,), num_flows, jnp.int32), jnp.full((slots,), -1, jnp.int32),
        jnp.zeros((slots,), bool), jnp.zeros((slots,), dtype), jnp.zeros((slots,), dtype),
        jnp.full((slots, p.flow_path.shape[1]), -1, jnp.int32), zero, jnp.int32(Status.OK),
        zero, zero)
    cap = max_steps(num_tasks, num_flows)
    s, _ = lax.while_loop(lambda c: (running(c[0]) | c[1]) & (c[0].steps < cap),
                          settle_then_step, (init, jnp.bool_(True)))
    status = jnp.where(running(s), Status.INFEASIBLE, s.status)
    return Schedule(jnp.where(s.started, s.start_s, s.now), jnp.where(s.done, s.end_s, s.now),
                    jnp.max(jnp.where(s.done, s.end_s, s.now), initial=0), status, s.steps,
                    s.max_active_flows, s.max_rounds)
