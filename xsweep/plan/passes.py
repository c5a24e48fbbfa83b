"""The passes of one or more replicas as a block of tasks: the structure the lowering copies.

A block holds every task of a set of replicas that depends only on their shapes: the
forward and backward passes of each stream (a device group), cut into pieces
(:mod:`xsweep.plan.pieces`), each piece a COMPUTE task and a blocking TP task (with
``overlap_tp``: a TP task beside the compute, both waiting for what the compute waits
for, and a zero-length TP task on the stream that joins them: the piece takes the longer
of the two, and the stream's wait for the TP traffic shows as exposed TP time); the
transfers between stages; and, under FSDP, the per-layer parameter all-gathers and
gradient reduce-scatters that tie the replicas together. Streams are numbered inside
the block (replica by replica, stage by stage), ranks as (stream, TP index), and every
number is a value key naming its stream (``PassTime(stream, "F", first, end)``,
:mod:`xsweep.plan.values`); the lowering substitutes device groups, ranks and DP groups
when it places the block (:mod:`xsweep.plan.lower`).

What the pieces wait for:

* a piece of a chunk's last backward ends where a gradient bucket can start its
  reduction (``piece_end``);
* with ``gather`` (ZeRO-1 with overlap), each piece of a chunk's first forward waits for
  its bucket's parameter all-gather (``waits``: resolved by the lowering, which issues
  the gathers first);
* with ``blocking_p2p`` (``pp_p2p_overlap`` off), a stream's next piece waits for the
  transfer its previous piece sent;
* under FSDP, layer ``i`` of a stream's sequence (forward and backward pieces in
  execution order) waits for all-gather ``i`` of its DP group, which starts when the
  previous all-gather is done and every member has finished compute ``i - 2`` (one
  layer prefetched while one runs: the two gathered blocks of the memory model). After
  a backward piece, the layer's gradients are reduce-scattered once every member has
  produced them, one reduce-scatter after the other; the last one waits on a barrier
  over the members' last pieces.

Collectives of a DP group are one COMM task with a pipelined ring per LCM chunk
(:mod:`xsweep.plan.collectives`). Replicas under FSDP must have the same stages and
micro-batches (the plan's validation says so): their collectives match in order.

Task order: streams are visited round-robin and each runs its pieces as far as their
inputs exist, so every task comes after its predecessors. Without FSDP the block is laid
out by arrays (:mod:`xsweep.plan.replica_block`); under FSDP, task by task
(:class:`_FsdpBlock`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from xsweep.memo import cached
from xsweep.plan.collectives import ALLGATHER, REDUCE_SCATTER
from xsweep.plan.pieces import Stage, needs_input, next_stage, piece_name, pieces, transfer_pairs
from xsweep.plan.program import Category, TaskColumns, TaskRow
from xsweep.plan.replica_block import (
    COMM,
    COMPUTE,
    FlowGroup,
    plain_block,
    tp_rings,
    with_all_to_alls,
)
from xsweep.plan.reshard import reshard
from xsweep.plan.values import (
    ONE,
    ZERO,
    ExpertRingBytes,
    ExpertRingHops,
    GatherBytes,
    Keys,
    KeyTable,
    PassTime,
    RingBytes,
    RingHops,
    TransferBytes,
    ep_keys,
    tp_ring_keys,
)
from xsweep.ragged import run_starts

_F, _B = int(Category.FORWARD), int(Category.BACKWARD)
_TP, _DP, _BARRIER = int(Category.TP), int(Category.DP), int(Category.BARRIER)
_TP_BESIDE = int(Category.TP_BESIDE)
_PP, _RESHARD = int(Category.PP), int(Category.RESHARD)


def _ends(ranks: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(stream, TP index) pairs as their streams and their indices."""
    streams, indices = zip(*ranks, strict=True) if ranks else ((), ())
    return np.array(streams, np.int64), np.array(indices, np.int64)


class Tasks:
    """Tasks, flows and value keys as they are appended (a growing block)."""

    def __init__(self) -> None:
        self.rows: list[TaskRow] = []  # values are indices into keys
        self.names: list[str] = []
        self.deps: list[list[int]] = []  # as given: -1 (none) and repeats are dropped at the end
        self.keys = KeyTable(ZERO)  # first, so that a row's default value is the constant 0
        self.flow_tasks: list[int] = []  # COMM tasks with flows, in order...
        self.flow_groups: list[FlowGroup] = []  # ... and their flows

    def key(self, value) -> int:
        return self.keys.index(value)

    def flow_group(self, src: list, dst: list, nbytes: list, hops, launches,
                   p2p: bool) -> FlowGroup:
        """Flows from ``src[i]`` to ``dst[i]`` ((stream, TP index) pairs) carrying the
        payload ``nbytes[i]``, all with the same ``hops`` and ``launches`` keys, all
        point-to-point sends or none. Keys are numbered as a walk over the flows meets
        them (each flow's payload, hops and launches in turn)."""
        index = self.keys.index
        payload = [index(key) for key in nbytes[:1]]
        hop, launch = (index(hops), index(launches)) if payload else (0, 0)
        payload += [index(key) for key in nbytes[1:]]
        n = len(payload)
        return FlowGroup(*_ends(src), *_ends(dst), np.array(payload, np.int64),
                         np.full(n, hop, np.int64), np.full(n, launch, np.int64),
                         np.full(n, p2p))

    def tp_ring(self, stream: int, tp: int, span: tuple, a2a: bool = False,
                width: int = 0) -> FlowGroup:
        """The ring of a stream's TP collective over one piece ``span`` (kind, layers):
        rank ``i`` sends to rank ``i + 1``, every flow with the same three value keys (none
        at TP 1); with ``a2a``, followed by the piece's all-to-alls over its EP group of
        ``width`` ranks (default the stream's; more where EP spans replicas)."""
        keys = tp_ring_keys(stream, *span) if tp > 1 else ()
        nbytes, hops, launches = ([self.keys.index(key)] for key in keys) if keys else (
            [0], [0], [0])
        ring = tp_rings([stream], [tp], nbytes, hops, launches)
        if a2a:
            keys = [[self.keys.index(key)] for key in ep_keys(stream, *span)]
            return with_all_to_alls(ring, [stream], [tp], [True], *keys, [max(width, tp)])
        return ring

    def add(self, row: TaskRow, name: str, deps: list[int], flows: FlowGroup | None = None) -> int:
        """Append a task (its value an index into :attr:`keys`); return its id."""
        t = len(self.rows)
        self.rows.append(row)
        self.names.append(name)
        self.deps.append(deps)
        if flows is not None:
            self.flow_tasks.append(t)
            self.flow_groups.append(flows)
        return t

    def dep_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR of every task's predecessors, ascending, each once."""
        num_tasks = len(self.deps)
        counts = [len(d) for d in self.deps]
        dep = np.fromiter(itertools.chain.from_iterable(self.deps), np.int64, sum(counts))
        owner = np.repeat(np.arange(num_tasks), counts)
        # by task, then predecessor (tasks in order: a stable sort merges the runs)
        pairs = np.sort(owner[dep >= 0] * num_tasks + dep[dep >= 0], kind="stable")
        owner, dep = np.divmod(pairs[run_starts(pairs)], max(num_tasks, 1))
        return np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=num_tasks))]), dep

    def flow_arrays(self) -> tuple[np.ndarray, FlowGroup]:
        """The task of every flow, and the flows, in task order."""
        groups = self.flow_groups or [self.flow_group([], [], [], ZERO, ZERO, False)]
        return (np.repeat(np.array(self.flow_tasks, np.int64),
                          [len(g.p2p) for g in self.flow_groups]), FlowGroup.concat(groups))


@dataclass(frozen=True)
class Block:
    """The tasks of a set of replicas, streams numbered inside the block.

    Task ids count from 0. Task fields ``device_group`` and ``replica`` hold the block
    stream a task belongs to (-1: none) and ``value`` an index into ``keys``; names hold
    ``{dg<stream>}`` placeholders; value keys name block streams (and, for FSDP
    collectives, the block's stage as its DP group). Nothing here is changed once made:
    blocks are kept and shared (:data:`cached_block`).
    """

    tasks: TaskColumns
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    keys: Keys  # value keys
    names: tuple[str, ...] | None  # None: not made (see build_block)
    flow_task: np.ndarray  # int64[F]: the task of each flow
    flows: FlowGroup
    last: tuple[int, ...]  # last task on each stream
    piece_end: dict[tuple[int, int], int]  # (stream, first layer) -> end of that backward piece
    waits: tuple[tuple[int, int, int], ...]  # (task, stream, first layer): waits for a gather
    finals: dict[int, int]  # stream -> its DP group's last reduce-scatter (FSDP)


def ring_ends(tps: tuple[int, ...]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The flows of one collective over LCM rings: the sources and the destinations,
    ``(member, TP index)`` each, per rank of each ring, ring by ring (ring ``c`` holds
    rank ``c mod tp`` of each member, in member order; :mod:`xsweep.plan.groups`)."""
    k = len(tps)
    flows = [(c, i) for c in range(math.lcm(*tps)) for i in range(k)]  # (ring, member)
    return ([(i, c % tps[i]) for c, i in flows],
            [((i + 1) % k, c % tps[(i + 1) % k]) for c, i in flows])


def build_block(schedule: str, scheme: str, v: int, replicas: tuple[tuple[Stage, ...], ...],
                cuts: tuple[int, ...], gather: bool, fsdp: tuple[tuple[int, ...], ...],
                names: bool = True, overlap_tp: bool = False, ep: int = 1,
                moe_from: int = 0, cp: int = 1, blocking_p2p: bool = False,
                fp8_gather: bool = False) -> Block:
    """Every task of ``replicas`` (see the module's description).

    Args:
      replicas: per replica, its stages.
      cuts: layers at which a chunk's last backward (and a gathered first forward) is cut.
      gather: the first forward of each chunk waits for its parameter all-gathers.
      fsdp: under FSDP, per stage, the replicas of its DP group in ring order; else ().
      names: give every task a readable name; without FSDP, ``names`` is None otherwise
        (under FSDP they are always made).
      overlap_tp: a piece's TP traffic runs beside its compute (see the module's
        description), not after it.
      ep, moe_from: expert parallelism and the first MoE layer: with EP above 1 the TP task
        of each piece with layers from ``moe_from`` on also carries their all-to-alls (MoE
        dispatch and combine), over the stream's ranks.
      cp: context-parallel ranks of every stream (a stream's ranks are ``tp x cp``, TP
        fastest): each piece's CP ring (ring attention's K/V exchange) runs beside its
        compute as a TP task does with ``overlap_tp``, its TP rings one per CP rank; not
        under FSDP (the plan's validation refuses it).
      blocking_p2p: a stream waits for each transfer it sends (all its phases) before its
        next task: the next piece's compute (and a TP task beside it) waits for the
        transfer's last phase rather than for the piece's last task, and a stream whose
        last piece sends ends with that transfer (``last``).
      fp8_gather: under FSDP, the parameter all-gathers move the FP8 copies
        (``fp8_param_gather``: their payloads are :class:`~xsweep.plan.values.GatherBytes`).
    """
    streams = [spec for rep in replicas for spec in rep]
    where = [(r, s) for r, rep in enumerate(replicas) for s in range(len(rep))]
    first_stream = [0, *itertools.accumulate(len(rep) for rep in replicas)]
    tasks = Tasks()
    phases = {}  # (source stream, destination stream) -> the flows of each phase
    for r, rep in enumerate(replicas):
        for sa, sb in transfer_pairs(len(rep), v):
            a, b = first_stream[r] + sa, first_stream[r] + sb
            phases[a, b] = _transfer_phases(tasks, scheme, a, b, streams[a][0] * cp,
                                            streams[b][0] * cp)
    plans = [pieces(schedule, s, len(replicas[r]), streams[st], v, cuts, gather, bool(fsdp))
             for st, (r, s) in enumerate(where)]
    if not fsdp:  # each task waits for its stream and its input only: laid out by arrays
        return Block(**plain_block(tasks.keys, streams, where, first_stream, plans, phases, v,
                                   names, overlap_tp, ep, moe_from, cp, blocking_p2p))
    assert cp == 1, "context parallelism under FSDP is not modelled"
    return _FsdpBlock(tasks, streams, where, first_stream, plans, phases, v, fsdp,
                      overlap_tp, (ep, moe_from), blocking_p2p, fp8_gather).build()


def _transfer_phases(tasks: Tasks, scheme: str, a: int, b: int, tp_a: int,
                     tp_b: int) -> list[FlowGroup]:
    """The flows of each phase of the transfer from stream ``a`` to stream ``b``: the
    resharding ``scheme`` between their TP groups (``tp_a`` and ``tp_b`` ranks, CP ranks
    included: equal TP degrees make it rank to rank), each move a point-to-point send."""
    moves = reshard(scheme, range(tp_a), range(tp_a, tp_a + tp_b), 1.0)

    def local(rank):  # a scheme may also move inside one side
        return (a, rank) if rank < tp_a else (b, rank - tp_a)

    by_phase: dict[int, list[int]] = {}
    for i, move in enumerate(moves):
        by_phase.setdefault(move.phase, []).append(i)
    return [tasks.flow_group([local(moves[i].src) for i in ids], [local(moves[i].dst) for i in ids],
                             [TransferBytes(a, b, i) for i in ids], ONE, ZERO, True)
            for _, ids in sorted(by_phase.items())]


class _DpGroup:
    """One DP group of an FSDP block (one stage of every replica): its members, its
    collectives so far and how far its members have come."""

    def __init__(self, stage: int, members: tuple[int, ...], tps: tuple[int, ...],
                 expert_rings: tuple[tuple[int, ...], ...] = ()):
        self.stage = stage
        self.members = members  # block streams, in ring order
        src, dst = ring_ends(tps)
        # the ends of the flows of each of its collectives
        self.src = [(members[m], i) for m, i in src]
        self.dst = [(members[m], i) for m, i in dst]
        # where EP groups span replicas and each expert is held more than once, the ends of
        # the flows of its expert rings (per TP rank, per place in an EP group: the
        # replicas holding the same experts, in replica order), beside the rings above on
        # the layers with experts
        tp = tps[0] if tps else 1
        self.expert_src = [(ring[k], c) for c in range(tp) for ring in expert_rings
                           for k in range(len(ring))]
        self.expert_dst = [(ring[(k + 1) % len(ring)], c) for c in range(tp)
                           for ring in expert_rings for k in range(len(ring))]
        self.gathers: list[int] = []  # the all-gathers issued, in order
        self.scatter = -1  # the last reduce-scatter
        self.reached: list[int] = []  # per piece index: the members past it
        self.rings: dict[tuple, FlowGroup] = {}  # (layer, passes, FP8 gather) -> flows

    def everyone_past(self, i: int) -> bool:
        return self.reached[i] == len(self.members)


class _FsdpBlock:
    """The task-by-task build of a block under FSDP (see the module's description)."""

    def __init__(self, tasks: Tasks, streams: list, where: list[tuple[int, int]],
                 first_stream: list[int], plans: list[list[tuple]], phases: dict, v: int,
                 fsdp: tuple[tuple[int, ...], ...], overlap_tp: bool = False,
                 experts: tuple[int, int] = (1, 0), blocking_p2p: bool = False,
                 fp8_gather: bool = False):
        self.tasks, self.streams, self.where = tasks, streams, where
        self.blocking_p2p, self.fp8_gather = blocking_p2p, fp8_gather
        self.overlap_tp, self.experts = overlap_tp, experts  # (EP, first MoE layer)
        self.first_stream, self.plans, self.phases, self.v = first_stream, plans, phases, v
        self.group_of: dict[int, _DpGroup] = {}  # stream -> its DP group
        ep, replicas = experts[0], len(first_stream) - 1
        for s, order in enumerate(fsdp):
            members = tuple(first_stream[r] + s for r in order)
            tp = streams[members[0]][0]  # (EP above TP: one TP degree per stage)
            fold = ep // tp if ep > tp else 1
            rings = (tuple(tuple(first_stream[r] + s for r in range(q, replicas, fold))
                           for q in range(fold)) if fold > 1 and replicas // fold >= 2 else ())
            group = _DpGroup(s, members, tuple(streams[m][0] for m in members), rings)
            self.group_of |= dict.fromkeys(members, group)
        self.pos = [0] * len(streams)  # each stream's next piece
        self.last = [-1] * len(streams)  # the last task on each stream (-1: none yet)
        self.computes: list[list[int]] = [[] for _ in streams]  # per stream, per piece
        self.ends: list[list[int]] = [[] for _ in streams]  # its last task on the stream
        self.arrived: dict[tuple[str, int, int, int], int] = {}  # (kind, stream, mb, chunk)
        self.made: dict[tuple, tuple] = {}  # (stream, kind, lo, hi) -> duration key, TP flows
        self.finals: dict[int, int] = {}

    def build(self) -> Block:
        while any(pos < len(plan) for pos, plan in zip(self.pos, self.plans, strict=True)):
            progressed = False
            for st in range(len(self.streams)):
                progressed |= self._advance(st)
            if not progressed:
                raise AssertionError("pipeline schedule deadlocked")
        tasks = self.tasks
        dep_ptr, dep_idx = tasks.dep_arrays()
        flow_task, flows = tasks.flow_arrays()
        return Block(tasks=TaskColumns.of_rows(tasks.rows), dep_ptr=dep_ptr, dep_idx=dep_idx,
                     keys=tasks.keys.frozen(), names=tuple(tasks.names), flow_task=flow_task,
                     flows=flows, last=tuple(self.last), piece_end={}, waits=(),
                     finals=self.finals)

    def _num_stages(self, st: int) -> int:
        r = self.where[st][0]
        return self.first_stream[r + 1] - self.first_stream[r]

    def _advance(self, st: int) -> bool:
        """Run the stream's pieces as far as their inputs exist; whether it ran any."""
        plan, start = self.plans[st], self.pos[st]
        while self.pos[st] < len(plan):
            i = self.pos[st]
            kind, mb, c, _, _, j, _, _ = plan[i]
            deps = []
            if j == 0 and needs_input(kind, self.where[st][1], self._num_stages(st), c, self.v):
                arrived = self.arrived.get((kind, st, mb, c))
                if arrived is None:
                    break
                deps.append(arrived)
            gather = self._gathered(st, i)
            if gather is None:
                break
            self._run(st, i, [*deps, gather])
            self.pos[st] += 1
        return self.pos[st] > start

    def _run(self, st: int, i: int, deps: list[int]) -> None:
        """Piece ``i`` of the stream: compute, TP, the reduce-scatter it completes, the
        transfer of its pass's output."""
        kind, mb, c, lo, hi, j, n, role = self.plans[st][i]
        name = piece_name(kind, f"{{dg{st}}}", mb, c, lo, hi, self.v, role)
        compute, t = self._on_stream(st, kind, lo, hi, deps, mb, name)
        self.computes[st].append(compute)
        self.ends[st].append(t)
        group = self.group_of[st]
        if len(group.reached) <= i:
            group.reached.append(0)
        group.reached[i] += 1
        if kind == "B":
            self._scattered(st, i)
        if j == n - 1:
            to = next_stage(kind, self.where[st][1], self._num_stages(st), c, self.v)
            if to is not None:
                dst = self.first_stream[self.where[st][0]] + to[0]
                sent = self._transfer(st, dst, mb, c, t, kind)
                self.arrived[kind, dst, mb, to[1]] = sent
                if self.blocking_p2p:  # the stream goes on once the send is done
                    self.last[st] = sent

    def _on_stream(self, st: int, kind: str, lo: int, hi: int, deps: list[int], mb: int,
                   name: str) -> tuple[int, int]:
        """A piece's COMPUTE task and its TP task (blocking, or beside it and joined by a
        zero-length TP task on the stream); the compute's id and the piece's last task's."""
        made = self.made.get((st, kind, lo, hi))
        if made is None:
            tp, first = self.streams[st][0], self.streams[st][1]
            span = (kind, lo - first, hi - first)
            ep, moe_from = self.experts
            a2a = ep > 1 and hi > moe_from  # (at TP 1, the all-to-alls alone)
            ring = self.tasks.tp_ring(st, tp, span, a2a, ep) if tp > 1 or a2a else None
            made = self.made[st, kind, lo, hi] = (self.tasks.key(PassTime(st, *span)), ring)
        duration, ring = made
        stage = self.where[st][1]
        waits = [self.last[st], *deps]
        compute = self.tasks.add(TaskRow(
            kind=COMPUTE, category=_F if kind == "F" else _B, stream=st, stage=stage,
            micro_batch=mb, device_group=st, replica=st, value=duration), name, waits)
        t = compute
        labels = dict(kind=COMM, category=_TP, stage=stage, micro_batch=mb, device_group=st,
                      replica=st)
        if ring is not None and self.overlap_tp:
            beside = self.tasks.add(TaskRow(**{**labels, "category": _TP_BESIDE}),
                                    f"tp {name}", waits, ring)
            t = self.tasks.add(TaskRow(stream=st, **labels), f"tp join {name}",
                               [compute, beside])
        elif ring is not None:
            t = self.tasks.add(TaskRow(stream=st, **labels), f"tp {name}", [t], ring)
        self.last[st] = t
        return compute, t

    def _transfer(self, src: int, dst: int, mb: int, chunk: int, after: int, kind: str) -> int:
        """The phases of a pass's output moving to the next stage, one after the other."""
        category = _PP if self.streams[src][0] == self.streams[dst][0] else _RESHARD
        direction = "grad" if kind == "B" else "act"
        suffix = f" c{chunk}" if self.v > 1 else ""
        t = after
        for phase, flows in enumerate(self.phases[src, dst]):
            t = self.tasks.add(
                TaskRow(kind=COMM, category=category, stage=self.where[src][1], micro_batch=mb,
                        device_group=src, replica=src, phase=phase),
                f"{direction} {{dg{src}}}->{{dg{dst}}} mb{mb}{suffix} p{phase}", [t], flows)
        return t

    def _collective(self, group: _DpGroup, layer: int, passes: int,
                    gather: bool = False) -> FlowGroup:
        """The flows of a DP collective on one layer (kept per layer and pass count; a
        parameter ``gather`` in FP8 has a payload of its own)."""
        fp8 = gather and self.fp8_gather
        flows = group.rings.get((layer, passes, fp8))
        if flows is None:
            n = len(group.src)
            nbytes = (GatherBytes(group.stage, layer, layer) if fp8
                      else RingBytes(group.stage, layer, layer, passes))
            flows = self.tasks.flow_group(group.src, group.dst, [nbytes] * n,
                                          RingHops(group.stage, passes), ONE, False)
            if group.expert_src and layer >= self.experts[1]:  # a MoE layer's experts
                flows = FlowGroup.concat([flows, self.tasks.flow_group(
                    group.expert_src, group.expert_dst,
                    [ExpertRingBytes(group.stage, layer, layer, passes)] * len(group.expert_src),
                    ExpertRingHops(group.stage, passes), ONE, False)])
            group.rings[layer, passes, fp8] = flows
        return flows

    def _gathered(self, st: int, i: int) -> int | None:
        """All-gather ``i`` of the stream's DP group, issued now if it can be; else None."""
        group = self.group_of[st]
        if i < len(group.gathers):
            return group.gathers[i]
        if i >= 2 and not group.everyone_past(i - 2):
            return None
        kind, mb, _, lo, *_ = self.plans[st][i]
        deps = group.gathers[-1:] + ([self.computes[m][i - 2] for m in group.members]
                                     if i >= 2 else [])
        t = self.tasks.add(TaskRow(kind=COMM, category=_DP, stage=group.stage, micro_batch=mb),
                           f"ag L{lo} {kind} mb{mb}", deps,
                           self._collective(group, lo, ALLGATHER, gather=True))
        group.gathers.append(t)
        return t

    def _scattered(self, st: int, i: int) -> None:
        """Reduce-scatter the gradients of backward piece ``i`` once every member has them;
        the last one after a barrier over the members' last pieces."""
        group = self.group_of[st]
        if not group.everyone_past(i):
            return
        _, mb, _, lo, *_ = self.plans[st][i]
        deps = [self.ends[m][i] for m in group.members]
        final = i == len(self.plans[st]) - 1
        if final:
            spec = self.streams[st]
            deps = [self.tasks.add(TaskRow(kind=COMPUTE, category=_BARRIER),
                                   f"dp barrier L{spec[1]}-{spec[2]}", deps)]
        t = self.tasks.add(TaskRow(kind=COMM, category=_DP, stage=group.stage, micro_batch=mb),
                           f"rs L{lo} mb{mb}", [*deps, group.scatter],
                           self._collective(group, lo, REDUCE_SCATTER))
        group.scatter = t
        if final:
            self.finals |= dict.fromkeys(group.members, t)


def _block_bytes(block: Block) -> int:
    """About the memory a block holds: its arrays, and its names and keys (Python objects
    of some 100 bytes each). A 512-GPU replica's block holds megabytes."""
    arrays = [*block.tasks, *block.flows, block.dep_ptr, block.dep_idx, block.flow_task]
    return (sum(a.nbytes for a in arrays)
            + 100 * (len(block.names or ()) + len(block.keys.rows) + len(block.piece_end)))


#: Blocks kept: the replicas of a sweep's neighbouring plans repeat, but a long sweep over
#: large clusters must not keep every block it built.
cached_block = cached(256, 128 * 2**20, _block_bytes)(build_block)
