"""The exact level: lockstep event stepping, the simulator's semantics in one loop.

Each step of the ``lax.while_loop``:

1. water-fill the transferring flows, packed into ``slots`` slots
   (``jnp.nonzero(size=slots)``): more transferring flows than slots stops the
   variant with status ``OVERFLOW`` (the driver reruns it with more slots);
2. advance to the next event: the earliest compute end, latency end, or flow
   drain (remaining bytes / rate), and move every transferring flow's bytes;
3. *settle* the new instant: every event within a relative tolerance of it
   happens now (flows whose latency ended start transferring, drained flows and
   finished compute tasks complete, COMM tasks whose flows are all done complete),
   tasks whose last predecessor finished start (their flows begin their latency),
   and this repeats while a task that started finishes at once (zero-duration
   compute, COMM without timed flows), so such chains resolve at one instant.

Dependencies are counted down along the edge list (``pending`` per task), so a
settle pass costs ``T + E + F`` however many predecessors the widest task has.

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

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import Array, lax

from .types import ProgramArrays, Schedule, Status
from .waterfill import MAX_ROUNDS, waterfill

#: Events closer than this many machine epsilons of the current time coincide.
EVENT_RTOL_ULPS = 4

# Flow phases.
_IDLE, _LATENCY, _MOVING, _DONE = 0, 1, 2, 3


class _State(NamedTuple):
    now: Array
    start_s: Array
    end_s: Array
    started: Array
    done: Array
    pending: Array  # unfinished predecessors of each task
    phase: Array
    latency_end_s: Array
    left_bytes: Array
    steps: Array
    status: Array
    max_active_flows: Array
    max_rounds: Array


def max_steps(num_tasks: int, num_flows: int) -> int:
    """Steps that always suffice: each step completes at least one of T + 2F events."""
    return num_tasks + 2 * num_flows + 1


def exact(p: ProgramArrays, slots: int, max_rounds: int = MAX_ROUNDS) -> Schedule:
    """Exact schedule of one program under the program IR's fluid-flow semantics.

    Args:
      p: the program's padded arrays.
      slots: how many flows may transfer at once (static); more gives ``OVERFLOW``.
      max_rounds: water-filling round cap per step (static).
    """
    num_tasks, num_flows = p.task_duration_s.shape[0], p.flow_bytes.shape[0]
    dtype = p.link_capacity.dtype
    rtol = EVENT_RTOL_ULPS * jnp.finfo(dtype).eps
    inf = jnp.asarray(jnp.inf, dtype)
    flow_real = p.flow_task >= 0
    flow_owner = jnp.maximum(p.flow_task, 0)
    edge_real = p.dep_task >= 0
    edge_pred = jnp.maximum(p.dep_pred, 0)

    def per_task(values: Array, segments: Array) -> Array:
        return jax.ops.segment_sum(values.astype(jnp.int32), segments, num_segments=num_tasks)

    # Tasks that finish the instant they start: their successors start at that instant too.
    timed_flows = per_task(flow_real & ((p.flow_latency_s > 0) | (p.flow_bytes > 0)),
                           p.flow_task)
    instant = jnp.where(p.task_is_comm, timed_flows == 0, p.task_duration_s <= 0)

    def settle_body(carry):
        s, _ = carry
        due = s.now + s.now * rtol
        # events of this instant: latencies end, drained flows and finished tasks complete
        phase = jnp.where((s.phase == _LATENCY) & (s.latency_end_s <= due), _MOVING, s.phase)
        phase = jnp.where((phase == _MOVING) & (s.left_bytes <= 0), _DONE, phase)
        open_flows = per_task(flow_real & (phase != _DONE), p.flow_task)
        finished = s.started & ~s.done & jnp.where(
            p.task_is_comm, open_flows == 0, s.start_s + p.task_duration_s <= due)
        pending = s.pending - per_task(edge_real & finished[edge_pred], p.dep_task)
        # successors whose last predecessor finished start now, their flows begin
        ready = ~s.started & (pending == 0)
        begin = flow_real & ready[flow_owner]
        latency_end_s = jnp.where(begin, s.now + p.flow_latency_s, s.latency_end_s)
        phase = jnp.where(begin, jnp.where(latency_end_s > due, _LATENCY,
                                           jnp.where(p.flow_bytes > 0, _MOVING, _DONE)), phase)
        s = s._replace(start_s=jnp.where(ready, s.now, s.start_s), started=s.started | ready,
                       done=s.done | finished, end_s=jnp.where(finished, s.now, s.end_s),
                       pending=pending, phase=phase, latency_end_s=latency_end_s)
        return s, jnp.any(ready & instant)

    def settle(s: _State) -> _State:
        """Apply every event due now; repeat while tasks that start also finish now."""
        return lax.while_loop(lambda c: c[1], settle_body, (s, jnp.bool_(True)))[0]

    def running(s: _State) -> Array:
        return ~jnp.all(s.done) & (s.status <= Status.NOT_CONVERGED)

    def step(s: _State) -> _State:
        moving = s.phase == _MOVING
        num_moving = jnp.sum(moving, dtype=jnp.int32)
        slot = jnp.nonzero(moving, size=slots, fill_value=num_flows)[0]
        slot_on = slot < num_flows
        rates, converged, rounds = waterfill(
            p.link_capacity, p.flow_path.at[slot].get(mode="fill", fill_value=-1), slot_on,
            max_rounds)
        left = s.left_bytes.at[slot].get(mode="fill", fill_value=0)
        drain_s = jnp.where(slot_on & (rates > 0), left / jnp.where(rates > 0, rates, 1), inf)
        busy = s.started & ~s.done & ~p.task_is_comm
        next_s = jnp.minimum(
            jnp.min(jnp.where(busy, s.start_s + p.task_duration_s, inf)),
            jnp.min(jnp.where(s.phase == _LATENCY, s.latency_end_s, inf)))
        next_s = jnp.minimum(next_s, s.now + jnp.min(drain_s))
        dt = next_s - s.now
        drained = drain_s <= dt + next_s * rtol
        left = jnp.where(drained, 0, jnp.maximum(left - rates * dt, 0))
        overflow = num_moving > slots
        stuck = jnp.isinf(next_s)
        status = jnp.where(~converged & (s.status == Status.OK), Status.NOT_CONVERGED, s.status)
        status = jnp.where(stuck, Status.INFEASIBLE, status)
        status = jnp.where(overflow, Status.OVERFLOW, status)
        advance = ~(overflow | stuck)
        moved = s._replace(now=next_s, left_bytes=s.left_bytes.at[slot].set(left, mode="drop"))
        s = jax.tree.map(lambda new, old: jnp.where(advance, new, old), moved, s)
        s = s._replace(
            steps=s.steps + 1, status=status,
            max_active_flows=jnp.maximum(s.max_active_flows, num_moving),
            max_rounds=jnp.maximum(s.max_rounds, rounds))
        return s

    def settle_then_step(s: _State) -> _State:
        s = settle(s)
        return lax.cond(jnp.all(s.done), lambda x: x, step, s)

    zeros_t = jnp.zeros((num_tasks,), dtype)
    no_t = jnp.zeros((num_tasks,), bool)
    zero = jnp.int32(0)
    init = _State(jnp.asarray(0, dtype), zeros_t, zeros_t, no_t, no_t,
                  per_task(edge_real, p.dep_task),
                  jnp.full((num_flows,), _IDLE, jnp.int32), jnp.zeros((num_flows,), dtype),
                  p.flow_bytes, zero, jnp.int32(Status.OK), zero, zero)
    cap = max_steps(num_tasks, num_flows)
    s = lax.while_loop(lambda s: running(s) & (s.steps < cap), settle_then_step, init)
    status = jnp.where(running(s), Status.INFEASIBLE, s.status)
    return Schedule(jnp.where(s.started, s.start_s, s.now), jnp.where(s.done, s.end_s, s.now),
                    jnp.max(jnp.where(s.done, s.end_s, s.now), initial=0), status, s.steps,
                    s.max_active_flows, s.max_rounds)
