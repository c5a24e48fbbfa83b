"""The passes of one or more replicas as a block of tasks: the structure the lowering copies.

A block holds every task of a set of replicas that depends only on their shapes: the
forward and backward passes of each stream (a device group), cut into pieces, each
piece a COMPUTE task and a blocking TP task; the transfers between stages; and, under
FSDP, the per-layer parameter all-gathers and gradient reduce-scatters that tie the
replicas together. Streams are numbered inside the block (replica by replica, stage by
stage), ranks as (stream, TP index), and every number is a *value key* naming its
stream (``("pass_s", stream, "F", first, end)``); the lowering substitutes device
groups, ranks and DP groups when it places the block (:mod:`xsweep.plan.lower`).

Pieces. A pass of chunk ``c`` runs the chunk's layers (the ``c``-th ``v``-th of the
stage's layers; without interleaving, all of them). It is one piece, except:

* the last backward pass of each chunk is cut at ``cuts`` (DP segment boundaries and
  gradient-bucket starts), so that a bucket's reduction can start when its layers are
  done (``piece_end``);
* with ``gather`` (ZeRO-1 with overlap), the first forward pass of each chunk is cut
  at the same points, and each piece waits for its bucket's parameter all-gather
  (``waits``: resolved by the lowering, which issues the gathers first);
* under FSDP every pass is cut into its layers. Layer ``i`` of a stream's sequence
  (forward and backward pieces in execution order) waits for all-gather ``i`` of its
  DP group, which starts when the previous all-gather is done and every member has
  finished compute ``i - 2`` (one layer prefetched while one runs: the two gathered
  blocks of the memory model). After a backward piece, the layer's gradients are
  reduce-scattered once every member has produced them, one reduce-scatter after the
  other; the last one waits on a barrier over the members' last pieces.

Collectives of a DP group are one COMM task with a pipelined ring per LCM chunk
(:mod:`xsweep.plan.collectives`). Replicas under FSDP must have the same stages and
micro-batches (the plan's validation says so): their collectives match in order.

Task order: streams are visited round-robin and each runs its pieces as far as their
inputs exist, so every task comes after its predecessors.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from xsweep.memo import cached
from xsweep.plan.collectives import ALLGATHER, REDUCE_SCATTER
from xsweep.plan.program import Category
from xsweep.plan.replica_block import COMM, COMPUTE, FlowGroup, plain_block, tp_rings
from xsweep.plan.reshard import reshard
from xsweep.plan.schedule import stage_order
from xsweep.ragged import run_starts

ZERO, ONE = ("zero",), ("one",)  # the value keys of the constants 0 and 1

#: A stage as a block sees it: (TP degree, first layer, last layer, micro-batches).
Stage = tuple[int, int, int, int]


class Tasks:
    """Columns of tasks, flows and value keys as they are appended (a growing structure)."""

    def __init__(self) -> None:
        #: (kind, category, stream, stage, mb, dg, replica, phase, duration key index, name)
        self.records: list[tuple] = []
        self.deps: list[list[int]] = []  # as given: -1 (none) and repeats are dropped at the end
        self.keys: dict[tuple, int] = {}  # distinct value keys, numbered as they come
        self.flow_tasks: list[int] = []  # COMM tasks with flows, in order...
        self.flow_groups: list[FlowGroup] = []  # ... and their flows

    def key(self, value: tuple) -> int:
        return self.keys.setdefault(value, len(self.keys))

    def flow_group(self, flows) -> FlowGroup:
        """Flows ``(src, dst, bytes, hops, launches, p2p)`` (value keys as tuples) as arrays."""
        return FlowGroup(np.array([f[0] for f in flows], np.int64).reshape(-1, 2),
                         np.array([f[1] for f in flows], np.int64).reshape(-1, 2),
                         np.array([[self.key(k) for k in f[2:5]] for f in flows],
                                  np.int64).reshape(-1, 3),
                         np.array([f[5] for f in flows], bool))

    def tp_keys(self, stream: int, span: tuple) -> list[int]:
        """The payload, hops and launches keys of every flow of a stream's TP ring over one
        piece ``span`` (kind, layers), numbered in that order."""
        return [self.key((name, stream, *span)) for name in ("tp_bytes", "tp_hops",
                                                             "tp_launches")]

    def tp_ring(self, stream: int, tp: int, span: tuple) -> FlowGroup:
        """The ring of a stream's TP collective over one piece ``span`` (kind, layers):
        rank ``i`` sends to rank ``i + 1`` (:meth:`flow_group` of those flows, whose value
        keys are all the same three)."""
        return tp_rings([stream], [tp], [self.tp_keys(stream, span)])

    def add(self, record: tuple, deps: list[int], flows: FlowGroup | None = None) -> int:
        """Append a task (``record`` as :attr:`records` holds it, its duration's key as an
        index: :meth:`key`); return its id."""
        t = len(self.records)
        self.records.append(record)
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

    def flow_arrays(self) -> tuple[np.ndarray, ...]:
        """Task, source, destination, the three keys and p2p of every flow, in task order."""
        groups = self.flow_groups or [self.flow_group([])]  # no flows: arrays of none
        keys = np.concatenate([g.keys for g in groups])
        return (np.repeat(np.array(self.flow_tasks, np.int64),
                          [len(g.p2p) for g in self.flow_groups]),
                np.concatenate([g.src for g in groups]), np.concatenate([g.dst for g in groups]),
                keys[:, 0], keys[:, 1], keys[:, 2], np.concatenate([g.p2p for g in groups]))


@dataclass(frozen=True)
class Block:
    """The tasks of a set of replicas, streams numbered inside the block.

    Task ids count from 0. Columns ``dg`` and ``replica`` hold the block stream a task
    belongs to (-1: none), names hold ``{dg<stream>}`` placeholders, value keys name
    block streams (and, for FSDP collectives, the block's stage as its DP group).
    """

    cols: np.ndarray  # int64[T, 8]: kind, category, stream, stage, mb, dg, replica, phase
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    keys: tuple[tuple, ...]
    value: np.ndarray  # per task: index into keys
    names: tuple[str, ...] | None  # None: not made (see build_block)
    flow_task: np.ndarray
    flow_src: np.ndarray  # int64[F, 2]: (stream, TP index)
    flow_dst: np.ndarray
    flow_bytes: np.ndarray  # index into keys: the payload
    flow_hops: np.ndarray
    flow_launches: np.ndarray
    flow_p2p: np.ndarray  # bool: a point-to-point send
    last: tuple[int, ...]  # last task on each stream
    piece_end: dict[tuple[int, int], int]  # (stream, first layer) -> end of that backward piece
    waits: tuple[tuple[int, int, int], ...]  # (task, stream, first layer): waits for a gather
    finals: dict[int, int]  # stream -> its DP group's last reduce-scatter (FSDP)


def pieces(schedule: str, stage: int, num_stages: int, spec: Stage, v: int, cuts: tuple,
           gather: bool, fsdp: bool) -> list[tuple]:
    """The pieces of one stream in execution order (see the module's description).

    Returns:
      ``(kind, micro_batch, chunk, first layer, end layer (exclusive), index in the pass,
      pieces in the pass, role)`` per piece; role ``"last_b"`` (a piece of a chunk's last
      backward), ``"first_f"`` (of a gathered first forward), ``"layer"`` (FSDP) or ``""``.
    """
    _, first, last, m = spec
    order = stage_order(schedule, stage, num_stages, m, v)
    size = (last - first + 1) // v
    first_f, last_b = {}, {}
    for i, (kind, _, c) in enumerate(order):
        if kind == "F":
            first_f.setdefault(c, i)
        else:
            last_b[c] = i
    out: list[tuple] = []
    for i, (kind, mb, c) in enumerate(order):
        lo = first + c * size
        hi = lo + size
        if fsdp:
            role, edges = "layer", list(range(lo, hi + 1))
        elif kind == "B" and last_b[c] == i:
            role, edges = "last_b", [lo, *(x for x in cuts if lo < x < hi), hi]
        elif kind == "F" and gather and first_f[c] == i:
            role, edges = "first_f", [lo, *(x for x in cuts if lo < x < hi), hi]
        else:  # most passes: one piece
            out.append((kind, mb, c, lo, hi, 0, 1, ""))
            continue
        spans = list(zip(edges, edges[1:], strict=False))
        if kind == "B":
            spans.reverse()
        out += [(kind, mb, c, a, b, j, len(spans), role) for j, (a, b) in enumerate(spans)]
    return out


def piece_name(kind: str, stream_name: str, mb: int, chunk: int, lo: int, hi: int, v: int,
               role: str) -> str:
    """A readable name: ``F dg3 mb2``, with the chunk when interleaved and the layers when cut."""
    name = f"{kind} dg{stream_name} mb{mb}"
    if v > 1:
        name += f" c{chunk}"
    return f"{name} L{lo}-{hi - 1}" if role else name


def next_stage(kind: str, stage: int, num_stages: int, chunk: int, v: int):
    """The (stage, chunk) a pass sends its output to, or None: forward to the next virtual
    stage (the next stage, or chunk + 1 of the first), backward to the one before."""
    if kind == "F":
        if stage + 1 < num_stages:
            return stage + 1, chunk
        return (0, chunk + 1) if chunk + 1 < v else None
    if stage > 0:
        return stage - 1, chunk
    return (num_stages - 1, chunk - 1) if chunk > 0 else None


def needs_input(kind: str, stage: int, num_stages: int, chunk: int, v: int) -> bool:
    """Whether a pass waits for another stage's output (all but the model's ends)."""
    return (stage, chunk) != ((0, 0) if kind == "F" else (num_stages - 1, v - 1))


def transfer_pairs(num_stages: int, v: int) -> list[tuple[int, int]]:
    """(source stage, destination stage) of every transfer of one replica."""
    pairs = [p for s in range(num_stages - 1) for p in ((s, s + 1), (s + 1, s))]
    if v > 1 and num_stages > 2:
        pairs += [(num_stages - 1, 0), (0, num_stages - 1)]
    return pairs


def ring_pairs(tps: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """The flows of one collective over LCM rings: ``(member, TP index, member, TP index)``
    per rank of each ring, ring by ring (ring ``c`` holds rank ``c mod tp`` of each
    member, in member order; :mod:`xsweep.plan.groups`)."""
    k = len(tps)
    return [(i, c % tps[i], (i + 1) % k, c % tps[(i + 1) % k])
            for c in range(math.lcm(*tps)) for i in range(k)]


def build_block(schedule: str, scheme: str, v: int, replicas: tuple[tuple[Stage, ...], ...],
                cuts: tuple[int, ...], gather: bool, fsdp: tuple[tuple[int, ...], ...],
                names: bool = True) -> Block:
    """Every task of ``replicas`` (see the module's description).

    Args:
      replicas: per replica, its stages.
      cuts: layers at which a chunk's last backward (and a gathered first forward) is cut.
      gather: the first forward of each chunk waits for its parameter all-gathers.
      fsdp: under FSDP, per stage, the replicas of its DP group in ring order; else ().
      names: give every task a readable name; without FSDP, ``names`` is None otherwise
        (under FSDP they are always made).
    """
    streams = [spec for rep in replicas for spec in rep]
    where = [(r, s) for r, rep in enumerate(replicas) for s in range(len(rep))]
    first_stream = [0, *itertools.accumulate(len(rep) for rep in replicas)]
    tasks = Tasks()
    zero = tasks.key(ZERO)
    last = [-1] * len(streams)  # the last task on each stream (-1: none yet)
    piece_end: dict[tuple[int, int], int] = {}
    waits: list[tuple[int, int, int]] = []
    finals: dict[int, int] = {}

    pieces_of: dict[tuple, tuple] = {}  # (stream, kind, lo, hi) -> duration key, TP flows

    def on_stream(st, kind, lo, hi, deps, mb, name):
        piece = pieces_of.get((st, kind, lo, hi))
        if piece is None:
            tp_k, first = streams[st][0], streams[st][1]
            span = (kind, lo - first, hi - first)
            ring = tasks.tp_ring(st, tp_k, span) if tp_k > 1 else None
            piece = pieces_of[st, kind, lo, hi] = (tasks.key(("pass_s", st, *span)), ring)
        category = Category.FORWARD if kind == "F" else Category.BACKWARD
        stage = where[st][1]
        compute = tasks.add((COMPUTE, category, st, stage, mb, st, st, -1, piece[0], name),
                            [last[st], *deps])
        t = compute
        if piece[1] is not None:
            t = tasks.add((COMM, Category.TP, st, stage, mb, st, st, -1, zero, f"tp {name}"),
                          [t], piece[1])
        last[st] = t
        return compute, t

    phases = {}  # (src stream, dst stream) -> [[flow, ...] per phase]
    for r, rep in enumerate(replicas):
        for sa, sb in transfer_pairs(len(rep), v):
            a, b = first_stream[r] + sa, first_stream[r] + sb
            t_a = streams[a][0]
            moves = reshard(scheme, range(t_a), range(t_a, t_a + streams[b][0]), 1.0)

            def local(rank, a=a, b=b, t_a=t_a):  # a scheme may also move inside one side
                return (a, rank) if rank < t_a else (b, rank - t_a)

            by_phase: dict[int, list] = {}
            for i, tr in enumerate(moves):
                by_phase.setdefault(tr.phase, []).append(
                    (local(tr.src), local(tr.dst), ("transfer_bytes", a, b, i), ONE, ZERO, True))
            phases[a, b] = [tasks.flow_group(by_phase[k]) for k in sorted(by_phase)]

    def transfer(src, dst, mb, chunk, after, backward):
        category = Category.PP if streams[src][0] == streams[dst][0] else Category.RESHARD
        t = after
        direction = "grad" if backward else "act"
        suffix = f" c{chunk}" if v > 1 else ""
        for phase, flows in enumerate(phases[src, dst]):
            t = tasks.add((COMM, category, -1, where[src][1], mb, src, src, phase, zero,
                           f"{direction} {{dg{src}}}->{{dg{dst}}} mb{mb}{suffix} p{phase}"),
                          [t], flows)
        return t

    plans = [pieces(schedule, s, len(replicas[r]), streams[st], v, cuts, gather, bool(fsdp))
             for st, (r, s) in enumerate(where)]
    if not fsdp:  # each task waits for its stream and its input only: laid out by arrays
        return Block(**plain_block(tasks, streams, where, first_stream, plans, phases, v, names))

    # FSDP: per stage (its DP group) the member streams in ring order and the collectives
    members_of = {}
    for s, order in enumerate(fsdp):
        ms = tuple(first_stream[r] + s for r in order)
        flows = [((ms[a], i), (ms[b], j)) for a, i, b, j in ring_pairs(
            tuple(streams[m][0] for m in ms))]
        for m in ms:
            members_of[m] = (s, ms, flows)
    gathers: dict[int, list[int]] = {s: [] for s in range(len(fsdp))}
    scatter = dict.fromkeys(range(len(fsdp)), -1)  # each DP group's last reduce-scatter
    computes: list[list[int]] = [[] for _ in streams]
    ends: list[list[int]] = [[] for _ in streams]
    reached: dict[int, list[int]] = {s: [] for s in range(len(fsdp))}  # members past piece i

    rings: dict[tuple[int, int, int], FlowGroup] = {}  # (stage, layer, passes) -> flows

    def collective(s, ring, layer, passes):
        flows = rings.get((s, layer, passes))
        if flows is None:
            flows = rings[s, layer, passes] = tasks.flow_group([
                (src, dst, ("ring_bytes", s, layer, layer, passes), ("ring_hops", s, passes),
                 ONE, False) for src, dst in ring])
        return flows

    def gathered(st, i):
        """All-gather ``i`` of the stream's DP group, issued now if it can be; else None."""
        s, ms, ring = members_of[st]
        if i < len(gathers[s]):
            return gathers[s][i]
        if i >= 2 and reached[s][i - 2] < len(ms):
            return None
        kind, mb, _, lo, *_ = plans[st][i]
        deps = gathers[s][-1:] + ([computes[m][i - 2] for m in ms] if i >= 2 else [])
        t = tasks.add((COMM, Category.DP, -1, s, mb, -1, -1, -1, zero, f"ag L{lo} {kind} mb{mb}"),
                      deps, collective(s, ring, lo, ALLGATHER))
        gathers[s].append(t)
        return t

    def scattered(st, i):
        """Reduce-scatter the gradients of backward piece ``i`` once every member has them."""
        s, ms, ring = members_of[st]
        if reached[s][i] < len(ms):
            return
        _, mb, _, lo, *_ = plans[st][i]
        deps = [ends[m][i] for m in ms]
        final = i == len(plans[st]) - 1
        if final:
            spec = streams[st]
            deps = [tasks.add((COMPUTE, Category.BARRIER, -1, -1, -1, -1, -1, -1, zero,
                               f"dp barrier L{spec[1]}-{spec[2]}"), deps)]
        t = tasks.add((COMM, Category.DP, -1, s, mb, -1, -1, -1, zero, f"rs L{lo} mb{mb}"),
                      [*deps, scatter[s]], collective(s, ring, lo, REDUCE_SCATTER))
        scatter[s] = t
        if final:
            finals.update(dict.fromkeys(ms, t))

    pos = [0] * len(streams)
    fwd_in: dict[tuple[int, int, int], int] = {}
    bwd_in: dict[tuple[int, int, int], int] = {}
    while any(pos[st] < len(plans[st]) for st in range(len(streams))):
        progressed = False
        for st, (r, s) in enumerate(where):
            p = len(replicas[r])
            while pos[st] < len(plans[st]):
                kind, mb, c, lo, hi, j, n, role = plans[st][pos[st]]
                deps = []
                if j == 0 and needs_input(kind, s, p, c, v):
                    arrived = (fwd_in if kind == "F" else bwd_in).get((st, mb, c))
                    if arrived is None:
                        break
                    deps.append(arrived)
                if fsdp:
                    gather_task = gathered(st, pos[st])
                    if gather_task is None:
                        break
                    deps.append(gather_task)
                name = piece_name(kind, f"{{dg{st}}}", mb, c, lo, hi, v, role)
                compute, t = on_stream(st, kind, lo, hi, deps, mb, name)
                if role == "last_b":
                    piece_end[(st, lo)] = t
                elif role == "first_f":
                    waits.append((compute, st, lo))
                elif role == "layer":
                    computes[st].append(compute)
                    ends[st].append(t)
                    count = reached[members_of[st][0]]
                    if len(count) <= pos[st]:
                        count.append(0)
                    count[pos[st]] += 1
                    if kind == "B":
                        scattered(st, pos[st])
                if j == n - 1:
                    to = next_stage(kind, s, p, c, v)
                    if to is not None:
                        dst = first_stream[r] + to[0]
                        arrivals = fwd_in if kind == "F" else bwd_in
                        arrivals[(dst, mb, to[1])] = transfer(st, dst, mb, c, t, kind == "B")
                pos[st] += 1
                progressed = True
        if not progressed:
            raise AssertionError("pipeline schedule deadlocked")
    dep_ptr, dep_idx = tasks.dep_arrays()
    flow_task, flow_src, flow_dst, flow_bytes, flow_hops, flow_launches, flow_p2p = \
        tasks.flow_arrays()
    columns = list(zip(*tasks.records, strict=True)) or [()] * 10
    return Block(
        cols=np.array(columns[:8], np.int64).reshape(8, -1).T.copy(), dep_ptr=dep_ptr,
        dep_idx=dep_idx, keys=tuple(tasks.keys), value=np.array(columns[8], np.int64),
        names=columns[9],
        flow_task=flow_task, flow_src=flow_src, flow_dst=flow_dst, flow_bytes=flow_bytes,
        flow_hops=flow_hops, flow_launches=flow_launches, flow_p2p=flow_p2p,
        last=tuple(last), piece_end=piece_end,
        waits=tuple(waits), finals=finals)


def _block_bytes(block: Block) -> int:
    """About the memory a block holds: its arrays, and its names and keys (Python objects
    of some 100 bytes each). A 512-GPU replica's block holds megabytes."""
    arrays = sum(value.nbytes for value in vars(block).values() if isinstance(value, np.ndarray))
    return arrays + 100 * (len(block.names or ()) + len(block.keys) + len(block.piece_end))


#: Blocks kept: the replicas of a sweep's neighbouring plans repeat, but a long sweep over
#: large clusters must not keep every block it built.
cached_block = cached(256, 128 * 2**20, _block_bytes)(build_block)
