"""Lowering: a plan's analysis -> the program IR of one training iteration.

Granularity (what one task stands for):

* one forward or backward pass of one device group on one micro-batch (under
  interleaved 1F1B, of one model chunk) is one COMPUTE task on that group's stream,
  followed by one blocking TP task; some passes are cut into pieces of layers
  (:mod:`xsweep.plan.passes`): the last backward of each chunk at the DP segment and
  gradient-bucket boundaries, every pass into its layers under FSDP;
* the TP all-reduces of a piece (Megatron: two per block and direction) are lowered as
  one pipelined ring (:mod:`xsweep.plan.collectives`); NCCL's bus efficiency and launch
  latency (per operation: two per all-reduce under sequence parallelism, whose
  reduce-scatter and all-gather move the all-reduce's bytes over the same ring, so its
  time differs only by that launch) come on top, as numbers
  (:mod:`xsweep.plan.transport`);
* activations (forward) and their gradients (backward) between consecutive virtual
  stages move as explicit transfers, one COMM task per resharding phase, beside the
  sending stream (its next pass starts at once), or with ``pp_p2p_overlap`` off on it
  (its next pass, or its optimizer step, waits for the transfer's last phase);
* DP synchronisation is per sweep-line DP group and gradient bucket (one bucket, the
  segment, unless ``dp_overlap``): a BARRIER task waits for the piece of every member
  that completes the bucket, then one COMM task runs a pipelined ring per LCM chunk
  ring: an all-reduce, or under ZeRO-1 a reduce-scatter. Where EP groups span ``r``
  replicas, those rings carry the dense gradients only, and the same task also runs,
  per chunk, ``r`` expert rings, each over the ``d / r`` replicas at one place in their
  EP groups, on the routed experts' gradients (Megatron-Core's expert data-parallel
  groups; none where ``d = r`` or the bucket has no MoE layer);
* ZeRO-1's all-gather of the updated parameters (their FP8 copies with
  ``fp8_param_gather``) runs after the members' optimizer
  steps, or with ``dp_overlap`` (Megatron's ``--overlap-param-gather``) at the start of
  the iteration, bucket after bucket, each forward piece waiting for its own (steady
  state: the gathers carry the previous step's update), its rings split as the
  reduce-scatter's;
* FSDP's per-layer all-gathers and reduce-scatters belong to the passes
  (:mod:`xsweep.plan.passes`; where EP groups span replicas, a MoE layer's hold the
  expert rings too);
* the optimizer step is one COMPUTE task per group after all its DP collectives.

How it is built. The variants of a sweep share structure: the DAG, the flows and
their paths depend on the device groups, the schedule and virtual stages, the
resharding scheme, the ZeRO stage and the gradient buckets, and the cluster's shape
(``Topology.shape_key``), while the GPU and NIC models, the micro-batch size,
recompute and oversubscription change only numbers. So a plan is lowered in two parts:

* a :class:`Template` (the structure) is built once per :func:`structure_key` and
  kept: every task (the record :class:`~xsweep.plan.program.TaskColumns`), dependency,
  flow and path as arrays, and for every duration, flow size and hop count a *value
  key* saying which number of the analysis it is (:mod:`xsweep.plan.values`);
* :meth:`Template.fill` computes those numbers for one analysis (one Python call per
  distinct value, the rest numpy) and returns the :class:`~xsweep.plan.program.Program`.

Replicas of one shape are one block of tasks, built once and copied with their ranks
and task ids shifted (under FSDP all replicas are one block); DP collectives are
generated as arrays. Task order, dependencies, flows and every number are those of
the straightforward per-task lowering this replaces (kept in the tests as the
reference, and compared bit for bit on random plans and numeric variants).
"""

from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from xsweep.memo import Memo
from xsweep.plan.analysis import PlanAnalysis
from xsweep.plan.collectives import ALLGATHER, ALLREDUCE, REDUCE_SCATTER
from xsweep.plan.passes import Block, cached_block
from xsweep.plan.program import (
    Category,
    FlowClasses,
    Program,
    TaskColumns,
    TaskKind,
    TaskRow,
    padded_paths,
)
from xsweep.plan.topology import LinkNames
from xsweep.plan.values import (
    BY_COST,
    KINDS,
    ONE,
    ZERO,
    EpBytes,
    EpMateBytes,
    EpRailBytes,
    ExpertRingBytes,
    ExpertRingHops,
    GatherBytes,
    Keys,
    KeyTable,
    OptimizerTime,
    RingBytes,
    RingHops,
    gather_bytes,
)
from xsweep.plan.workload import moe_layers_in
from xsweep.ragged import owners_and_places, run_starts
from xsweep.runtime import collector_paused

COMPUTE, COMM = int(TaskKind.COMPUTE), int(TaskKind.COMM)


class _ValuePlan(NamedTuple):
    """A template's value keys (:mod:`xsweep.plan.values`) sorted by how
    :meth:`Template.values` computes them."""

    shared: np.ndarray  # int64[n]: keys of the kinds in BY_COST
    shared_group: np.ndarray  # int64[n]: their group
    shared_slot: np.ndarray  # int64[n]: their kind and span, an index into the slots
    slot_codes: tuple[int, ...]  # per slot its kind (an index into KINDS)...
    slot_spans: tuple[tuple, ...]  # ... and its span (kind, first, end)
    optimizer: np.ndarray  # int64[m]: the optimizer steps' keys
    optimizer_group: np.ndarray  # int64[m]: their group
    rest: tuple[int, ...]  # the others


def _value_plan(keys: Keys) -> _ValuePlan:
    shared, shared_group, shared_slot, optimizer, optimizer_group = [], [], [], [], []
    rest, slots = [], {}
    for i, (code, row) in enumerate(zip(keys.codes, keys.rows, strict=True)):
        kind = KINDS[code]
        if kind in BY_COST:
            # the fields of the kinds in BY_COST: the group, then the span (kind, first, end)
            shared.append(i)
            shared_group.append(row[0])
            shared_slot.append(slots.setdefault((code, row[1:]), len(slots)))
        elif kind is OptimizerTime:
            (group,) = row
            optimizer.append(i)
            optimizer_group.append(group)
        else:
            rest.append(i)
    return _ValuePlan(*(np.array(c, np.int64) for c in (shared, shared_group, shared_slot)),
                      tuple(code for code, _ in slots), tuple(span for _, span in slots),
                      np.array(optimizer, np.int64), np.array(optimizer_group, np.int64),
                      tuple(rest))


# -- the structure -----------------------------------------------------------------------


def structure_key(a: PlanAnalysis) -> tuple:
    """What a plan's program structure depends on: equal keys, equal DAGs, flows and paths.

    The device groups (ranks, stage, replica, layers, micro-batches, CP ranks), the schedule and its
    virtual stages, the resharding scheme, the ZeRO stage, gradient overlap and buckets,
    the cluster's shape (``Topology.shape_key``), whether TP communication overlaps
    the compute, the expert parallelism (whose all-to-alls add flows to TP tasks), and
    whether pipeline sends run beside the compute (blocking ones add dependencies),
    whether parameters are gathered in FP8 (the gathers' payloads are other value keys),
    and DeepEP's dispatch where EP groups span nodes (it keeps fewer all-to-all flows).
    """
    s = a.stack
    return (a.schedule, a.resharding, a.topology.shape_key(), a.structure_groups,
            s.virtual_pipeline_stages, s.zero_stage, s.dp_overlap, a.dp_buckets, a.expert_buckets,
            s.tp_comm_overlap, expert_layout(a), s.pp_p2p_overlap, s.fp8_param_gather,
            s.moe_dispatcher == "deepep" and bool(a.ep_places))


def expert_layout(a: PlanAnalysis) -> tuple[int, int]:
    """(EP, first MoE layer) when all-to-alls add flows to TP tasks (EP above 1), else
    (1, 0): a dense plan's structure. With the groups' TP degrees and replicas (also in
    :func:`structure_key`) it says where every all-to-all goes: within a group where EP
    divides its TP, else over the TP ranks of ``EP / TP`` consecutive replicas of its
    stage (:attr:`~xsweep.plan.analysis.PlanAnalysis.ep_peers`)."""
    ep = a.stack.expert_parallel
    return (ep, a.model.moe_first_dense_layers + 1) if ep > 1 else (1, 0)


def _cut_points(a: PlanAnalysis) -> tuple[int, ...]:
    """Where backward pieces end: every DP segment boundary and gradient-bucket start (the
    expert buckets' too)."""
    return tuple(sorted({g.first_layer for g in a.dp_groups}
                        | {g.last_layer + 1 for g in a.dp_groups}
                        | {x for starts in a.dp_buckets + a.expert_buckets for x in starts}))


def _fsdp_rings(a: PlanAnalysis, replicas: list[tuple[int, ...]]) -> tuple[tuple, tuple]:
    """Under FSDP, per pipeline stage: its replicas in the ring order of its DP group, and
    that DP group's index."""
    replica_of = {a.groups[gi].id: r for r, members in enumerate(replicas) for gi in members}
    orders, dp = [], []
    for gi in replicas[0]:
        d = next(d for d, g in enumerate(a.dp_groups) if g.first_layer == a.groups[gi].first_layer)
        orders.append(tuple(replica_of[dg] for dg in a.dp_groups[d].device_groups))
        dp.append(d)
    return tuple(orders), tuple(dp)


class _Builder:
    """Columnar program structure: tasks, dependencies, flows (global ranks), value keys.

    Blocks come as columns; the tasks added one at a time (optimizer steps, DP
    synchronisation) are kept as rows until the next block or the end and appended
    together: for the distinct plans of ``benchmarks/bench_prepare.py``, 4,300 extensions
    rather than 16,800 (13,000 single tasks), a tenth of the lowering's time.
    """

    def __init__(self) -> None:
        self.tasks: list[TaskColumns] = []  # values are indices into keys
        self.dep_counts: list[np.ndarray] = []
        self.dep_idx: list[np.ndarray] = []
        self.keys = KeyTable(ZERO, ONE)
        # per extension: its tasks' names, with "{dg<i>}" standing for the id of the i-th
        # group in ids, or the arguments of the block that makes them (formatted only when
        # names are asked for; plain data, no closures, so that kept templates give the
        # garbage collector little to visit)
        self.names: list[tuple[tuple, tuple[int, ...]]] = []
        self.flow_task: list[np.ndarray] = []
        self.flow_src: list[np.ndarray] = []
        self.flow_dst: list[np.ndarray] = []
        self.flow_bytes: list[np.ndarray] = []
        self.flow_hops: list[np.ndarray] = []
        self.flow_launches: list[np.ndarray] = []
        self.flow_p2p: list[np.ndarray] = []
        self.num_tasks = 0  # those added one at a time included
        self._singles = _Singles()

    def key(self, value) -> int:
        return self.keys.index(value)

    def extend(self, tasks: TaskColumns, dep_counts, dep_idx, names, flow_task, flow_src,
               flow_dst, flow_bytes, flow_hops, flow_launches, flow_p2p) -> None:
        """Append tasks numbered from :attr:`num_tasks` on (ids already global, keys
        already indices)."""
        self.flush()
        self._append(tasks, dep_counts, dep_idx, names, flow_task, flow_src, flow_dst,
                     flow_bytes, flow_hops, flow_launches, flow_p2p)
        self.num_tasks += tasks.num_tasks

    def _append(self, tasks: TaskColumns, dep_counts, dep_idx, names, flow_task, flow_src,
                flow_dst, flow_bytes, flow_hops, flow_launches, flow_p2p) -> None:
        self.tasks.append(tasks)
        for column, data in ((self.dep_counts, dep_counts), (self.dep_idx, dep_idx),
                             (self.flow_task, flow_task), (self.flow_src, flow_src),
                             (self.flow_dst, flow_dst), (self.flow_bytes, flow_bytes),
                             (self.flow_hops, flow_hops), (self.flow_launches, flow_launches)):
            column.append(np.asarray(data, np.int64))
        self.flow_p2p.append(np.asarray(flow_p2p, bool))
        self.names.append(names)

    def add(self, row: TaskRow, deps, name: str) -> int:
        """One task without flows; its id."""
        self._singles.add(row, deps, name)
        self.num_tasks += 1
        return self.num_tasks - 1

    def collective(self, deps, name, src, dst, nbytes: RingBytes | GatherBytes,
                   hops: RingHops) -> int:
        """One DP COMM task: flows ``src[i] -> dst[i]`` carrying ``nbytes`` after ``hops``
        hop latencies and one NCCL launch; its id."""
        t = self.add(TaskRow(kind=COMM, category=Category.DP), deps, name)
        self._singles.flows(t, src, dst, self.key(nbytes), self.key(hops))
        return t

    def more_flows(self, task: int, src, dst, nbytes, hops) -> None:
        """Further flows of the collective ``task``, the last task added."""
        assert task == self.num_tasks - 1, "flows join the last task added"
        self._singles.flows(task, src, dst, self.key(nbytes), self.key(hops))

    def flush(self) -> None:
        """Append the tasks added one at a time since the last extension."""
        singles = self._singles
        if singles.rows:
            sizes = [len(src) for src in singles.src]
            num_flows = sum(sizes)
            self._append(TaskColumns.of_rows(singles.rows), [len(d) for d in singles.deps],
                         list(itertools.chain.from_iterable(singles.deps)),
                         (tuple(singles.names), ()), np.repeat(singles.flow_task, sizes),
                         np.concatenate([np.zeros(0, np.int64), *singles.src]),
                         np.concatenate([np.zeros(0, np.int64), *singles.dst]),
                         np.repeat(singles.nbytes, sizes), np.repeat(singles.hops, sizes),
                         np.ones(num_flows), np.zeros(num_flows, bool))
            self._singles = _Singles()


class _Singles:
    """Tasks added one at a time, not appended yet: rows, and the flows of the DP
    collectives among them."""

    def __init__(self) -> None:
        self.rows: list[TaskRow] = []
        self.deps: list[list[int]] = []  # ascending, each once
        self.names: list[str] = []
        self.flow_task: list[int] = []  # per collective its task...
        self.src: list[np.ndarray] = []  # ... its flows' source ranks...
        self.dst: list[np.ndarray] = []  # ... destination ranks...
        self.nbytes: list[int] = []  # ... and the keys of their payload...
        self.hops: list[int] = []  # ... and hops

    def add(self, row: TaskRow, deps, name: str) -> None:
        self.rows.append(row)
        self.deps.append(sorted(set(deps)))
        self.names.append(name)

    def flows(self, task: int, src, dst, nbytes: int, hops: int) -> None:
        self.flow_task.append(task)
        self.src.append(np.asarray(src, np.int64))
        self.dst.append(np.asarray(dst, np.int64))
        self.nbytes.append(nbytes)
        self.hops.append(hops)


class _BlockNames:
    """The names of a block's tasks, not made yet: the block's arguments (but ``names``)
    and whether its TP communication overlaps."""

    __slots__ = ("args",)

    def __init__(self, args: tuple):
        self.args = args


def _add_block(out: _Builder, a: PlanAnalysis, replicas: list[tuple[int, ...]], cuts: tuple,
               gather: dict, last: list[int], piece_end: dict, finals: dict) -> None:
    """Place the block of ``replicas`` (group indices per stage): its streams become
    groups, its ranks global ranks, its task ids the program's, its waits for parameter
    gathers dependencies on ``gather`` ((group id, layer) -> task)."""
    groups = a.groups
    members = [gi for rep in replicas for gi in rep]
    orders, dp = _fsdp_rings(a, replicas) if a.fsdp else ((), ())
    shape = tuple(tuple((groups[gi].tp, groups[gi].first_layer, groups[gi].last_layer,
                         groups[gi].num_micro_batches) for gi in rep) for rep in replicas)
    args = (a.schedule, a.resharding, a.stack.virtual_pipeline_stages, shape, cuts,
            bool(gather), orders)
    overlap, experts = a.stack.tp_comm_overlap, expert_layout(a)
    cp = groups[members[0]].cp  # one for the whole plan (the plan's validation)
    blocking, fp8_gather = not a.stack.pp_p2p_overlap, a.stack.fp8_param_gather
    # names, for traces only, when asked for
    block = cached_block(*args, False, overlap, *experts, cp, blocking, fp8_gather)
    base = out.num_tasks
    ids = np.array([groups[gi].id for gi in members], np.int64)
    # the block's keys -> the program's keys
    remap = np.array(out.keys.placed(block.keys, members, dp), np.int64)
    dep_counts, dep = _block_deps(block, base, ids, gather)
    # (block stream, TP index) -> global rank; an index past a stream's ranks is a rank of
    # one of its EP peers (EP over replicas): each stream's EP group's ranks, its own first
    rank_table = np.array([r for gi in members for r in groups[gi].ranks], np.int64)
    offset = np.concatenate([[0], np.cumsum([len(groups[gi].ranks) for gi in members])])
    ep_table, ep_offset = _ep_ranks(a, members)
    flows = block.flows
    flow_task, src, dst, nbytes, hops, launches, p2p = (
        block.flow_task + base, rank_table[offset[flows.src_stream] + flows.src_index],
        ep_table[ep_offset[flows.dst_stream] + flows.dst_index], remap[flows.nbytes],
        remap[flows.hops], remap[flows.launches], flows.p2p)
    if a.stack.moe_dispatcher == "deepep" and a.ep_places:
        keep, nbytes = _deepep_flows(a, out.keys, block.keys, flows.nbytes, src, dst, nbytes)
        flow_task, src, dst, nbytes, hops, launches, p2p = (
            column[keep] for column in (flow_task, src, dst, nbytes, hops, launches, p2p))
    out.extend(_placed_tasks(block.tasks, members, ids, [groups[gi].replica for gi in members],
                             remap), dep_counts, dep,
               (block.names if block.names is not None
                else _BlockNames((args, overlap, experts, cp, blocking, fp8_gather)),
                tuple(ids.tolist())), flow_task, src, dst, nbytes, hops, launches, p2p)
    for st, gi in enumerate(members):
        last[gi] = block.last[st] + base if block.last[st] >= 0 else -1
    for (st, lo), t in block.piece_end.items():
        piece_end[(groups[members[st]].id, lo)] = t + base
    for st, t in block.finals.items():
        finals.setdefault(groups[members[st]].id, []).append(t + base)


def _deepep_flows(a: PlanAnalysis, keys: KeyTable, block_keys: Keys, block_nbytes: np.ndarray,
                  src: np.ndarray, dst: np.ndarray,
                  nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeepEP's dispatch over EP groups that span nodes: of a block's placed flows, those to
    keep (an all-to-all flow to another node only to the rank at the sender's place there)
    and their payload keys (an all-to-all flow's :class:`EpMateBytes` on its node,
    :class:`EpRailBytes` across)."""
    a2a = np.asarray(block_keys.codes, np.int64)[block_nbytes] == KINDS.index(EpBytes)
    node = a.topology.rank_nodes()
    place = np.full(len(node), -1, np.int64)
    place[list(a.ep_places)] = list(a.ep_places.values())
    across = a2a & (node[src] != node[dst])
    keep = ~across | (place[src] == place[dst])
    out = nbytes.copy()
    for i in np.unique(nbytes[a2a]).tolist():
        mine = nbytes == i
        out[mine & a2a & ~across] = keys.like(i, EpMateBytes)
        out[mine & across] = keys.like(i, EpRailBytes)
    return keep, out


def _ep_ranks(a: PlanAnalysis, members: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The ranks of each member's EP group, its own first then its peers' in the order of
    their shift (:attr:`~xsweep.plan.analysis.PlanAnalysis.ep_peers`), one member after
    another, and where each member's start: a block flow's destination ``(stream,
    index)`` is ``table[start[stream] + index]``."""
    groups, peers = a.groups, a.ep_peers
    table = np.array([r for gi in members for p in peers[gi] for r in groups[p].ranks],
                     np.int64)
    sizes = [sum(len(groups[p].ranks) for p in peers[gi]) for gi in members]
    return table, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _mapped(column: np.ndarray, table) -> np.ndarray:
    """``column`` with each entry ``i >= 0`` replaced by ``table[i]`` (-1 stays)."""
    out = column.copy()
    own = column >= 0
    out[own] = np.asarray(table, np.int64)[column[own]]
    return out


def _placed_tasks(tasks: TaskColumns, members: list[int], ids: np.ndarray, replicas: list[int],
                  remap: np.ndarray) -> TaskColumns:
    """A block's tasks as the program's: block streams become streams (group indices),
    device-group ids and replicas, value keys the program's (the block's columns are
    kept and shared: new columns, never changed in place)."""
    return tasks._replace(stream=_mapped(tasks.stream, members),
                          device_group=_mapped(tasks.device_group, ids),
                          replica=_mapped(tasks.replica, replicas), value=remap[tasks.value])


def _block_deps(block: Block, base: int, ids: np.ndarray,
                gather: dict) -> tuple[np.ndarray, np.ndarray]:
    """The block's dependencies as the program's (counts per task, predecessors), with the
    waits for parameter gathers (earlier tasks) merged in."""
    num_tasks = block.tasks.num_tasks
    owner = np.repeat(np.arange(num_tasks), np.diff(block.dep_ptr))
    dep = block.dep_idx + base
    waits = [(t, gather[(int(ids[st]), lo)]) for t, st, lo in block.waits
             if (int(ids[st]), lo) in gather]
    if waits:
        owner = np.concatenate([owner, [t for t, _ in waits]])
        dep = np.concatenate([dep, [g for _, g in waits]])
        order = np.lexsort((dep, owner))
        owner, dep = owner[order], dep[order]
    return np.bincount(owner, minlength=num_tasks), dep


def _ring_arrays(dpg) -> tuple[np.ndarray, np.ndarray]:
    """Source and destination ranks of a DP group's collective: a ring per LCM chunk."""
    return _rings_src_dst([ring.ranks for ring in dpg.rings])


def _rings_src_dst(rings) -> tuple[np.ndarray, np.ndarray]:
    """Source and destination ranks of rings of equal size: each rank to its successor."""
    rings = np.array(rings, np.int64)  # [rings, k]
    return rings.ravel(), np.roll(rings, -1, axis=1).ravel()


def _expert_part(a: PlanAnalysis, d: int) -> tuple | None:
    """Where DP group ``d``'s EP groups span replicas and each expert is held more than
    once: its expert rings' sources and destinations (:meth:`PlanAnalysis.expert_rings`);
    else None."""
    rings = a.expert_rings(d)
    return _rings_src_dst(rings) if rings else None


def _collective(out: _Builder, a: PlanAnalysis, d: int, deps, name: str, lo: int, hi: int,
                passes: int, rings, expert, payload: RingBytes | GatherBytes | None = None) -> int:
    """One DP COMM task on layers lo..hi of DP group ``d``: its rings (``rings``: sources
    and destinations; None for an expert bucket's task) on the bucket's gradients (or
    ``payload``, a parameter gather's bytes), dense only where EP groups span replicas,
    and then, if the bucket holds MoE layers, the expert rings (``expert``; None where
    they have buckets of their own) on the routed experts' gradients, all behind
    ``deps``."""
    if rings is None:
        return out.collective(deps, name, *expert, ExpertRingBytes(d, lo, hi, passes),
                              ExpertRingHops(d, passes))
    t = out.collective(deps, name, *rings, payload or RingBytes(d, lo, hi, passes),
                       RingHops(d, passes))
    if expert is not None and moe_layers_in(a.model, lo, hi):
        out.more_flows(t, *expert, ExpertRingBytes(d, lo, hi, passes),
                       ExpertRingHops(d, passes))
    return t


def _dp_buckets_of(a: PlanAnalysis, d: int) -> list[tuple[int, int, bool]]:
    """(first, last, experts) of DP group ``d``'s buckets: its buckets, then its expert
    buckets that hold MoE layers (where the experts are reduced apart)."""
    return ([(lo, hi, False) for lo, hi in a.buckets(d)]
            + [(lo, hi, True) for lo, hi in a.buckets(d, experts=True)
               if moe_layers_in(a.model, lo, hi)])


def _add_dp_sync(out: _Builder, a: PlanAnalysis, piece_end: dict) -> dict[int, list[int]]:
    """Per DP group and bucket a barrier and an all-reduce (ZeRO-1: a reduce-scatter) of
    the bucket's gradients; where the experts have buckets of their own, per expert bucket
    too, on the expert rings alone; returns group id -> the collectives it waits for."""
    finals: dict[int, list[int]] = {}
    zero1 = a.stack.zero_stage == 1
    passes, verb = (REDUCE_SCATTER, "rs") if zero1 else (ALLREDUCE, "dp")
    for d, dpg in enumerate(a.dp_groups):
        rings, expert = _ring_arrays(dpg), _expert_part(a, d)
        apart = bool(a.buckets(d, experts=True))
        for lo, hi, experts in _dp_buckets_of(a, d):
            kind = " experts" if experts else ""
            barrier = out.add(TaskRow(kind=COMPUTE, category=Category.BARRIER, phase=d),
                              [piece_end[(dg, lo)] for dg in dpg.device_groups],
                              f"dp barrier{kind} L{lo}-{hi}")
            t = _collective(out, a, d, [barrier], f"{verb}{kind} L{lo}-{hi}", lo, hi, passes,
                            None if experts else rings,
                            expert if experts or not apart else None)
            for dg in dpg.device_groups:
                finals.setdefault(dg, []).append(t)
    return finals


def _add_param_gathers(out: _Builder, a: PlanAnalysis,
                       after: dict[int, int] | None) -> dict[tuple[int, int], int]:
    """ZeRO-1's all-gather of the updated parameters, per DP group and bucket: after the
    members' optimizer steps (``after``: group id -> task), or else at the start of the
    iteration, one bucket after another in the order the forward pass needs them.

    Returns:
      (group id, layer) -> the gather that layer's forward waits for.
    """
    gathered: dict[tuple[int, int], int] = {}
    for d, dpg in enumerate(a.dp_groups):
        rings, expert = _ring_arrays(dpg), _expert_part(a, d)
        apart = bool(a.buckets(d, experts=True))
        previous: list[int] = []
        # buckets in the order the forward pass needs them (where the experts have buckets
        # of their own, the two kinds by first layer, dense first): gathered one after
        # another, so a layer's last gather is the one its forward waits for
        for lo, hi, experts in sorted(_dp_buckets_of(a, d), key=lambda b: (b[0], b[2])):
            deps = previous if after is None else [after[dg] for dg in dpg.device_groups]
            kind = " experts" if experts else ""
            t = _collective(out, a, d, deps, f"ag{kind} L{lo}-{hi}", lo, hi, ALLGATHER,
                            None if experts else rings,
                            expert if experts or not apart else None,
                            gather_bytes(a.stack.fp8_param_gather, d, lo, hi))
            previous = [t]
            gathered |= {(dg, layer): t for dg in dpg.device_groups
                         for layer in range(lo, hi + 1)}
    return gathered


@dataclass(frozen=True, eq=False)
class Template:
    """The structure of a plan's program, with a value key for every number.

    ``fill(analysis)`` makes the program of any analysis whose :func:`structure_key`
    equals the one this was built from. Flows with the same value keys and the same path
    carry the same numbers in every program of the structure: they form one class
    (``flow_classes``), whose numbers are computed once and spread to its flows.
    """

    key: tuple
    arrays: dict  # the structural fields of Program
    keys: Keys  # distinct value keys (xsweep.plan.values); index 0 is ZERO, 1 is ONE
    task_value: np.ndarray  # int32[T]: duration key of each task
    flow_class: np.ndarray  # int64[F]: the class of each flow
    class_bytes_value: np.ndarray  # int32[C]: the payload
    class_hops_value: np.ndarray  # int32[C]
    class_launches_value: np.ndarray  # int32[C]: NCCL operations the flows wait for
    class_p2p: np.ndarray  # bool[C]: point-to-point sends (their launch occupies the path)
    flow_classes: FlowClasses
    _names: tuple  # per block of tasks: their names, as _Builder.names keeps them
    _value_plan: _ValuePlan
    # numbers by the objects they are read from, and per topology object what the classes'
    # paths make of its figures: the variants of a sweep repeat either
    _per_numbers: Memo = field(default_factory=lambda: Memo(4), repr=False, compare=False)
    _per_topology: weakref.WeakKeyDictionary = field(
        default_factory=weakref.WeakKeyDictionary, repr=False, compare=False)

    def _path_figures(self, topo) -> tuple[np.ndarray, ...]:
        """Per class: its path's narrowest capacity, the bus efficiency there, the largest
        launch latency and the latencies added in path order (as a sequential sum does:
        the same bits), kept per topology object (variants on the same hardware share it)."""
        figures = self._per_topology.get(topo)
        if figures is None:
            paths = self.flow_classes.paths
            capacity = np.append(topo.capacity, np.inf)[paths]
            rows = np.arange(len(paths))
            narrowest = np.argmin(capacity, axis=1)
            latency_s = np.zeros(len(paths))
            for column in np.append(topo.latency_s, 0.0)[paths].T:
                latency_s += column
            figures = self._per_topology[topo] = (
                capacity[rows, narrowest],
                np.append(topo.bus_efficiency, 1.0)[paths][rows, narrowest],
                np.append(topo.launch_latency_s, -np.inf)[paths].max(axis=1, initial=0.0),
                latency_s)
        return figures

    def class_numbers(self, topo, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes and latency of the flows of each class, as
        ``xsweep.plan.transport.flow_numbers`` gives them one flow at a time: the payload
        over the bus efficiency of the path's narrowest link (plus, for a point-to-point
        send, its launch time at that link's rate), and the path's latency per hop plus the
        launches the flows wait for."""
        capacity, efficiency, launch_s, latency_s = self._path_figures(topo)
        wire = values[self.class_bytes_value] / efficiency
        wire = np.where(self.class_p2p, wire + launch_s * capacity, wire)
        return wire, (values[self.class_hops_value] * latency_s
                      + values[self.class_launches_value] * launch_s)

    def values(self, a: PlanAnalysis) -> np.ndarray:
        """float64[len(keys)]: the number behind every value key, for ``a``, kept for the
        objects the numbers are read from (:mod:`xsweep.plan.values`): variants that differ only in
        their network share them."""
        key = (id(a.groups), id(a.reshards), id(a.dp_groups), id(a.model))
        return self._per_numbers.get(key, lambda: (
            a.groups, a.reshards, a.dp_groups, a.model, self._values(a)))[-1]

    def _values(self, a: PlanAnalysis) -> np.ndarray:
        """The numbers of :meth:`values`. Keys of the kinds in ``BY_COST`` whose groups
        share a cost object (replicas of a stage) and their span share one number."""
        plan, groups = self._value_plan, a.groups
        out = np.empty(len(self.keys.rows))
        if len(plan.shared):
            index: dict[int, int] = {}
            cost_class = np.array([index.setdefault(id(g.cost), len(index)) for g in groups])
            _, first, which = np.unique(
                cost_class[plan.shared_group] * len(plan.slot_codes) + plan.shared_slot,
                return_index=True, return_inverse=True)
            numbers = [KINDS[plan.slot_codes[slot]].number(a, gi, *plan.slot_spans[slot])
                       for gi, slot in zip(plan.shared_group[first].tolist(),
                                           plan.shared_slot[first].tolist(), strict=True)]
            out[plan.shared] = np.array(numbers, np.float64)[which.reshape(-1)]
        if len(plan.optimizer):
            out[plan.optimizer] = np.array([g.optimizer_time_s for g in groups],
                                           np.float64)[plan.optimizer_group]
        codes, rows = self.keys.codes, self.keys.rows
        for i in plan.rest:
            out[i] = KINDS[codes[i]].number(a, *rows[i])
        return out

    def task_names(self) -> tuple[str, ...]:
        names = []
        for formats, ids in self._names:
            if isinstance(formats, _BlockNames):
                args, overlap, experts, cp, blocking, fp8_gather = formats.args
                formats = cached_block(*args, True, overlap, *experts, cp, blocking,
                                       fp8_gather).names
            fill = {f"dg{st}": gid for st, gid in enumerate(ids)}
            names += [n.format(**fill) for n in formats] if ids else formats
        return tuple(names)

    def fill(self, a: PlanAnalysis, *, names: bool = False) -> Program:
        """The program of ``a``: this structure with ``a``'s numbers.

        Args:
          names: give every task a readable name (for traces; costs a string each).
        """
        values = self.values(a)
        topo = a.topology
        class_bytes, class_latency_s = self.class_numbers(topo, values)
        return Program(
            link_capacity=topo.capacity, link_latency_s=topo.latency_s,
            link_names=LinkNames(topo),
            task_duration_s=values[self.task_value],
            flow_bytes=class_bytes[self.flow_class],
            flow_latency_s=class_latency_s[self.flow_class],
            tokens_per_iteration=a.tokens_per_iteration,
            model_flops_per_iteration=a.model_flops_per_iteration,
            peak_flops_per_s=a.peak_flops_per_s,
            task_names=self.task_names() if names else (), structure=self,
            **self.arrays)


def build_template(a: PlanAnalysis) -> Template:
    """Lower the structure of ``a`` once (see the module's description)."""
    with collector_paused():
        return _build_template(a)


def _build_template(a: PlanAnalysis) -> Template:
    out = _Builder()
    groups = a.groups
    zero1 = a.stack.zero_stage == 1 and bool(a.dp_groups)
    overlapped = a.stack.dp_overlap
    gather = _add_param_gathers(out, a, None) if zero1 and overlapped else {}
    last = [-1] * len(groups)
    piece_end: dict[tuple[int, int], int] = {}
    finals: dict[int, list[int]] = {}
    replicas = list(a.replicas.values())
    cuts = _cut_points(a)
    for block in [replicas] if a.fsdp else [[members] for members in replicas]:
        _add_block(out, a, block, cuts, gather, last, piece_end, finals)
    if not a.fsdp:
        finals = _add_dp_sync(out, a, piece_end)
    optimizer = {}
    for gi, g in enumerate(groups):
        deps = [d for d in [last[gi], *finals.get(g.id, [])] if d >= 0]
        optimizer[g.id] = out.add(TaskRow(
            kind=COMPUTE, category=Category.OPTIMIZER, stream=gi, stage=g.stage,
            device_group=g.id, replica=g.replica, value=out.key(OptimizerTime(gi))),
            deps, f"optimizer dg{g.id}")
    if zero1 and not overlapped:
        _add_param_gathers(out, a, optimizer)
    return _freeze(a, out)


def _freeze(a: PlanAnalysis, out: _Builder) -> Template:
    out.flush()
    topo = a.topology
    tasks = TaskColumns.concat(out.tasks)
    dep_counts = np.concatenate(out.dep_counts)
    src = np.concatenate(out.flow_src)
    dst = np.concatenate(out.flow_dst)
    flow_task = np.concatenate(out.flow_task)
    flow_bytes, flow_hops, flow_launches, flow_p2p = (np.concatenate(column) for column in (
        out.flow_bytes, out.flow_hops, out.flow_launches, out.flow_p2p))
    # a class: the flows of equal value keys (payload, hops, launches), kind and ranks (so
    # equal paths); routes are found per class and spread to its flows
    flow_class, first = _factorize(flow_bytes, flow_hops, flow_launches, flow_p2p, src, dst)
    class_ptr, class_links = topo.paths(src[first], dst[first])
    lengths = np.diff(class_ptr)[flow_class]
    path_ptr = np.concatenate([[0], np.cumsum(lengths)])
    hop_flow, hop = owners_and_places(lengths)
    path_links = class_links[class_ptr[flow_class][hop_flow] + hop]
    num_tasks = tasks.num_tasks

    def ptr(counts: np.ndarray) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)

    arrays = dict(
        stream_device_group=np.array([g.id for g in a.groups], np.int32),
        stream_rank_ptr=ptr([len(g.ranks) for g in a.groups]),
        stream_ranks=np.array([r for g in a.groups for r in g.ranks], np.int32),
        num_ranks=topo.num_ranks, rank_node=topo.rank_nodes(),
        **tasks.program_fields(),
        dep_ptr=ptr(dep_counts), dep_idx=np.concatenate(out.dep_idx).astype(np.int32),
        flow_ptr=ptr(np.bincount(flow_task, minlength=num_tasks)),
        flow_src=src.astype(np.int32), flow_dst=dst.astype(np.int32),
        path_ptr=path_ptr.astype(np.int32), path_links=path_links.astype(np.int32))
    paths = padded_paths(class_ptr, class_links, topo.num_links)
    keys = out.keys.frozen()
    return Template(structure_key(a), arrays, keys,
                    tasks.value.astype(np.int32), flow_class,
                    flow_bytes[first].astype(np.int32), flow_hops[first].astype(np.int32),
                    flow_launches[first].astype(np.int32), flow_p2p[first],
                    _flow_classes(first, paths, flow_task, flow_class, num_tasks),
                    tuple(out.names), _value_plan(keys))


def _factorize(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of equal non-negative integer columns as one id: int64[N] the id of each row,
    and int64[ids] the first row of each."""
    key, span = np.zeros(len(columns[0]), np.int64), 1
    for column in columns:  # one mixed-radix key, renumbered where it could overflow
        width = int(np.max(column, initial=0)) + 1
        if span * width >= 2**62:
            _, key = np.unique(key, return_inverse=True)
            span = int(key.max(initial=0)) + 1
        key, span = key * width + np.asarray(column, np.int64), span * width
    _, first, ids = np.unique(key, return_index=True, return_inverse=True)
    return ids.reshape(-1), first


def _factorize_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_factorize` of the columns of ``rows`` (int64[N, k], non-negative), the same
    ids (rows ranked in lexicographic order) from one ``np.unique`` rather than one pass
    per column: a key in one radix for all columns where it fits in 62 bits, else the
    rows' big-endian bytes (which compare as the numbers do)."""
    size = rows.shape[1]
    width = int(rows.max(initial=0)) + 1
    if size * math.log2(width) < 62:
        key = rows @ (width ** np.arange(size - 1, -1, -1, dtype=np.int64))
    else:
        key = np.ascontiguousarray(rows.astype(">i8")).view(
            np.dtype((np.void, 8 * size))).ravel()
    _, first, ids = np.unique(key, return_index=True, return_inverse=True)
    return ids.reshape(-1), first


def _flow_classes(first: np.ndarray, paths: np.ndarray, flow_task: np.ndarray,
                  flow_class: np.ndarray, num_tasks: int) -> FlowClasses:
    """The classes (their first flows and paths) and each task's set of classes (tasks with
    equal sets share one: sets of each size are found as equal rows)."""
    bits = max(len(first) - 1, 1).bit_length()  # a class in the low bits, the task above
    # (task, class), each once, in order; flows come in task order, so a stable sort
    # (a merge of sorted runs) takes a fraction of a quicksort's time
    pairs = np.sort((flow_task << bits) + flow_class, kind="stable")
    pairs = pairs[run_starts(pairs)]
    task, cls = pairs >> bits, pairs & ((1 << bits) - 1)
    starts = np.flatnonzero(run_starts(task))
    sizes = np.diff(starts, append=len(task))
    task_set = np.full(num_tasks, -1, np.int64)
    members, counts = [], []
    for size in sorted(set(sizes.tolist())):
        tasks = np.flatnonzero(sizes == size)
        rows = cls[starts[tasks][:, None] + np.arange(size)]
        which, first_row = _factorize_rows(rows)
        task_set[task[starts[tasks]]] = len(counts) + which
        members.append(rows[first_row].ravel())
        counts += [size] * len(first_row)
    return FlowClasses(first, paths, task_set,
                       np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                       np.concatenate(members or [np.zeros(0, np.int64)]))


#: Bytes of template arrays a cache keeps at most: a 512-GPU structure holds megabytes,
#: and what is derived from its programs for the kernels about as much again, so a
#: count alone would let a sweep over large clusters grow without bound.
TEMPLATE_BYTES = 256 * 2**20


def _nbytes(template: Template) -> int:
    arrays = [*template.arrays.values(), template.task_value, template.flow_class,
              *template.flow_classes]
    return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))


class TemplateCache:
    """Templates by structure key, at most ``size`` of them and ``max_bytes`` of their
    arrays (least recently used go)."""

    def __init__(self, size: int = 4096, max_bytes: int = TEMPLATE_BYTES):
        self.size, self.max_bytes = size, max_bytes
        self._templates: dict[tuple, tuple[Template, int]] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._templates)

    def get(self, a: PlanAnalysis) -> Template:
        key = structure_key(a)
        entry = self._templates.pop(key, None)
        if entry is None:
            template = build_template(a)
            entry = (template, _nbytes(template))
            self._bytes += entry[1]
            while self._templates and (len(self._templates) >= self.size
                                       or self._bytes > self.max_bytes):
                self._bytes -= self._templates.pop(next(iter(self._templates)))[1]
        self._templates[key] = entry  # most recently used last
        return entry[0]


def lower(analysis: PlanAnalysis, *, templates: TemplateCache | None = None,
          names: bool = True) -> Program:
    """Build the program IR of one iteration of an analysed plan.

    Args:
      templates: where structures are kept between calls (default: built afresh).
      names: give every task a readable name (for traces).
    """
    template = templates.get(analysis) if templates is not None else build_template(analysis)
    return template.fill(analysis, names=names)
