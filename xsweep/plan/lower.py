"""Lowering: a plan's analysis -> the program IR of one training iteration.

Granularity (what one task stands for):

* one forward or backward pass of one device group on one micro-batch is one
  COMPUTE task on that group's stream, followed by one blocking TP task;
* the TP all-reduces of that pass (Megatron: two per block and direction) are
  lowered as one pipelined ring (``collectives.pipelined_allreduce``); NCCL's bus
  efficiency and launch latency (per operation: two per all-reduce under sequence
  parallelism) come on top, as numbers (``xsweep.plan.transport``);
* activations (forward) and their gradients (backward) between consecutive
  stages move as explicit transfers, one COMM task per resharding phase;
* the last backward pass of every group is cut at the sweep-line segment
  boundaries, so that each DP group starts synchronising (behind a BARRIER task)
  as soon as every member has produced the gradients of its segment;
* DP synchronisation is one ring all-reduce per LCM chunk ring, lowered step by
  step (``2(k-1)`` COMM tasks of concurrent flows), all rings of a group at once;
  its first step waits the launch latency;
* the optimizer step is one COMPUTE task per group after all its DP groups.

How it is built. The variants of a sweep share structure: the DAG, the flows and
their paths depend on the device groups, the schedule, the resharding scheme and
the cluster's shape (``Topology.shape_key``), while the GPU and NIC models, the micro-batch size, recompute,
ZeRO and oversubscription change only numbers. So a plan is lowered in two parts:

* a :class:`Template` (the structure) is built once per :func:`structure_key` and
  kept: every task, dependency, flow and path as arrays, and for every duration,
  flow size and hop count a *value key* saying which number of the analysis it is;
* :meth:`Template.fill` computes those numbers for one analysis (one Python call per
  distinct value, the rest numpy) and returns the :class:`~xsweep.plan.program.Program`.

Replicas of one shape (stage TP degrees, layers, micro-batches) are one block of
tasks, built once and copied with their ranks and task ids shifted; DP rings are
generated as arrays. Task order, dependencies, flows and every number are those of
the straightforward per-task lowering this replaces (kept in the tests as the
reference, and compared bit for bit on random plans and numeric variants).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from xsweep.errors import InputError
from xsweep.plan.analysis import PlanAnalysis
from xsweep.plan.collectives import pipelined_allreduce_flow, ring_allreduce
from xsweep.plan.groups import chunk_bytes_per_rank
from xsweep.plan.program import Category, Program, TaskKind
from xsweep.plan.reshard import reshard
from xsweep.plan.schedule import stage_order

_COMPUTE, _COMM = int(TaskKind.COMPUTE), int(TaskKind.COMM)

# -- value keys --------------------------------------------------------------------------
# A value key is a tuple (kind, *args); VALUES[kind](analysis, *args) is its number. Group
# arguments are indices into analysis.groups. Key 0 is the constant 0 and key 1 the
# constant 1 (hops of a plain transfer).


def _tp_count(a: PlanAnalysis, gi: int, which: str, lo: int, hi: int) -> float:
    cost = a.groups[gi].cost
    if which == "forward":
        return cost.tp_allreduces_forward
    if which == "backward":
        return cost.tp_allreduces_backward
    g = a.groups[gi]
    return cost.tp_allreduces_backward * (hi - lo) / (g.last_layer - g.first_layer + 1)


def _tp_flow(a: PlanAnalysis, gi: int, which: str, lo: int, hi: int) -> tuple[float, float]:
    """(bytes, hops) of each flow of a group's pipelined TP ring."""
    g = a.groups[gi]
    return pipelined_allreduce_flow(g.tp, g.cost.tp_allreduce_bytes,
                                    _tp_count(a, gi, which, lo, hi))


def _piece_s(a: PlanAnalysis, gi: int, i0: int, i1: int) -> float:
    return sum(a.groups[gi].cost.layer_backward_time_s[i0:i1])


def _dp_step_bytes(a: PlanAnalysis, d: int) -> float:
    dpg = a.dp_groups[d]
    chunk = chunk_bytes_per_rank(a.dp_segment_bytes[d], dpg.tps)
    return ring_allreduce(dpg.rings[0].ranks, chunk)[0][0][2]


VALUES: dict[str, Callable] = {
    "zero": lambda a: 0.0,
    "one": lambda a: 1.0,
    "forward_s": lambda a, gi: a.groups[gi].cost.forward_time_s,
    "backward_s": lambda a, gi: a.groups[gi].cost.backward_time_s,
    "piece_s": _piece_s,
    "optimizer_s": lambda a, gi: a.groups[gi].optimizer_time_s,
    "tp_bytes": lambda a, *args: _tp_flow(a, *args)[0],
    "tp_hops": lambda a, *args: _tp_flow(a, *args)[1],
    "tp_launches": lambda a, gi, *args: (_tp_count(a, gi, *args)
                                         * a.groups[gi].cost.tp_ops_per_allreduce),
    "transfer_bytes": lambda a, src, dst, i: a.transfers(src, dst)[i].bytes,
    "dp_bytes": _dp_step_bytes,
}
_ZERO, _ONE = ("zero",), ("one",)


# -- the structure -----------------------------------------------------------------------


def structure_key(a: PlanAnalysis) -> tuple:
    """What a plan's program structure depends on: equal keys, equal DAGs, flows and paths.

    The device groups (ranks, stage, replica, layers, micro-batches), the schedule, the
    resharding scheme and the cluster's shape (``Topology.shape_key``).
    """
    groups = tuple((g.id, g.ranks, g.stage, g.replica, g.first_layer, g.last_layer,
                    g.num_micro_batches) for g in a.groups)
    return (a.schedule, a.resharding, a.topology.shape_key(), groups)


class _Tasks:
    """Columns of tasks, flows and value keys as they are appended (a growing structure)."""

    def __init__(self) -> None:
        self.cols: list[tuple] = []  # (kind, category, stream, stage, mb, dg, replica, phase)
        self.deps: list[tuple[int, ...]] = []
        self.keys: dict[tuple, int] = {}  # distinct value keys, numbered as they come
        self.value: list[int] = []  # duration key per task
        self.names: list[str] = []
        self.flows: list[tuple] = []  # (task, src, dst, bytes, hops and launches keys, p2p)

    def key(self, value: tuple) -> int:
        return self.keys.setdefault(value, len(self.keys))

    def add(self, kind, category, stream, deps, value, labels, name, flows=()) -> int:
        t = len(self.cols)
        self.cols.append((kind, int(category), stream, *labels))
        self.deps.append(tuple(sorted(set(deps))))
        self.value.append(self.key(value))
        self.names.append(name)
        self.flows.extend((t, src, dst, self.key(nbytes), self.key(hops), self.key(launches),
                           p2p) for src, dst, nbytes, hops, launches, p2p in flows)
        return t


@dataclass(frozen=True)
class _ReplicaBlock:
    """The tasks of one replica shape, ranks as (stage, TP index), groups as stages.

    Task ids count from 0 inside the block; ``piece_end`` maps (stage, first layer)
    to the task that ends that backward piece (for the DP barriers).
    """

    cols: np.ndarray  # int64[T, 8]: kind, category, stream (stage or -1), stage, mb, dg
    #                   (stage), replica (0), phase
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    keys: tuple[tuple, ...]  # the block's value keys, stages standing for group indices
    value: np.ndarray  # per task: index into keys
    names: tuple[str, ...]  # with "{dg<stage>}" placeholders filled per replica
    flow_task: np.ndarray
    flow_src: np.ndarray  # int64[F, 2]: (stage, TP index)
    flow_dst: np.ndarray
    flow_bytes: np.ndarray  # index into keys: the payload
    flow_hops: np.ndarray
    flow_launches: np.ndarray
    flow_p2p: np.ndarray  # bool: a point-to-point send
    last: tuple[int, ...]  # last task on each stage's stream
    piece_end: dict[tuple[int, int], int]


def _replica_block(schedule: str, scheme: str, stages: tuple, boundaries: tuple) -> _ReplicaBlock:
    """Every pass of one replica in an order that respects all dependencies.

    ``stages``: per stage ``(tp, first_layer, last_layer, num_micro_batches)``.
    Durations and flow sizes are keyed by stage (``("forward_s", stage)``); the
    caller substitutes group indices.
    """
    p = len(stages)
    tasks = _Tasks()
    last: list[int | None] = [None] * p
    piece_end: dict[tuple[int, int], int] = {}

    def on_stream(s, category, value, deps, tp, mb, name):
        tp_k = stages[s][0]
        labels = (s, mb, s, 0, -1)
        deps = [d for d in [last[s], *deps] if d is not None]
        t = tasks.add(_COMPUTE, category, s, deps, value, labels, name)
        if tp_k > 1:
            flows = [((s, i), (s, (i + 1) % tp_k), ("tp_bytes", s, *tp), ("tp_hops", s, *tp),
                      ("tp_launches", s, *tp), False) for i in range(tp_k)]
            t = tasks.add(_COMM, Category.TP, s, [t], _ZERO, labels, f"tp {name}", flows)
        last[s] = t
        return t

    phases = {}  # (src stage, dst stage) -> [[flow, ...] per phase]
    for s in range(p - 1):
        for a, b in ((s, s + 1), (s + 1, s)):
            t_a = stages[a][0]
            moves = reshard(scheme, range(t_a), range(t_a, t_a + stages[b][0]), 1.0)

            def local(rank, a=a, b=b, t_a=t_a):  # a scheme may also move inside one side
                return (a, rank) if rank < t_a else (b, rank - t_a)

            by_phase: dict[int, list] = {}
            for i, tr in enumerate(moves):
                by_phase.setdefault(tr.phase, []).append(
                    (local(tr.src), local(tr.dst), ("transfer_bytes", a, b, i), _ONE, _ZERO,
                     True))
            phases[a, b] = [by_phase[k] for k in sorted(by_phase)]

    def transfer(src, dst, mb, after, backward):
        category = Category.PP if stages[src][0] == stages[dst][0] else Category.RESHARD
        t = after
        direction = "grad" if backward else "act"
        for phase, flows in enumerate(phases[src, dst]):
            t = tasks.add(_COMM, category, -1, [t], _ZERO, (src, mb, src, 0, phase),
                          f"{direction} {{dg{src}}}->{{dg{dst}}} mb{mb} p{phase}", flows)
        return t

    def backward(s, mb, deps, last_of_stage):
        _, first, final, _ = stages[s]
        if not last_of_stage:
            return on_stream(s, Category.BACKWARD, ("backward_s", s), deps,
                             ("backward", 0, 0), mb, f"B dg{{dg{s}}} mb{mb}")
        cuts = [x for x in boundaries if first < x <= final]
        edges = [first, *cuts, final + 1]
        t = None
        for lo, hi in reversed(list(zip(edges, edges[1:], strict=False))):
            t = on_stream(s, Category.BACKWARD, ("piece_s", s, lo - first, hi - first), deps,
                          ("piece", lo, hi), mb, f"B dg{{dg{s}}} mb{mb} L{lo}-{hi - 1}")
            deps = []
            piece_end[(s, lo)] = t
        return t

    orders = [stage_order(schedule, s, p, stages[s][3]) for s in range(p)]
    last_b = [max((i for i, (k, _) in enumerate(o) if k == "B"), default=-1) for o in orders]
    pos = [0] * p
    fwd_in: dict[tuple[int, int], int] = {}
    bwd_in: dict[tuple[int, int], int] = {}
    while any(pos[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                kind, mb = orders[s][pos[s]]
                if kind == "F":
                    if s > 0 and (s, mb) not in fwd_in:
                        break
                    deps = [fwd_in[(s, mb)]] if s > 0 else []
                    t = on_stream(s, Category.FORWARD, ("forward_s", s), deps,
                                  ("forward", 0, 0), mb, f"F dg{{dg{s}}} mb{mb}")
                    if s + 1 < p:
                        fwd_in[(s + 1, mb)] = transfer(s, s + 1, mb, t, False)
                else:
                    if s + 1 < p and (s, mb) not in bwd_in:
                        break
                    deps = [bwd_in[(s, mb)]] if s + 1 < p else []
                    t = backward(s, mb, deps, pos[s] == last_b[s])
                    if s > 0:
                        bwd_in[(s - 1, mb)] = transfer(s, s - 1, mb, t, True)
                pos[s] += 1
                progressed = True
        if not progressed:
            raise AssertionError("pipeline schedule deadlocked")
    counts = [len(d) for d in tasks.deps]
    flows = tasks.flows
    return _ReplicaBlock(
        cols=np.array(tasks.cols, np.int64).reshape(-1, 8),
        dep_ptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        dep_idx=np.array([d for ds in tasks.deps for d in ds], np.int64),
        keys=tuple(tasks.keys), value=np.array(tasks.value, np.int64), names=tuple(tasks.names),
        flow_task=np.array([f[0] for f in flows], np.int64),
        flow_src=np.array([f[1] for f in flows], np.int64).reshape(-1, 2),
        flow_dst=np.array([f[2] for f in flows], np.int64).reshape(-1, 2),
        flow_bytes=np.array([f[3] for f in flows], np.int64),
        flow_hops=np.array([f[4] for f in flows], np.int64),
        flow_launches=np.array([f[5] for f in flows], np.int64),
        flow_p2p=np.array([f[6] for f in flows], bool),
        last=tuple(-1 if t is None else t for t in last), piece_end=piece_end)


@functools.lru_cache(maxsize=256)
def _cached_block(schedule: str, scheme: str, stages: tuple, boundaries: tuple) -> _ReplicaBlock:
    return _replica_block(schedule, scheme, stages, boundaries)


def _with_groups(key: tuple, stage_group: list[int]) -> tuple:
    """A block's value key with its stages replaced by group indices."""
    kind = key[0]
    if kind in ("zero", "one"):
        return key
    if kind == "transfer_bytes":
        return (kind, stage_group[key[1]], stage_group[key[2]], key[3])
    return (kind, stage_group[key[1]], *key[2:])


class _Builder:
    """Columnar program structure: tasks, dependencies, flows (global ranks), value keys."""

    def __init__(self) -> None:
        self.cols: list[np.ndarray] = []
        self.dep_counts: list[np.ndarray] = []
        self.dep_idx: list[np.ndarray] = []
        self.keys: dict[tuple, int] = {_ZERO: 0, _ONE: 1}
        self.value: list[np.ndarray] = []
        self.names: list[Callable[[], list[str]]] = []  # made only when asked for
        self.flow_task: list[np.ndarray] = []
        self.flow_src: list[np.ndarray] = []
        self.flow_dst: list[np.ndarray] = []
        self.flow_bytes: list[np.ndarray] = []
        self.flow_hops: list[np.ndarray] = []
        self.flow_launches: list[np.ndarray] = []
        self.flow_p2p: list[np.ndarray] = []
        self.num_tasks = 0

    def key(self, value: tuple) -> int:
        return self.keys.setdefault(value, len(self.keys))

    def extend(self, cols, dep_counts, dep_idx, value, names, flow_task, flow_src, flow_dst,
               flow_bytes, flow_hops, flow_launches, flow_p2p) -> int:
        """Append tasks (ids already global, keys already indices); return the first id."""
        first = self.num_tasks
        self.cols.append(np.asarray(cols, np.int64).reshape(-1, 8))
        for column, data in ((self.dep_counts, dep_counts), (self.dep_idx, dep_idx),
                             (self.value, value), (self.flow_task, flow_task),
                             (self.flow_src, flow_src), (self.flow_dst, flow_dst),
                             (self.flow_bytes, flow_bytes), (self.flow_hops, flow_hops),
                             (self.flow_launches, flow_launches)):
            column.append(np.asarray(data, np.int64))
        self.flow_p2p.append(np.asarray(flow_p2p, bool))
        self.names.append(names)
        self.num_tasks += len(self.cols[-1])
        return first

    def add(self, category, stream, deps, value, labels, name) -> int:
        """One COMPUTE task without flows."""
        deps = sorted(set(deps))
        return self.extend([(_COMPUTE, int(category), stream, *labels)], [len(deps)], deps,
                           [self.key(value)], lambda: [name], [], [], [], [], [], [], [])


def _add_replica(out: _Builder, a: PlanAnalysis, members: tuple[int, ...],
                 boundaries: tuple, last: list[int], piece_end: dict) -> None:
    groups = a.groups
    stages = tuple((groups[gi].tp, groups[gi].first_layer, groups[gi].last_layer,
                    groups[gi].num_micro_batches) for gi in members)
    block = _cached_block(a.schedule, a.resharding, stages, boundaries)
    base = out.num_tasks
    members_arr = np.asarray(members, np.int64)
    ids = np.array([groups[gi].id for gi in members], np.int64)
    cols = block.cols.copy()
    on_stream = cols[:, 2] >= 0
    cols[on_stream, 2] = members_arr[cols[on_stream, 2]]  # stage -> stream (group index)
    cols[:, 5] = ids[cols[:, 5]]  # stage -> device group id
    cols[:, 6] = groups[members[0]].replica
    # (stage, TP index) -> global rank, and the block's keys -> the program's keys
    rank_table = np.array([r for gi in members for r in groups[gi].ranks], np.int64)
    offset = np.concatenate([[0], np.cumsum([groups[gi].tp for gi in members])])
    remap = np.array([out.key(_with_groups(k, members)) for k in block.keys], np.int64)
    fill = {f"dg{s}": groups[gi].id for s, gi in enumerate(members)}
    out.extend(cols, np.diff(block.dep_ptr), block.dep_idx + base, remap[block.value],
               lambda: [n.format(**fill) for n in block.names], block.flow_task + base,
               rank_table[offset[block.flow_src[:, 0]] + block.flow_src[:, 1]],
               rank_table[offset[block.flow_dst[:, 0]] + block.flow_dst[:, 1]],
               remap[block.flow_bytes], remap[block.flow_hops], remap[block.flow_launches],
               block.flow_p2p)
    for s, gi in enumerate(members):
        last[gi] = block.last[s] + base if block.last[s] >= 0 else -1
    for (s, lo), t in block.piece_end.items():
        piece_end[(groups[members[s]].id, lo)] = t + base


def _add_dp_sync(out: _Builder, a: PlanAnalysis, piece_end: dict) -> dict[int, list[int]]:
    """Barrier + ring all-reduces per DP group; returns group id -> final tasks.

    Every ring of a DP group holds one rank of each member, so all have ``k`` ranks and
    ``2(k-1)`` steps; the rings are laid out one after another, step by step.
    """
    finals: dict[int, list[int]] = {}
    for d, dpg in enumerate(a.dp_groups):
        members = [piece_end[(dg, dpg.first_layer)] for dg in dpg.device_groups]
        barrier = out.add(Category.BARRIER, -1, members, _ZERO, (-1, -1, -1, -1, d),
                          f"dp barrier L{dpg.first_layer}-{dpg.last_layer}")
        rings = np.array([ring.ranks for ring in dpg.rings], np.int64)  # [R, k]
        num_rings, k = rings.shape
        steps = 2 * (k - 1)
        ids = out.num_tasks + np.arange(num_rings * steps).reshape(num_rings, steps)
        cols = np.zeros((num_rings * steps, 8), np.int64)
        cols[:, 0], cols[:, 1], cols[:, 2:7] = _COMM, int(Category.DP), -1
        cols[:, 7] = np.tile(np.arange(steps), num_rings)
        deps = np.concatenate([np.full((num_rings, 1), barrier), ids[:, :-1]], axis=1)
        span = f"L{dpg.first_layer}-{dpg.last_layer}"
        chunks = [ring.chunk for ring in dpg.rings]
        flows = num_rings * steps * k
        out.extend(cols, np.ones(num_rings * steps), deps.ravel(), np.zeros(num_rings * steps),
                   lambda span=span, chunks=chunks, steps=steps: [
                       f"dp {span} ring{c} step{i}" for c in chunks for i in range(steps)],
                   np.repeat(ids.ravel(), k), np.repeat(rings, steps, axis=0).ravel(),
                   np.repeat(np.roll(rings, -1, axis=1), steps, axis=0).ravel(),
                   np.full(flows, out.key(("dp_bytes", d))), np.full(flows, 1),
                   np.repeat(np.tile(np.arange(steps) == 0, num_rings), k).astype(np.int64),
                   np.zeros(flows, bool))
        ends = [barrier, *ids[:, -1].tolist()]
        for dg in dpg.device_groups:
            finals.setdefault(dg, []).extend(ends)
    return finals


@dataclass(frozen=True, eq=False)
class Template:
    """The structure of a plan's program, with a value key for every number.

    ``fill(analysis)`` makes the program of any analysis whose :func:`structure_key`
    equals the one this was built from.
    """

    key: tuple
    arrays: dict  # the structural fields of Program
    keys: tuple[tuple, ...]  # distinct value keys; index 0 is ("zero",), 1 is ("one",)
    task_value: np.ndarray  # int32[T]: duration key of each task
    flow_bytes_value: np.ndarray  # int32[F]: the payload
    flow_hops_value: np.ndarray  # int32[F]
    flow_launches_value: np.ndarray  # int32[F]: NCCL operations the flow waits for
    flow_p2p: np.ndarray  # bool[F]: a point-to-point send (its launch occupies the path)
    path_matrix: np.ndarray  # int64[F, longest path]: each flow's links, L (none) after them
    _names: tuple  # per block of tasks: a function that makes their names

    def _along_paths(self, per_link: np.ndarray, pad: float) -> np.ndarray:
        """float64[F, longest path]: a per-link figure at each hop of each flow."""
        return np.append(per_link, pad)[self.path_matrix]

    def path_latency_s(self, latency_s: np.ndarray) -> np.ndarray:
        """float64[F]: the sum of the latencies along each flow's path, added link by link
        in path order (as a sequential sum does: the same bits)."""
        total = np.zeros(len(self.path_matrix))
        for column in self._along_paths(latency_s, 0.0).T:
            total += column
        return total

    def flow_numbers(self, topo, payload: np.ndarray, hops: np.ndarray,
                     launches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes and latency of every flow, as ``xsweep.plan.transport.flow_numbers`` gives
        them one flow at a time: the payload over the bus efficiency of the path's
        narrowest link (plus, for a point-to-point send, its launch time at that link's
        rate), and the path's latency per hop plus the launches it waits for."""
        capacity = self._along_paths(topo.capacity, np.inf)
        rows = np.arange(len(capacity))
        narrowest = np.argmin(capacity, axis=1)
        efficiency = self._along_paths(topo.bus_efficiency, 1.0)[rows, narrowest]
        launch_s = self._along_paths(topo.launch_latency_s, -np.inf).max(axis=1, initial=0.0)
        wire = payload / efficiency
        wire = np.where(self.flow_p2p, wire + launch_s * capacity[rows, narrowest], wire)
        return wire, hops * self.path_latency_s(topo.latency_s) + launches * launch_s

    def values(self, a: PlanAnalysis) -> np.ndarray:
        """float64[len(keys)]: the number behind every value key, for ``a``."""
        return np.array([VALUES[k[0]](a, *k[1:]) for k in self.keys], np.float64)

    def task_names(self) -> tuple[str, ...]:
        return tuple(name for make in self._names for name in make())

    def fill(self, a: PlanAnalysis, *, names: bool = False) -> Program:
        """The program of ``a``: this structure with ``a``'s numbers.

        Args:
          names: give every task a readable name (for traces; costs a string each).
        """
        values = self.values(a)
        topo = a.topology
        flow_bytes, flow_latency_s = self.flow_numbers(
            topo, values[self.flow_bytes_value], values[self.flow_hops_value],
            values[self.flow_launches_value])
        return Program(
            link_capacity=topo.capacity, link_latency_s=topo.latency_s,
            link_names=topo.names,
            task_duration_s=values[self.task_value],
            flow_bytes=flow_bytes, flow_latency_s=flow_latency_s,
            tokens_per_iteration=a.tokens_per_iteration,
            model_flops_per_iteration=a.model_flops_per_iteration,
            peak_flops_per_s=a.peak_flops_per_s,
            task_names=self.task_names() if names else (), structure=self,
            **self.arrays)


def build_template(a: PlanAnalysis) -> Template:
    """Lower the structure of ``a`` once (see the module's description)."""
    out = _Builder()
    groups = a.groups
    boundaries = tuple(sorted({g.first_layer for g in a.dp_groups}
                              | {g.last_layer + 1 for g in a.dp_groups}))
    last = [-1] * len(groups)
    piece_end: dict[tuple[int, int], int] = {}
    for members in a.replicas.values():
        _add_replica(out, a, members, boundaries, last, piece_end)
    finals = _add_dp_sync(out, a, piece_end)
    for gi, g in enumerate(groups):
        deps = [d for d in [last[gi], *finals.get(g.id, [])] if d >= 0]
        out.add(Category.OPTIMIZER, gi, deps, ("optimizer_s", gi),
                (g.stage, -1, g.id, g.replica, -1), f"optimizer dg{g.id}")
    return _freeze(a, out)


def _freeze(a: PlanAnalysis, out: _Builder) -> Template:
    topo = a.topology
    cols = np.concatenate(out.cols)
    dep_counts = np.concatenate(out.dep_counts)
    src = np.concatenate(out.flow_src)
    dst = np.concatenate(out.flow_dst)
    flow_task = np.concatenate(out.flow_task)
    path_ptr, path_links = topo.paths(src, dst)
    num_tasks = len(cols)

    def ptr(counts: np.ndarray) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)

    arrays = dict(
        stream_device_group=np.array([g.id for g in a.groups], np.int32),
        stream_rank_ptr=ptr([g.tp for g in a.groups]),
        stream_ranks=np.array([r for g in a.groups for r in g.ranks], np.int32),
        num_ranks=topo.num_ranks, rank_node=topo.rank_nodes(),
        task_kind=cols[:, 0].astype(np.int8), task_category=cols[:, 1].astype(np.int8),
        task_stream=cols[:, 2].astype(np.int32), task_stage=cols[:, 3].astype(np.int32),
        task_micro_batch=cols[:, 4].astype(np.int32),
        task_device_group=cols[:, 5].astype(np.int32),
        task_replica=cols[:, 6].astype(np.int32), task_phase=cols[:, 7].astype(np.int32),
        dep_ptr=ptr(dep_counts), dep_idx=np.concatenate(out.dep_idx).astype(np.int32),
        flow_ptr=ptr(np.bincount(flow_task, minlength=num_tasks)),
        flow_src=src.astype(np.int32), flow_dst=dst.astype(np.int32),
        path_ptr=path_ptr.astype(np.int32), path_links=path_links.astype(np.int32))
    lengths = np.diff(path_ptr)
    path_matrix = np.full((len(lengths), int(lengths.max(initial=0))), topo.num_links, np.int64)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    path_matrix[owner, np.arange(len(owner)) - path_ptr[:-1][owner]] = path_links
    return Template(structure_key(a), arrays, tuple(out.keys),
                    np.concatenate(out.value).astype(np.int32),
                    np.concatenate(out.flow_bytes).astype(np.int32),
                    np.concatenate(out.flow_hops).astype(np.int32),
                    np.concatenate(out.flow_launches).astype(np.int32),
                    np.concatenate(out.flow_p2p), path_matrix, tuple(out.names))


class TemplateCache:
    """Templates by structure key, at most ``size`` of them (least recently used go)."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._templates: dict[tuple, Template] = {}

    def __len__(self) -> int:
        return len(self._templates)

    def get(self, a: PlanAnalysis) -> Template:
        key = structure_key(a)
        template = self._templates.pop(key, None)
        if template is None:
            template = build_template(a)
            if len(self._templates) >= self.size:
                self._templates.pop(next(iter(self._templates)))
        self._templates[key] = template  # most recently used last
        return template


#: Options the schema and memory model accept whose task graph is not lowered yet:
#: (field, value that needs it, what the lowering lacks).
_NOT_LOWERED = (
    ("virtual_pipeline_stages", lambda s: s.virtual_pipeline_stages > 1,
     "the interleaved 1F1B schedule"),
    ("dp_overlap", lambda s: s.dp_overlap, "bucketed gradient reduction during the backward pass"),
    ("zero_stage", lambda s: s.zero_stage == 3, "the per-layer all-gathers of FSDP"),
)


def lower(analysis: PlanAnalysis, *, templates: TemplateCache | None = None,
          names: bool = True) -> Program:
    """Build the program IR of one iteration of an analysed plan.

    Args:
      templates: where structures are kept between calls (default: built afresh).
      names: give every task a readable name (for traces).

    Raises:
      InputError: the plan sets a training-stack option whose tasks are not lowered yet.
    """
    stack = analysis.stack
    for name, needs, what in _NOT_LOWERED:
        if needs(stack):
            raise InputError(None, f"training.{name}", getattr(stack, name),
                             f"{what} is not lowered yet; the memory model accepts it")
    template = templates.get(analysis) if templates is not None else build_template(analysis)
    return template.fill(analysis, names=names)


