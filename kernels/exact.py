"""The exact level: lockstep event stepping, the simulator's semantics in one loop.

The loop never sweeps all ``T`` tasks or ``E`` dependencies: every step works on
three small sets of slots, and writes task times by scatters. A large program
(thousands of tasks) costs per event about what a small one does.

* ``R`` *task slots* hold the tasks under way: started, or finished but with
  successors not yet told (each slot keeps a cursor into its task's successor list);
* ``K`` *flow slots* hold the flows under way, from the moment their task starts
  (latency) until they drain;
* a *release budget* of ``R`` successor edges per pass: finishing tasks tell their
  successors, and a task whose last predecessor is told starts at once.

A program's flows under way outnumber its tasks under way several times (a
collective is one task of many flows), so the two kinds of slots are sized apart.

Each iteration of the ``lax.while_loop`` is one *settling pass* at the current
instant, then, once the instant is settled, one *step* to the next event:

1. settle: every event within a relative tolerance of now happens (latencies end,
   drained flows free their slots, compute tasks reach their end, COMM tasks with
   no open flow finish); finished tasks release successor edges; tasks whose
   pending-predecessor count reaches zero take a task slot and start, COMM tasks
   placing their flows in free flow slots. Another pass follows at the same instant
   while edges wait for the release budget, a started task is already over
   (zero-duration compute, COMM without timed flows) or a placed flow takes no time;
2. water-fill the transferring flows;
3. advance to the next event: the earliest compute end, latency end, or flow drain
   (remaining bytes / rate), and move every transferring flow's bytes.

A task or flow that finds no free slot stops the variant with status ``OVERFLOW``;
the driver reruns it with more slots (task slots above the number of tasks and
flow slots at the number of flows never overflow). Tasks that can start at time 0
are the successors of a virtual source task that occupies slot 0 at the start.

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

from .slotops import hoisted, owners, prefix_sum, reduce, total
from .types import ProgramArrays, Schedule, Status
from .waterfill import MAX_ROUNDS, packed_waterfill, waterfill

#: Events closer than this many machine epsilons of the current time coincide.
EVENT_RTOL_ULPS = 4


class _State(NamedTuple):
    now: Array
    start_s: Array  # [T], -1 until started
    end_s: Array  # [T], -1 until finished
    pending: Array  # [T], predecessors not yet told
    claim: Array  # [T], the last telling of each task (its number among all tellings)
    num_told: Array  # successor edges told so far
    num_done: Array  # real tasks finished
    run_task: Array  # [R], task id, T for the source, -1 when free
    run_done: Array  # [R], finished, successors being told
    run_cursor: Array  # [R], successors told so far
    run_end_s: Array  # [R], end of a compute task, inf for COMM
    run_open: Array  # [R], a COMM task's flows not yet drained
    slot_flow: Array  # [K], flow id, F when free
    slot_run: Array  # [K], its task's slot, -1 when free
    slot_moving: Array  # [K], latency over: transferring
    slot_latency_end_s: Array  # [K]
    slot_left_bytes: Array  # [K]
    steps: Array
    status: Array
    max_active_flows: Array
    max_rounds: Array


#: The fields of the flow slots.
_FLOW_FIELDS = ("slot_flow", "slot_run", "slot_moving", "slot_latency_end_s", "slot_left_bytes")


def _flow_fields(s: _State) -> dict:
    return {name: getattr(s, name) for name in _FLOW_FIELDS}


#: The fields of the state a step changes.
_STEPPED = ("now", "slot_left_bytes", "steps", "status", "max_active_flows", "max_rounds")


def _stepped(s: _State) -> tuple:
    return tuple(getattr(s, name) for name in _STEPPED)


def max_steps(num_tasks: int, num_flows: int) -> int:
    """Steps that always suffice: each step completes at least one of T + 2F events."""
    return num_tasks + 2 * num_flows + 1


def _successors(p: ProgramArrays) -> tuple[Array, Array, Array, Array]:
    """Successor lists of every task and of the virtual source (index ``T``).

    Returns ``(succ, first, count, in_degree)``: ``succ`` int32[E + T], the
    dependency edges' tasks grouped by predecessor, then the tasks without
    predecessors (the source's); ``first`` and ``count`` int32[T + 1], each task's
    range in ``succ``; ``in_degree`` int32[T].
    """
    num_tasks, num_edges = p.task_duration_s.shape[0], p.dep_task.shape[0]
    real = p.dep_task >= 0
    by_pred = jnp.argsort(jnp.where(real, p.dep_pred, num_tasks), stable=True)
    in_degree = jax.ops.segment_sum(real.astype(jnp.int32), p.dep_task, num_segments=num_tasks)
    out_degree = jax.ops.segment_sum(real.astype(jnp.int32), p.dep_pred, num_segments=num_tasks)
    root = p.task_valid & (in_degree == 0)
    roots = jnp.nonzero(root, size=num_tasks, fill_value=0)[0].astype(jnp.int32)
    count = jnp.concatenate([out_degree, jnp.sum(root, dtype=jnp.int32)[None]])
    first = jnp.cumsum(count, dtype=jnp.int32) - count
    first = first.at[num_tasks].set(num_edges)  # the source's list follows the edges
    return jnp.concatenate([p.dep_task[by_pred], roots]), first, count, in_degree


def exact(p: ProgramArrays, slots: int | tuple[int, int], max_rounds: int = MAX_ROUNDS,
          batched: bool = True) -> Schedule:
    """Exact schedule of one program under the program IR's fluid-flow semantics.

    Args:
      p: the program's padded arrays.
      slots: ``(tasks, flows)``, the task slots (also the successor edges released
        per pass) and the flow slots, or one number for both (static; each capped at
        what the program has); too few gives ``OVERFLOW``.
      max_rounds: water-filling round cap per step (static).
      batched: whether the caller vmaps this (static). Unbatched, each step
        water-fills only a prefix of packed slots that holds the moving flows
        (:func:`~xsweep.kernels.waterfill.packed_waterfill`), a real branch outside
        ``vmap``; batched, all slots every time. Results are the same.
    """
    fill = packed_waterfill if not batched else (
        lambda capacity, paths, flows, *rest: waterfill(capacity, paths[flows], *rest))
    num_tasks, num_flows = p.task_duration_s.shape[0], p.flow_bytes.shape[0]
    task_slots, flow_slots = (slots, slots) if isinstance(slots, int) else slots
    run_slots, flow_slots = min(task_slots, num_tasks + 1), min(flow_slots, num_flows)
    budget = run_slots
    dtype = p.link_capacity.dtype
    rtol = EVENT_RTOL_ULPS * jnp.finfo(dtype).eps
    inf = jnp.asarray(jnp.inf, dtype)
    flow_real = p.flow_task >= 0

    def per_task(values: Array, segments: Array) -> Array:
        """Per-task counts of ``values``; segments of -1 count nowhere."""
        return jax.ops.segment_sum(values.astype(jnp.int32), segments, num_segments=num_tasks)

    flow_count = per_task(flow_real, p.flow_task)
    # a task's flows are contiguous: the first one is its count's exclusive prefix sum
    flow_first = jnp.cumsum(flow_count, dtype=jnp.int32) - flow_count
    # tasks that finish the instant they start: their successors start then too
    timed = per_task(flow_real & ((p.flow_latency_s > 0) | (p.flow_bytes > 0)), p.flow_task)
    instant = jnp.where(p.task_is_comm, timed == 0, p.task_duration_s <= 0)
    succ, succ_first, succ_count, in_degree = _successors(p)
    # constants the loop reads, built once (see slotops.hoisted)
    positions = hoisted(jnp.arange(budget, dtype=jnp.int32))
    minus_ones = hoisted(jnp.full((budget,), -1, jnp.int32))
    minus_ones_k = hoisted(jnp.full((flow_slots,), -1, jnp.int32))

    def events(s: _State, due: Array) -> _State:
        """Flow and task events due now: latencies end, drained flows free their slots,
        compute tasks reach their end, COMM tasks with no open flow finish."""
        live = s.slot_flow < num_flows
        moving = live & (s.slot_moving | (s.slot_latency_end_s <= due))
        drained = live & moving & (s.slot_left_bytes <= 0)
        run_open = s.run_open.at[jnp.where(drained, s.slot_run, run_slots)].add(
            minus_ones_k, mode="drop")
        task = jnp.maximum(s.run_task, 0)
        is_task = (s.run_task >= 0) & (s.run_task < num_tasks)
        finished = is_task & ~s.run_done & jnp.where(p.task_is_comm[jnp.minimum(
            task, num_tasks - 1)], run_open == 0, s.run_end_s <= due)
        return s._replace(
            end_s=s.end_s.at[jnp.where(finished, task, num_tasks)].set(
                jnp.where(finished, s.now, 0), mode="drop"),
            num_done=s.num_done + total(finished, "sum"),
            run_done=s.run_done | finished, run_open=run_open,
            slot_flow=jnp.where(drained, num_flows, s.slot_flow),
            slot_run=jnp.where(drained, -1, s.slot_run), slot_moving=moving & ~drained)

    def release(s: _State, due: Array) -> tuple[_State, Array]:
        """Finished tasks tell their successors; ready tasks start; whether to pass again."""
        # finished tasks tell up to `budget` successors, slot by slot
        task = jnp.maximum(s.run_task, 0)
        left = jnp.where(s.run_done, succ_count[task] - s.run_cursor, 0)
        told_upto = prefix_sum(left)
        told_before = told_upto - left
        owner = owners(jnp.where(left > 0, told_before, budget), budget)
        told = positions < told_upto[-1]
        edge = succ_first[task[owner]] + s.run_cursor[owner] + positions - told_before[owner]
        succ_task = jnp.where(told, succ[jnp.where(told, edge, 0)], num_tasks)
        run_cursor = s.run_cursor + jnp.clip(budget - told_before, 0, left)
        freed = s.run_done & (run_cursor == succ_count[task])
        pending = s.pending.at[succ_task].add(minus_ones, mode="drop")
        # a task told twice in one pass starts once: by its last telling, known by its
        # telling's number, which grows from pass to pass, so no reset is needed (a
        # reset would be a second scatter after a gather, for which XLA copies [T])
        telling = s.num_told + positions
        claim = s.claim.at[succ_task].max(telling, mode="drop")
        ready = told & (pending[succ_task] == 0) & (claim[succ_task] == telling)
        # ready tasks take free task slots in order: the one of rank r among the ready
        # the free slot of rank r; each slot looks up the task it takes
        free_run = (s.run_task < 0) | freed
        free_upto, ready_upto = prefix_sum(free_run), prefix_sum(ready)
        run_rank = jnp.where(free_run, free_upto - 1, budget)  # budget: matches no rank
        new_rank = jnp.where(ready, ready_upto - 1, -1)
        overflow = ready_upto[-1] > free_upto[-1]
        new = ready & ~overflow
        new_task = jnp.minimum(succ_task, num_tasks - 1)
        need = jnp.where(new & p.task_is_comm[new_task], flow_count[new_task], 0)
        none = jnp.bool_(False)
        placed, flow_overflow, zero_flow = maybe(
            total(need, "sum") > 0, place, lambda s, *_: (_flow_fields(s), none, none),
            s, need, new_task, new_rank, run_rank, due)
        overflow |= flow_overflow
        new &= ~flow_overflow
        # the telling position each slot takes its task from, -1 for none
        source = reduce(jnp.where(new[None, :] & (new_rank[None, :] == run_rank[:, None]),
                                  positions[None, :], -1), "max")
        takes = source >= 0
        taken = new_task[jnp.maximum(source, 0)]
        s = s._replace(
            start_s=s.start_s.at[jnp.where(new, new_task, num_tasks)].set(
                jnp.where(new, s.now, 0), mode="drop"),
            pending=pending, claim=claim, num_told=s.num_told + jnp.minimum(told_upto[-1], budget),
            run_task=jnp.where(takes, taken, jnp.where(freed, -1, s.run_task)),
            run_done=s.run_done & ~freed & ~takes,
            run_cursor=jnp.where(takes | freed, 0, run_cursor),
            run_end_s=jnp.where(takes, jnp.where(p.task_is_comm[taken], inf,
                                                 s.now + p.task_duration_s[taken]), s.run_end_s),
            run_open=jnp.where(takes, flow_count[taken], s.run_open),
            status=jnp.where(overflow, Status.OVERFLOW, s.status), **placed)
        # pass again at this instant while edges wait to be told, a started task is
        # already over, or a placed flow needs no time at all
        again = total(jnp.stack([s.run_done, new & instant[new_task]]), "any")
        return s, (again | zero_flow) & ~overflow

    def place(s: _State, need: Array, new_task: Array, new_rank: Array, run_rank: Array,
              due: Array) -> tuple[dict, Array, Array]:
        """The flows of starting COMM tasks (``need`` of each telling position) take free
        flow slots: the flow fields after, whether they overflow, and whether a placed
        flow needs no time at all. (On overflow, the caller starts no task.)"""
        need_upto = prefix_sum(need)
        need_before = need_upto - need
        free = s.slot_flow == num_flows
        rank = prefix_sum(free) - 1
        overflow = need_upto[-1] > rank[-1] + 1
        take = free & (rank < need_upto[-1]) & ~overflow
        # each taking slot's telling position: the last one whose flows start at or
        # before its rank
        placer = owners(jnp.where(need > 0, need_before, flow_slots), flow_slots)[
            jnp.clip(rank, 0, flow_slots - 1)]
        flow = jnp.where(take, flow_first[new_task[placer]] + rank - need_before[placer], 0)
        # the task slot of each telling position: the free slot of its rank
        slot_of = reduce(jnp.where(run_rank[None, :] == new_rank[:, None],
                                   positions[None, :], -1), "max")
        latency_end_s = s.now + p.flow_latency_s[flow]
        fields = dict(
            slot_flow=jnp.where(take, flow, s.slot_flow),
            slot_run=jnp.where(take, slot_of[placer], s.slot_run),
            slot_moving=jnp.where(take, latency_end_s <= due, s.slot_moving),
            slot_latency_end_s=jnp.where(take, latency_end_s, s.slot_latency_end_s),
            slot_left_bytes=jnp.where(take, p.flow_bytes[flow], s.slot_left_bytes))
        zero_flow = total(take & (latency_end_s <= due) & (p.flow_bytes[flow] <= 0), "any")
        return fields, overflow, zero_flow

    def maybe(pred: Array, then, otherwise, *args):
        """``then(*args)`` where ``pred``, else ``otherwise(*args)``: a real branch
        unbatched; batched (where ``vmap`` would run both sides anyway), ``then`` alone,
        which must then equal ``otherwise`` where ``pred`` is false."""
        return then(*args) if batched else lax.cond(pred, then, otherwise, *args)

    def settle(carry):
        """One settling pass: every event within a relative tolerance of now happens.

        The releasing half runs only while some task is finished with successors to
        tell or its slot to free: in about half the passes of measured programs. (Under
        ``vmap`` a branch runs both sides, so batched, it always runs: it changes
        nothing when no task is finished.)
        """
        s, _ = carry
        due = s.now + s.now * rtol
        s = events(s, due)
        return maybe(total(s.run_done, "any"), release, lambda s, due: (s, jnp.bool_(False)),
                     s, due)

    num_valid = jnp.sum(p.task_valid, dtype=jnp.int32)

    def running(s: _State) -> Array:
        return (s.num_done < num_valid) & (s.status <= Status.NOT_CONVERGED)

    def step(s: _State) -> tuple:
        """Water-fill, then advance to the next event: the fields it changes (``_STEPPED``)."""
        live = s.slot_flow < num_flows
        moving = live & s.slot_moving
        rates, converged, rounds = fill(p.link_capacity, p.flow_path, s.slot_flow, moving,
                                        max_rounds)
        drain_s = jnp.where(moving & (rates > 0),
                            s.slot_left_bytes / jnp.where(rates > 0, rates, 1), inf)
        busy = (s.run_task >= 0) & ~s.run_done
        next_s = jnp.minimum(
            reduce(jnp.where(busy, s.run_end_s, inf), "min"),
            reduce(jnp.where(live & ~s.slot_moving, s.slot_latency_end_s,
                             s.now + drain_s), "min"))
        dt = next_s - s.now
        left = jnp.where(drain_s <= dt + next_s * rtol, 0,
                         jnp.maximum(s.slot_left_bytes - rates * dt, 0))
        stuck = jnp.isinf(next_s)
        status = jnp.where(~converged & (s.status == Status.OK), Status.NOT_CONVERGED, s.status)
        return (jnp.where(stuck, s.now, next_s),
                jnp.where(moving & ~stuck, left, s.slot_left_bytes),
                s.steps + 1, jnp.where(stuck, Status.INFEASIBLE, status),
                jnp.maximum(s.max_active_flows, total(moving, "sum")),
                jnp.maximum(s.max_rounds, rounds))

    def settle_then_step(carry):
        """One settling pass; when the instant is settled, also step to the next event.

        The step always runs and its result is kept only when the instant is settled:
        a branch would copy the step's fields in and out, which on a CPU measured
        dearer than the steps thrown away (passes followed by another at the same
        instant).
        """
        s, again = settle(carry)
        keep = again | ~running(s)
        stepped = [jnp.where(keep, old, new) for old, new in zip(_stepped(s), step(s), strict=True)]
        return s._replace(**dict(zip(_STEPPED, stepped, strict=True))), again

    unset = jnp.where(p.task_valid, -1, 0).astype(dtype)  # padded tasks: times 0
    zero = jnp.int32(0)
    init = _State(
        now=jnp.asarray(0, dtype), start_s=unset, end_s=unset,
        pending=in_degree + (p.task_valid & (in_degree == 0)),  # roots wait for the source
        claim=jnp.full((num_tasks,), -1, jnp.int32), num_told=jnp.int32(0),
        num_done=zero,
        run_task=jnp.full((run_slots,), -1, jnp.int32).at[0].set(num_tasks),
        run_done=jnp.zeros((run_slots,), bool).at[0].set(True),
        run_cursor=jnp.zeros((run_slots,), jnp.int32),
        run_end_s=jnp.full((run_slots,), inf), run_open=jnp.zeros((run_slots,), jnp.int32),
        slot_flow=jnp.full((flow_slots,), num_flows, jnp.int32),
        slot_run=jnp.full((flow_slots,), -1, jnp.int32),
        slot_moving=jnp.zeros((flow_slots,), bool),
        slot_latency_end_s=jnp.zeros((flow_slots,), dtype),
        slot_left_bytes=jnp.zeros((flow_slots,), dtype),
        steps=zero, status=jnp.int32(Status.OK), max_active_flows=zero, max_rounds=zero)
    cap = max_steps(num_tasks, num_flows)
    s, _ = lax.while_loop(lambda c: (running(c[0]) | c[1]) & (c[0].steps < cap),
                          settle_then_step, (init, jnp.bool_(True)))
    status = jnp.where(running(s), Status.INFEASIBLE, s.status)
    start_s = jnp.where(s.start_s < 0, s.now, s.start_s)
    end_s = jnp.where(s.end_s < 0, s.now, s.end_s)
    return Schedule(start_s, end_s, jnp.max(end_s, initial=0), status, s.steps,
                    s.max_active_flows, s.max_rounds)
