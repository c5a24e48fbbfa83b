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

The loop's parts (:func:`_events`, :func:`_release`, :func:`_place`, :func:`_settle`,
:func:`_step`) are pure functions of a static :class:`_Config`, the program's
:class:`_Tables` and the :class:`_State`. Whether the kernel runs under ``vmap``
changes only how it skips work (:class:`_Branching`), chosen once by :func:`exact`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .slotops import hoisted, inverse, owners, prefix_sum, reduce, scatter, total
from .types import ProgramArrays, Schedule, Status
from .waterfill import MAX_ROUNDS, packed_waterfill, waterfill

#: Events closer than this many machine epsilons of the current time coincide.
EVENT_RTOL_ULPS = 4


def _branch(pred: Array, then: Callable, otherwise: Callable, *args):
    """``then(*args)`` where ``pred``, else ``otherwise(*args)``: only one side runs."""
    return lax.cond(pred, then, otherwise, *args)


def _then_alone(pred: Array, then: Callable, otherwise: Callable, *args):
    """``then(*args)``, which must equal ``otherwise(*args)`` where ``pred`` is false.

    Under ``vmap`` a branch runs both sides and selects, so running ``then`` alone
    does less.
    """
    return then(*args)


def _full_waterfill(capacity: Array, paths: Array, flows: Array, active: Array,
                    max_rounds: int) -> tuple[Array, Array, Array]:
    """:func:`waterfill` of every slot: the packed form's branches would all run under ``vmap``."""
    return waterfill(capacity, paths[flows], active, max_rounds)


class _Branching(NamedTuple):
    """How the loop skips work it does not need: chosen once, by whether it is vmapped."""

    #: water-filling of the moving flow slots, with :func:`packed_waterfill`'s arguments
    fill: Callable
    #: ``maybe(pred, then, otherwise, *args)``: ``then`` where ``pred``, else ``otherwise``
    maybe: Callable
    #: updates at computed indices one after another rather than by XLA's scatter
    #: (:func:`~xsweep.kernels.slotops.scatter`): a loop body without scatters compiles
    #: into one function on a CPU
    sequential: bool


#: One variant per call: branches really branch, and each step fills only a packed
#: prefix of slots that holds the moving flows.
_ALONE = _Branching(packed_waterfill, _branch, True)
#: Under ``vmap``, where a branch runs both sides: no branches, every slot filled.
_VMAPPED = _Branching(_full_waterfill, _then_alone, False)


class _Config(NamedTuple):
    """What the loop knows before it starts: sizes, slots, constants, how it branches."""

    num_tasks: int
    num_flows: int
    run_slots: int  # task slots, also the successor edges told per pass
    flow_slots: int
    max_rounds: int  # water-filling rounds per step at most
    rtol: np.floating  # events within now * rtol of now happen now
    inf: Array  # in the program's dtype
    branching: _Branching


class _Tables(NamedTuple):
    """The program and what the loop reads of it, derived once before the loop."""

    p: ProgramArrays
    flow_count: Array  # [T], a task's flows
    flow_first: Array  # [T], its first flow
    instant: Array  # [T], finishes the instant it starts
    succ: Array  # [E + T], successors grouped by task, then the source's
    succ_first: Array  # [T + 1], each task's first successor in succ
    succ_count: Array  # [T + 1]
    in_degree: Array  # [T]
    positions: Array  # [R], 0..R-1
    minus_ones: Array  # [R]
    minus_ones_k: Array  # [K]
    num_valid: Array  # real tasks


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
    dependency edges' tasks grouped by predecessor (``p.succ_task``, sorted where the
    program is encoded), then the tasks without predecessors (the source's); ``first``
    and ``count`` int32[T + 1], each task's range in ``succ``; ``in_degree`` int32[T].
    """
    num_tasks, num_edges = p.task_duration_s.shape[0], p.dep_task.shape[0]
    real = p.dep_task >= 0
    in_degree = jax.ops.segment_sum(real.astype(jnp.int32), p.dep_task, num_segments=num_tasks)
    out_degree = jax.ops.segment_sum(real.astype(jnp.int32), p.dep_pred, num_segments=num_tasks)
    root = p.task_valid & (in_degree == 0)
    roots = jnp.nonzero(root, size=num_tasks, fill_value=0)[0].astype(jnp.int32)
    count = jnp.concatenate([out_degree, jnp.sum(root, dtype=jnp.int32)[None]])
    first = jnp.cumsum(count, dtype=jnp.int32) - count
    first = first.at[num_tasks].set(num_edges)  # the source's list follows the edges
    return jnp.concatenate([p.succ_task, roots]), first, count, in_degree


def _config(p: ProgramArrays, slots: int | tuple[int, int], max_rounds: int,
            branching: _Branching) -> _Config:
    """The loop's sizes: slots capped at what the program has (no more can be used)."""
    num_tasks, num_flows = p.task_duration_s.shape[0], p.flow_bytes.shape[0]
    task_slots, flow_slots = (slots, slots) if isinstance(slots, int) else slots
    dtype = p.link_capacity.dtype
    return _Config(num_tasks, num_flows, min(task_slots, num_tasks + 1),
                   min(flow_slots, num_flows), max_rounds,
                   EVENT_RTOL_ULPS * jnp.finfo(dtype).eps, jnp.asarray(jnp.inf, dtype), branching)


def _tables(cfg: _Config, p: ProgramArrays) -> _Tables:
    """What the loop reads of the program, derived once, outside the loop."""
    flow_real = p.flow_task >= 0

    def per_task(values: Array, segments: Array) -> Array:
        """Per-task counts of ``values``; segments of -1 count nowhere."""
        return jax.ops.segment_sum(values.astype(jnp.int32), segments,
                                   num_segments=cfg.num_tasks)

    flow_count = per_task(flow_real, p.flow_task)
    # a task's flows are contiguous: the first one is its count's exclusive prefix sum
    flow_first = jnp.cumsum(flow_count, dtype=jnp.int32) - flow_count
    # tasks that finish the instant they start: their successors start then too
    timed = per_task(flow_real & ((p.flow_latency_s > 0) | (p.flow_bytes > 0)), p.flow_task)
    instant = jnp.where(p.task_is_comm, timed == 0, p.task_duration_s <= 0)
    succ, succ_first, succ_count, in_degree = _successors(p)
    # constants the loop reads, built once (see slotops.hoisted)
    positions = hoisted(jnp.arange(cfg.run_slots, dtype=jnp.int32))
    minus_ones = hoisted(jnp.full((cfg.run_slots,), -1, jnp.int32))
    minus_ones_k = hoisted(jnp.full((cfg.flow_slots,), -1, jnp.int32))
    return _Tables(p, flow_count, flow_first, instant, succ, succ_first, succ_count, in_degree,
                   positions, minus_ones, minus_ones_k,
                   jnp.sum(p.task_valid, dtype=jnp.int32))


def _init(cfg: _Config, t: _Tables) -> _State:
    """Nothing started; the virtual source in task slot 0, finished, telling the roots."""
    p, run_slots, flow_slots = t.p, cfg.run_slots, cfg.flow_slots
    dtype = p.link_capacity.dtype
    unset = jnp.where(p.task_valid, -1, 0).astype(dtype)  # padded tasks: times 0
    zero = jnp.int32(0)
    return _State(
        now=jnp.asarray(0, dtype), start_s=unset, end_s=unset,
        pending=t.in_degree + (p.task_valid & (t.in_degree == 0)),  # roots wait for the source
        claim=jnp.full((cfg.num_tasks,), -1, jnp.int32), num_told=jnp.int32(0),
        num_done=zero,
        run_task=jnp.full((run_slots,), -1, jnp.int32).at[0].set(cfg.num_tasks),
        run_done=jnp.zeros((run_slots,), bool).at[0].set(True),
        run_cursor=jnp.zeros((run_slots,), jnp.int32),
        run_end_s=jnp.full((run_slots,), cfg.inf), run_open=jnp.zeros((run_slots,), jnp.int32),
        slot_flow=jnp.full((flow_slots,), cfg.num_flows, jnp.int32),
        slot_run=jnp.full((flow_slots,), -1, jnp.int32),
        slot_moving=jnp.zeros((flow_slots,), bool),
        slot_latency_end_s=jnp.zeros((flow_slots,), dtype),
        slot_left_bytes=jnp.zeros((flow_slots,), dtype),
        steps=zero, status=jnp.int32(Status.OK), max_active_flows=zero, max_rounds=zero)


def _events(cfg: _Config, t: _Tables, s: _State, due: Array) -> _State:
    """Flow and task events due now: latencies end, drained flows free their slots,
    compute tasks reach their end, COMM tasks with no open flow finish."""
    num_tasks, num_flows = cfg.num_tasks, cfg.num_flows
    live = s.slot_flow < num_flows
    moving = live & (s.slot_moving | (s.slot_latency_end_s <= due))
    drained = live & moving & (s.slot_left_bytes <= 0)
    seq = cfg.branching.sequential
    run_open = scatter(s.run_open, jnp.where(drained, s.slot_run, cfg.run_slots),
                       t.minus_ones_k, "add", seq)
    task = jnp.maximum(s.run_task, 0)
    is_task = (s.run_task >= 0) & (s.run_task < num_tasks)
    finished = is_task & ~s.run_done & jnp.where(t.p.task_is_comm[jnp.minimum(
        task, num_tasks - 1)], run_open == 0, s.run_end_s <= due)
    return s._replace(
        end_s=scatter(s.end_s, jnp.where(finished, task, num_tasks),
                      jnp.where(finished, s.now, 0), "set", seq),
        num_done=s.num_done + total(finished, "sum"),
        run_done=s.run_done | finished, run_open=run_open,
        slot_flow=jnp.where(drained, num_flows, s.slot_flow),
        slot_run=jnp.where(drained, -1, s.slot_run), slot_moving=moving & ~drained)


def _release(cfg: _Config, t: _Tables, s: _State, due: Array) -> tuple[_State, Array]:
    """Finished tasks tell their successors; ready tasks start; whether to pass again."""
    p, num_tasks, budget, positions = t.p, cfg.num_tasks, cfg.run_slots, t.positions
    # finished tasks tell up to `budget` successors, slot by slot
    task = jnp.maximum(s.run_task, 0)
    left = jnp.where(s.run_done, t.succ_count[task] - s.run_cursor, 0)
    told_upto = prefix_sum(left)
    told_before = told_upto - left
    seq = cfg.branching.sequential
    owner = owners(jnp.where(left > 0, told_before, budget), budget, seq)
    told = positions < told_upto[-1]
    edge = t.succ_first[task[owner]] + s.run_cursor[owner] + positions - told_before[owner]
    succ_task = jnp.where(told, t.succ[jnp.where(told, edge, 0)], num_tasks)
    run_cursor = s.run_cursor + jnp.clip(budget - told_before, 0, left)
    freed = s.run_done & (run_cursor == t.succ_count[task])
    pending = scatter(s.pending, succ_task, t.minus_ones, "add", seq)
    # a task told twice in one pass starts once: by its last telling, known by its
    # telling's number, which grows from pass to pass, so no reset is needed (a
    # reset would be a second scatter after a gather, for which XLA copies [T])
    telling = s.num_told + positions
    claim = scatter(s.claim, succ_task, telling, "max", seq)
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
    need = jnp.where(new & p.task_is_comm[new_task], t.flow_count[new_task], 0)
    placed, flow_overflow, zero_flow = cfg.branching.maybe(
        total(need, "sum") > 0, functools.partial(_place, cfg, t), _unplaced,
        s, need, new_task, new_rank, run_rank, due)
    overflow |= flow_overflow
    new &= ~flow_overflow
    # the telling position each slot takes its task from, -1 for none
    position_of = inverse(jnp.where(new, new_rank, -1), budget, seq)
    source = jnp.where(run_rank < budget, position_of[jnp.minimum(run_rank, budget - 1)], -1)
    takes = source >= 0
    taken = new_task[jnp.maximum(source, 0)]
    s = s._replace(
        start_s=scatter(s.start_s, jnp.where(new, new_task, num_tasks),
                        jnp.where(new, s.now, 0), "set", seq),
        pending=pending, claim=claim, num_told=s.num_told + jnp.minimum(told_upto[-1], budget),
        run_task=jnp.where(takes, taken, jnp.where(freed, -1, s.run_task)),
        run_done=s.run_done & ~freed & ~takes,
        run_cursor=jnp.where(takes | freed, 0, run_cursor),
        run_end_s=jnp.where(takes, jnp.where(p.task_is_comm[taken], cfg.inf,
                                             s.now + p.task_duration_s[taken]), s.run_end_s),
        run_open=jnp.where(takes, t.flow_count[taken], s.run_open),
        status=jnp.where(overflow, Status.OVERFLOW, s.status), **placed)
    # pass again at this instant while edges wait to be told, a started task is
    # already over, or a placed flow needs no time at all
    again = total(jnp.stack([s.run_done, new & t.instant[new_task]]), "any")
    return s, (again | zero_flow) & ~overflow


def _place(cfg: _Config, t: _Tables, s: _State, need: Array, new_task: Array,
           new_rank: Array, run_rank: Array, due: Array) -> tuple[dict, Array, Array]:
    """The flows of starting COMM tasks (``need`` of each telling position) take free
    flow slots: the flow fields after, whether they overflow, and whether a placed
    flow needs no time at all. (On overflow, the caller starts no task.)"""
    p, flow_slots = t.p, cfg.flow_slots
    need_upto = prefix_sum(need)
    need_before = need_upto - need
    free = s.slot_flow == cfg.num_flows
    rank = prefix_sum(free) - 1
    overflow = need_upto[-1] > rank[-1] + 1
    take = free & (rank < need_upto[-1]) & ~overflow
    # each taking slot's telling position: the last one whose flows start at or
    # before its rank
    placer = owners(jnp.where(need > 0, need_before, flow_slots), flow_slots,
                    cfg.branching.sequential)[
        jnp.clip(rank, 0, flow_slots - 1)]
    flow = jnp.where(take, t.flow_first[new_task[placer]] + rank - need_before[placer], 0)
    # the task slot of each telling position: the free slot of its rank
    slot_of = inverse(run_rank, cfg.run_slots, cfg.branching.sequential)[
        jnp.clip(new_rank, 0, cfg.run_slots - 1)]
    latency_end_s = s.now + p.flow_latency_s[flow]
    fields = dict(
        slot_flow=jnp.where(take, flow, s.slot_flow),
        slot_run=jnp.where(take, slot_of[placer], s.slot_run),
        slot_moving=jnp.where(take, latency_end_s <= due, s.slot_moving),
        slot_latency_end_s=jnp.where(take, latency_end_s, s.slot_latency_end_s),
        slot_left_bytes=jnp.where(take, p.flow_bytes[flow], s.slot_left_bytes))
    zero_flow = total(take & (latency_end_s <= due) & (p.flow_bytes[flow] <= 0), "any")
    return fields, overflow, zero_flow


def _unplaced(s: _State, *_) -> tuple[dict, Array, Array]:
    """:func:`_place` where no starting task has flows: nothing changes."""
    return _flow_fields(s), jnp.bool_(False), jnp.bool_(False)


def _unreleased(s: _State, due: Array) -> tuple[_State, Array]:
    """:func:`_release` where no task is finished: nothing changes, no pass again."""
    return s, jnp.bool_(False)


def _settle(cfg: _Config, t: _Tables, s: _State) -> tuple[_State, Array]:
    """One settling pass: every event within a relative tolerance of now happens.

    The releasing half runs only while some task is finished with successors to
    tell or its slot to free: in about half the passes of measured programs. (Under
    ``vmap`` a branch runs both sides, so batched, it always runs: it changes
    nothing when no task is finished.)
    """
    due = s.now + s.now * cfg.rtol
    s = _events(cfg, t, s, due)
    return cfg.branching.maybe(total(s.run_done, "any"), functools.partial(_release, cfg, t),
                               _unreleased, s, due)


def _running(t: _Tables, s: _State) -> Array:
    """Tasks left to finish, and no status that stops the variant."""
    return (s.num_done < t.num_valid) & (s.status <= Status.NOT_CONVERGED)


def _step(cfg: _Config, t: _Tables, s: _State) -> tuple:
    """Water-fill, then advance to the next event: the fields it changes (``_STEPPED``)."""
    inf, rtol = cfg.inf, cfg.rtol
    live = s.slot_flow < cfg.num_flows
    moving = live & s.slot_moving
    rates, converged, rounds = cfg.branching.fill(t.p.link_capacity, t.p.flow_path, s.slot_flow,
                                                  moving, cfg.max_rounds)
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


def _settle_then_step(cfg: _Config, t: _Tables, carry: tuple) -> tuple:
    """One settling pass; when the instant is settled, also step to the next event.

    The step always runs and its result is kept only when the instant is settled:
    a branch would copy the step's fields in and out, which on a CPU measured
    dearer than the steps thrown away (passes followed by another at the same
    instant).
    """
    s, again = _settle(cfg, t, carry[0])
    keep = again | ~_running(t, s)
    stepped = [jnp.where(keep, old, new)
               for old, new in zip(_stepped(s), _step(cfg, t, s), strict=True)]
    return s._replace(**dict(zip(_STEPPED, stepped, strict=True))), again


def _continues(t: _Tables, cap: int, carry: tuple) -> Array:
    """Another pass: tasks left, or this instant unsettled, and steps left."""
    s, again = carry
    return (_running(t, s) | again) & (s.steps < cap)


def exact(p: ProgramArrays, slots: int | tuple[int, int], max_rounds: int = MAX_ROUNDS,
          batched: bool = True, unroll: int = 1) -> Schedule:
    """Exact schedule of one program under the program IR's fluid-flow semantics.

    Args:
      p: the program's padded arrays.
      slots: ``(tasks, flows)``, the task slots (also the successor edges released
        per pass) and the flow slots, or one number for both (static; each capped at
        what the program has); too few gives ``OVERFLOW``.
      max_rounds: water-filling round cap per step (static).
      batched: whether the caller vmaps this (static). Unbatched, passes skip work
        they do not need by real branches and each step water-fills only a prefix
        of packed slots that holds the moving flows
        (:func:`~xsweep.kernels.waterfill.packed_waterfill`); batched (where a branch
        would run both sides), no branches and all slots every time. Results are
        the same.
      unroll: passes per iteration of the compiled loop (static). Each iteration has a
        fixed cost (on a GPU, a round trip to the host to test the loop's condition);
        a pass after the variant is done changes nothing, so results are the same.
    """
    cfg = _config(p, slots, max_rounds, _VMAPPED if batched else _ALONE)
    if batched:
        return _schedule(cfg, p, unroll)
    # a row without tasks (a padded variant) skips the loop and what comes before it
    return lax.cond(jnp.any(p.task_valid), functools.partial(_schedule, cfg, unroll=unroll),
                    _empty, p)


def _empty(p: ProgramArrays) -> Schedule:
    """The schedule of a program without tasks: every time 0, no step."""
    zero, times = jnp.int32(0), jnp.zeros(p.task_valid.shape, p.link_capacity.dtype)
    return Schedule(times, times, jnp.asarray(0, times.dtype), jnp.int32(Status.OK), zero, zero,
                    zero)


def _unrolled(cfg: _Config, t: _Tables, cap: int, unroll: int, carry: tuple) -> tuple:
    """``unroll`` passes; each after the first runs only where the loop would go on (a
    select: the same results as one pass an iteration, in fewer iterations)."""
    carry = _settle_then_step(cfg, t, carry)
    for _ in range(unroll - 1):
        more = _continues(t, cap, carry)
        carry = jax.tree.map(functools.partial(_kept, more), _settle_then_step(cfg, t, carry),
                             carry)
    return carry


def _kept(more: Array, new: Array, old: Array) -> Array:
    return jnp.where(more, new, old)


def _schedule(cfg: _Config, p: ProgramArrays, unroll: int = 1) -> Schedule:
    """The loop from the start to the last event, and its schedule."""
    t = _tables(cfg, p)
    cap = max_steps(cfg.num_tasks, cfg.num_flows)
    body = (functools.partial(_settle_then_step, cfg, t) if unroll == 1
            else functools.partial(_unrolled, cfg, t, cap, unroll))
    s, _ = lax.while_loop(functools.partial(_continues, t, cap), body,
                          (_init(cfg, t), jnp.bool_(True)))
    status = jnp.where(_running(t, s), Status.INFEASIBLE, s.status)
    start_s = jnp.where(s.start_s < 0, s.now, s.start_s)
    end_s = jnp.where(s.end_s < 0, s.now, s.end_s)
    return Schedule(start_s, end_s, jnp.max(end_s, initial=0), status, s.steps,
                    s.max_active_flows, s.max_rounds)
