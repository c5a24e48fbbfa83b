"""Array types of the kernels: one program as padded arrays, results, status codes.

Shape names: ``T`` tasks, ``E`` dependencies, ``F`` flows, ``P`` links per path,
``L`` links, ``K`` flow slots. Dependencies are an edge list sorted by task (the
program's CSR, flattened) rather than a padded predecessor matrix: measured plans
have a few tasks with dozens of predecessors (DP barriers, optimizer steps), and a
``T x D`` matrix would make every task pay for the widest. The kernels are
written for one program; the batched arrays carry a leading ``variant`` axis
added by ``jax.vmap``.

Padding convention (what lets programs of different sizes share one shape):

* padded tasks are zero-duration COMPUTE tasks without predecessors: they finish
  at time 0 and change nothing; ``task_valid`` marks the real ones;
* padded edges, flow tasks and path entries are ``-1``, after the real ones; a
  padded flow (``flow_task == -1``) never starts;
* padded links have capacity 1 and no flow crosses them;
* a padded variant (a row of a batch without a valid task) may hold zeros everywhere:
  it finishes at time 0 in no step, whatever its other arrays hold.

The bound's fast form reads a :class:`BlockedProgram` instead (shape names ``B``
blocks, ``W`` slots per block, ``D`` predecessors per slot), padded with zeros:
slot 0 stands for none, padded slots have no predecessors and duration 0, padded
tasks have slot 0 and so start and end at 0.
"""

from __future__ import annotations

from typing import NamedTuple

from jax import Array


class Status:
    """Per-variant outcome codes (int32 in every result; never an exception)."""

    OK = 0
    #: water-filling hit its round cap at least once; the rates used were the feasible
    #: fair shares of the last round, so the times are an approximation
    NOT_CONVERGED = 1
    #: more flows were under way at once (in latency or transferring) than the kernel
    #: had slots; rerun with more
    OVERFLOW = 2
    #: the program could not be completed (step cap or no event left to advance to)
    INFEASIBLE = 3

    NAMES = ("ok", "not_converged", "overflow", "infeasible")


class ProgramArrays(NamedTuple):
    """One program (or a batch of them with a leading variant axis), padded."""

    task_valid: Array  # bool[T]
    task_is_comm: Array  # bool[T]
    task_duration_s: Array  # float[T], 0 for COMM tasks
    dep_task: Array  # int32[E], dependency edges in ascending task order: the task, -1 pad
    dep_pred: Array  # int32[E], and its predecessor, -1 pad
    succ_task: Array  # int32[E], the edges' tasks grouped by predecessor (stably), -1 pad
    flow_task: Array  # int32[F], owning COMM task, -1 pad
    flow_bytes: Array  # float[F]
    flow_latency_s: Array  # float[F]
    flow_path: Array  # int32[F, P], link ids, -1 pad
    link_capacity: Array  # float[L], bytes/s


class BlockedProgram(NamedTuple):
    """One program (or a batch) for the bound's blocked schedule, padded.

    The nodes are the tasks and zero-duration max nodes (which split predecessor
    lists longer than ``D``), cut into blocks of at most ``W`` nodes that do not
    depend on each other; a node's predecessors all sit in earlier blocks. Slot
    ``1 + b * W + i`` is position ``i`` of block ``b``; slot 0 is none, at time 0.
    """

    slot_pred: Array  # int32[B, W, D]: slots of the node's predecessors, 0 pad
    slot_duration_s: Array  # float[B, W]: the node's contention-free duration, 0 pad
    task_slot: Array  # int32[T]: slot of each task, 0 for padded tasks


class Schedule(NamedTuple):
    """Task times of one program from either level.

    Tasks a variant never reached (status overflow or infeasible) hold the time the
    variant stopped, for both start and end, so every entry is finite. Padded tasks
    hold 0.
    """

    start_s: Array  # float[T]
    end_s: Array  # float[T]
    iteration_time_s: Array  # float[], largest end time
    status: Array  # int32[], a Status code
    steps: Array  # int32[], events stepped (0 for the bound)
    max_active_flows: Array  # int32[], most flows transferring at once
    max_rounds: Array  # int32[], most water-filling rounds one step needed
