"""Blocks without FSDP built from arrays: one light pass orders the pieces, numpy the rest.

:func:`xsweep.plan.passes.build_block` describes a block. Without FSDP a stream's task
depends on nothing but its stream's previous task and the transfer that brings its
input, so the block is known once the order in which the round-robin visit emits the
pieces is known. :func:`plain_block` finds that order with a pass that only tracks
which transfers have arrived, then lays out every task, dependency and flow with
numpy. It gives the same block as the task-by-task construction, bit for bit: the
same task ids, value keys numbered in the same order, the same flows. Task names are
made only when asked for (they are for traces; a sweep never reads them).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from xsweep.plan.collectives import all_to_all_pairs, expert_pairs
from xsweep.plan.pieces import Piece, piece_name
from xsweep.plan.program import Category, TaskColumns, TaskKind
from xsweep.plan.values import KeyTable, PassTime, cp_ring_keys, ep_keys, tp_ring_keys
from xsweep.ragged import owners_and_places, run_starts

COMPUTE, COMM = int(TaskKind.COMPUTE), int(TaskKind.COMM)
_F, _B, _TP = int(Category.FORWARD), int(Category.BACKWARD), int(Category.TP)
_TP_BESIDE = int(Category.TP_BESIDE)
_PP, _RESHARD = int(Category.PP), int(Category.RESHARD)


class FlowGroup(NamedTuple):
    """Flows as arrays: the flows of one COMM task (shared by every task that moves the
    same flows: a stream's TP ring for one span, a transfer phase, a DP group's
    collective), or all the flows of a block. Ranks are (block stream, TP index) pairs;
    the numbers are value keys (indices into the block's keys)."""

    src_stream: np.ndarray  # int64[n]
    src_index: np.ndarray  # int64[n]: TP index in the stream
    dst_stream: np.ndarray  # int64[n]
    dst_index: np.ndarray  # int64[n]
    nbytes: np.ndarray  # int64[n]: the payload's key
    hops: np.ndarray  # int64[n]: the hop latencies' key
    launches: np.ndarray  # int64[n]: the NCCL launches' key
    p2p: np.ndarray  # bool[n]: point-to-point sends

    @classmethod
    def concat(cls, groups) -> FlowGroup:
        """The flows of ``groups``, one group after another."""
        return cls(*(np.concatenate(column) for column in zip(*groups, strict=True)))

    def take(self, flows: np.ndarray) -> FlowGroup:
        """The flows at indices ``flows``."""
        return FlowGroup(*(column[flows] for column in self))


def tp_rings(stream: np.ndarray, tp: np.ndarray, nbytes: np.ndarray, hops: np.ndarray,
             launches: np.ndarray, cp: int = 1) -> FlowGroup:
    """The flows of TP rings, one after another: ring ``r`` on stream ``stream[r]`` of
    ``tp[r]`` ranks, rank ``i`` sending to rank ``i + 1``, every flow with the ring's
    payload, hops and launches keys (``nbytes[r]``, ``hops[r]``, ``launches[r]``); under
    context parallelism one such ring per CP rank (stream index ``q * tp + i``), all
    moving at once."""
    tp = np.asarray(tp, np.int64)
    ring, rank = owners_and_places(tp * cp)
    on = np.asarray(stream, np.int64)[ring]
    size = tp[ring]

    def per_flow(keys):
        return np.asarray(keys, np.int64)[ring]

    return FlowGroup(on, rank, on, rank // size * size + (rank % size + 1) % size,
                     per_flow(nbytes), per_flow(hops), per_flow(launches),
                     np.zeros(len(ring), bool))


def cp_rings(stream: np.ndarray, tp: np.ndarray, cp: int, nbytes: np.ndarray,
             steps: np.ndarray) -> FlowGroup:
    """The flows of context-parallel rings, one stream's after another: stream index
    ``q * tp + i`` sends its K/V blocks to the next CP rank's ``i`` (``(q + 1) mod cp``),
    every flow with its ring's payload key ``nbytes[r]`` and ``steps[r]`` as its hops and
    launches."""
    tp = np.asarray(tp, np.int64)
    ring, rank = owners_and_places(tp * cp)
    on = np.asarray(stream, np.int64)[ring]
    steps = np.asarray(steps, np.int64)[ring]
    return FlowGroup(on, rank, on, (rank + tp[ring]) % (tp[ring] * cp),
                     np.asarray(nbytes, np.int64)[ring], steps, steps,
                     np.zeros(len(ring), bool))


def with_all_to_alls(rings: FlowGroup, stream, tp, has, nbytes, hops, launches,
                     width=None, cp: int = 1) -> FlowGroup:
    """TP rings (as :func:`tp_rings` gives them, ring ``r`` on stream ``stream[r]`` of
    ``tp[r]`` ranks), each where ``has[r]`` followed by its stream's all-to-all flows: rank
    ``i`` to every rank ``j != i`` of its EP group of ``width[r]`` ranks (default
    ``tp[r]``; :func:`xsweep.plan.collectives.expert_pairs`), each with the keys
    ``nbytes[r]``, ``hops[r]``, ``launches[r]``; the flows of the TP tasks of pieces with
    MoE layers under expert parallelism. An index ``j >= tp[r]`` stands for TP rank ``j mod
    tp[r]`` of the stream's ``j // tp[r]``-th EP peer (the lowering places it). A stream of
    one TP rank has no ring in ``rings`` (its task holds the all-to-alls alone). Under
    context parallelism (``cp`` rings per stream in ``rings``) the stream's ranks (indices
    ``q tp + i`` for CP rank ``q``) form EP groups of ``width[r]`` consecutive indices, the
    TP ranks of ``width[r] / tp[r]`` CP ranks (one at EP inside TP; Megatron-Core's folding
    of CP into EP above it), each group running its own all-to-alls, one after another;
    with ``width[r]`` above ``tp[r] x cp``, an EP group is the stream's ranks and its
    peers' (index ``j`` past them: rank ``j mod (tp cp)`` of the ``j // (tp cp)``-th
    peer)."""
    width = tp if width is None else width
    parts, at = [], 0
    for r, (on, k, w) in enumerate(zip(np.asarray(stream).tolist(), np.asarray(tp).tolist(),
                                       np.asarray(width).tolist(), strict=True)):
        ring = k * cp if k > 1 else 0
        parts.append(rings.take(np.arange(at, at + ring)))
        at += ring
        if not has[r]:
            continue
        if cp > 1 and w <= k * cp:  # an EP group of w = k x c ranks: c CP ranks' TP ranks
            # (c = 1: EP in TP)
            one = np.array(all_to_all_pairs(w), np.int64).reshape(-1, 2)
            pairs = np.concatenate([one + q * w for q in range(k * cp // w)])
        else:  # the stream's (TP x CP) ranks, then its EP peers'
            pairs = np.array(expert_pairs(k * cp, w), np.int64).reshape(-1, 2)
        n = len(pairs)
        parts.append(FlowGroup(np.full(n, on, np.int64), pairs[:, 0], np.full(n, on, np.int64),
                               pairs[:, 1], np.full(n, nbytes[r], np.int64),
                               np.full(n, hops[r], np.int64), np.full(n, launches[r], np.int64),
                               np.zeros(n, bool)))
    return FlowGroup.concat(parts) if parts else rings


def emission_order(need: list[int], send: list[int], bounds: list[tuple[int, int]]) -> np.ndarray:
    """The order in which the round-robin visit emits pieces (indices into ``need``).

    Streams are visited in turn; each emits its pieces (``bounds[stream]``: a range of
    piece indices) until one waits for an input (``need``: an arrival key, -1 for none)
    that no emitted piece has sent yet (``send``: the key a piece's transfer delivers).
    """
    runs: list[tuple[int, int]] = []
    arrived: set[int] = set()
    pos = [begin for begin, _ in bounds]
    left = sum(end - begin for begin, end in bounds)
    while left:
        progressed = False
        for st, (_, end) in enumerate(bounds):
            g = begin = pos[st]
            while g < end:
                key = need[g]
                if key >= 0 and key not in arrived:
                    break
                key = send[g]
                if key >= 0:
                    arrived.add(key)
                g += 1
            if g > begin:
                runs.append((begin, g))
                pos[st] = g
                left -= g - begin
                progressed = True
        if not progressed:
            raise AssertionError("pipeline schedule deadlocked")
    starts = np.array([b for b, _ in runs], np.int64)
    lengths = np.array([e - b for b, e in runs], np.int64)
    owner, place = owners_and_places(lengths)
    return starts[owner] + place


def plain_block(keys: KeyTable, streams: list, where: list[tuple[int, int]],
                first_stream: list[int], plans: list[list[tuple]], phases: dict, v: int,
                names: bool, overlap_tp: bool = False, ep: int = 1, moe_from: int = 0,
                cp: int = 1, blocking_p2p: bool = False) -> dict:
    """The fields of a :class:`~xsweep.plan.passes.Block` without FSDP.

    Args:
      keys: the block's value keys so far (its transfers'); the pieces' are added.
      streams, where, first_stream: the block's stages, their (replica, stage), and each
        replica's first stream.
      plans: per stream its pieces (:func:`xsweep.plan.pieces.pieces`).
      phases: (source stream, destination stream) -> the FlowGroup of each phase.
      names: give every task its readable name (else ``names`` is None).
      overlap_tp: each piece's TP task runs beside its compute, joined by a zero-length TP
        task on the stream (:func:`xsweep.plan.passes.build_block`).
      ep, moe_from: expert parallelism and the first MoE layer; with EP above 1 the TP
        task of a piece with MoE layers also carries their all-to-alls.
      cp: context-parallel ranks of every stream: each piece's CP ring runs beside its
        compute, joined by a TP task on the stream that runs the TP rings unless they
        are beside too.
      blocking_p2p: a stream waits for each transfer it sends before its next task (see
        :func:`_dependencies`), and ends with its last piece's transfer, if any.
    """
    tp = np.array([spec[0] for spec in streams], np.int64)
    p = _piece_arrays(streams, where, first_stream, plans, v)
    order = emission_order(p.need.tolist(), p.send.tolist(), list(zip(
        p.begins[:-1].tolist(), p.begins[1:].tolist(), strict=True)))
    # pieces whose TP task carries all-to-alls (MoE layers under EP above 1): at TP 1 the
    # all-to-alls alone make a TP task
    a2a = (p.end > moe_from) if ep > 1 else np.zeros(len(p.stream), bool)
    lay = _layout(p, order, phases, tp, overlap_tp, cp, a2a)
    piece_keys = _piece_keys(keys, p, order, streams, tp, ep, moe_from, cp)
    dep_ptr, dep_idx = _dependencies(p, lay, blocking_p2p)
    flow_task, flows = _flows(lay, piece_keys, phases)
    roles = p.fields.role
    piece_end = {(int(p.stream[g]), int(p.first[g])): int(lay.end[g])
                 for g in np.flatnonzero([r == "last_b" for r in roles]).tolist()}
    gathered = np.flatnonzero([r == "first_f" for r in roles])
    gathered = gathered[np.argsort(lay.first[gathered])]
    last = np.full(len(streams), -1, np.int64)
    has = p.counts > 0
    last[has] = (lay.delivered if blocking_p2p else lay.end)[p.begins[1:][has] - 1]
    return dict(
        tasks=_task_columns(p, lay, piece_keys.duration[piece_keys.kind_of], tp),
        dep_ptr=dep_ptr, dep_idx=dep_idx, keys=keys.frozen(),
        names=_names(p, lay, v, cp) if names else None, flow_task=flow_task, flows=flows,
        last=tuple(last.tolist()), piece_end=piece_end,
        # the gathered pieces' computes wait for their gathers, and so do TP tasks beside them
        waits=tuple((int(lay.first[g]) + k, int(p.stream[g]), int(p.first[g]))
                    for g in gathered.tolist()
                    for k in range(1 + bool(lay.beside[g]))),
        finals={})


class _Pieces(NamedTuple):
    """Every piece of a block as arrays, the streams' pieces one stream after another."""

    fields: Piece  # each field a tuple over the pieces, as pieces() gives them
    counts: np.ndarray  # int64[streams]: pieces per stream
    begins: np.ndarray  # int64[streams + 1]: each stream's first piece
    stream: np.ndarray  # int64[P]
    stage: np.ndarray  # its stream's stage
    backward: np.ndarray  # bool[P]
    micro_batch: np.ndarray
    chunk: np.ndarray
    first: np.ndarray  # first layer
    end: np.ndarray  # end layer (exclusive)
    needs: np.ndarray  # bool[P]: waits for a transfer
    sends: np.ndarray  # bool[P]: a transfer follows it
    dst: np.ndarray  # the stream its transfer goes to
    need: np.ndarray  # the arrival it waits for, -1 none
    send: np.ndarray  # the arrival it delivers, -1 none


def _piece_arrays(streams: list, where: list[tuple[int, int]], first_stream: list[int],
                  plans: list[list[tuple]], v: int) -> _Pieces:
    """The pieces of ``plans`` as arrays, with the transfers they wait for and send."""
    counts = np.array([len(p) for p in plans], np.int64)
    fields = Piece(*(list(zip(*itertools.chain.from_iterable(plans), strict=True))
                     or [()] * len(Piece._fields)))
    backward = np.array([k == "B" for k in fields.kind], bool)
    mb, chunk, lo, hi, j, n = (np.array(c, np.int64) for c in (
        fields.micro_batch, fields.chunk, fields.first, fields.end, fields.index, fields.count))
    st = np.repeat(np.arange(len(streams)), counts)
    stage = np.array([s for _, s in where], np.int64)[st]
    num_stages = np.array([first_stream[r + 1] - first_stream[r] for r, _ in where],
                          np.int64)[st]
    rep_first = np.array([first_stream[r] for r, _ in where], np.int64)[st]
    # the piece waits for a transfer unless it starts the model's forward or backward
    starts_model = np.where(backward, (stage == num_stages - 1) & (chunk == v - 1),
                            (stage == 0) & (chunk == 0))
    needs = (j == 0) & ~starts_model
    # where the last piece of a pass sends its output (xsweep.plan.pieces.next_stage)
    to_stage = np.where(backward, np.where(stage > 0, stage - 1, num_stages - 1),
                        np.where(stage + 1 < num_stages, stage + 1, 0))
    to_chunk = np.where(backward, np.where(stage > 0, chunk, chunk - 1),
                        np.where(stage + 1 < num_stages, chunk, chunk + 1))
    sends = (j == n - 1) & (to_chunk >= 0) & (to_chunk < v)
    dst = rep_first + to_stage
    # an arrival as one integer: (stream, micro-batch, chunk, backward)
    width_mb, width_c = int(mb.max(initial=0)) + 1, max(v, 1)

    def arrival(stream, c):
        return ((stream * width_mb + mb) * width_c + c) * 2 + backward

    return _Pieces(fields, counts, np.concatenate([[0], np.cumsum(counts)]), st, stage,
                   backward, mb, chunk, lo, hi, needs, sends, dst,
                   np.where(needs, arrival(st, chunk), -1),
                   np.where(sends, arrival(dst, to_chunk), -1))


class _Layout(NamedTuple):
    """Where each piece's tasks go: its compute, its TP task, its transfer's phases, in a
    row, pieces in emission order."""

    order: np.ndarray  # pieces in emission order
    num_tasks: int
    first: np.ndarray  # int64[P]: the piece's compute
    has_tp: np.ndarray  # bool[P]: a TP task (or a CP ring) follows its compute
    tp_tasks: np.ndarray  # int64[P]: its TP tasks: 0, 1 (blocking) or 2 (beside, and a join)
    overlap: bool  # TP rings run beside the compute
    beside: np.ndarray  # bool[P]: its first TP task runs beside the compute, then a join
    cp: int  # context-parallel ranks: a CP ring beside every compute when above 1
    end: np.ndarray  # int64[P]: the piece's last task on its stream
    delivered: np.ndarray  # int64[P]: its transfer's last phase
    pairs: list  # (source, destination) streams of the transfers, sorted
    pair_phases: np.ndarray  # int64[pairs + 1]: phases of each (0 after the last)
    pair_of: np.ndarray  # int64[P]: the piece's transfer in pairs (len(pairs): none)
    phase_piece: np.ndarray  # per transfer phase task: its piece...
    phase: np.ndarray  # ... its phase...
    phase_task: np.ndarray  # ... and its id


def _layout(p: _Pieces, order: np.ndarray, phases: dict, tp: np.ndarray,
            overlap: bool = False, cp: int = 1, a2a: np.ndarray | None = None) -> _Layout:
    """Where each piece's tasks go; a piece has a TP task where its stream has TP ranks to
    ring, context-parallel ranks, or ``a2a`` (the piece's all-to-alls)."""
    num_streams = len(p.counts)
    pairs = sorted(phases)
    pair_phases = np.array([len(phases[pair]) for pair in pairs] + [0], np.int64)
    pair_of = np.full(len(p.stream), len(pairs), np.int64)
    pair_at = np.full(num_streams * num_streams, -1, np.int64)  # (src, dst) -> pair index
    pair_at[[a * num_streams + b for a, b in pairs]] = np.arange(len(pairs))
    pair_of[p.sends] = pair_at[p.stream[p.sends] * num_streams + p.dst[p.sends]]
    assert (pair_of[p.sends] >= 0).all(), "a transfer between stages without phases"
    has_tp = (tp > 1)[p.stream] | (cp > 1)
    if a2a is not None:
        has_tp |= a2a
    beside = has_tp & (overlap or cp > 1)
    tp_tasks = has_tp.astype(np.int64) + beside
    num_phases = np.where(p.sends, pair_phases[pair_of], 0)
    size = 1 + tp_tasks + num_phases
    first = np.empty(len(size), np.int64)
    first[order] = np.cumsum(size[order]) - size[order]
    phase_piece, phase = owners_and_places(num_phases)
    return _Layout(order, int(size.sum()), first, has_tp, tp_tasks, overlap, beside, cp,
                   first + tp_tasks,
                   first + tp_tasks + num_phases, pairs, pair_phases, pair_of, phase_piece,
                   phase, (first + tp_tasks + 1)[phase_piece] + phase)


def _dependencies(p: _Pieces, lay: _Layout,
                  blocking_p2p: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """CSR of every task's predecessors, ascending, each once: a piece's compute waits for
    its stream's previous piece and for its input's transfer, a TP task for its compute,
    a transfer's phases for the piece's last task, one after the other. With
    ``blocking_p2p`` the stream's previous piece is over when the transfer it sends has
    delivered (its last phase; a piece that sends nothing ends with its last task)."""
    sender = np.full(len(p.stream), -1, np.int64)  # the piece whose transfer brings the input
    if p.needs.any():
        by_key = np.argsort(p.send)
        at = np.searchsorted(p.send[by_key], p.need[p.needs])
        sender[p.needs] = by_key[at]
        assert np.array_equal(p.send[sender[p.needs]], p.need[p.needs]), "an input nobody sends"
    compute = lay.first
    follows = np.ones(len(p.stream), bool)
    follows[p.begins[:-1][p.counts > 0]] = False
    # the computes' waits: the stream's previous piece, the input's transfer
    waiting = np.concatenate([np.flatnonzero(follows), np.flatnonzero(p.needs)])
    previous = lay.delivered if blocking_p2p else lay.end
    waits = np.concatenate([previous[np.flatnonzero(follows) - 1],
                            lay.delivered[sender[p.needs]]])
    # a task beside waits for what its compute waits for, the join for both; a blocking
    # TP task follows its compute
    beside, blocking = np.flatnonzero(lay.beside), np.flatnonzero(lay.has_tp & ~lay.beside)
    waits_too = lay.beside[waiting]
    tp_owner = np.concatenate([compute[waiting[waits_too]] + 1, compute[beside] + 2,
                               compute[beside] + 2, compute[blocking] + 1])
    tp_pred = np.concatenate([waits[waits_too], compute[beside], compute[beside] + 1,
                              compute[blocking]])
    owner = np.concatenate([compute[waiting], tp_owner, lay.phase_task])
    pred = np.concatenate([
        waits, tp_pred,
        np.where(lay.phase == 0, lay.end[lay.phase_piece], lay.phase_task - 1)])
    # by task, then predecessor, each once (a stable sort merges the sorted runs)
    span = max(lay.num_tasks, 1)
    pairs = np.sort(owner * span + pred, kind="stable")
    dep_owner, dep_idx = np.divmod(pairs[run_starts(pairs)], span)
    return (np.concatenate([[0], np.cumsum(np.bincount(dep_owner, minlength=lay.num_tasks))]),
            dep_idx)


class _PieceKeys(NamedTuple):
    """The value keys of the distinct pieces (stream, kind, layers)."""

    kind_of: np.ndarray  # int64[P]: each piece's distinct piece
    duration: np.ndarray  # int64[distinct]: its duration's key
    ring_of: np.ndarray  # the distinct pieces with a TP ring...
    ring_size: np.ndarray  # ... the flows of each (its ranks, on every CP rank)...
    rings: FlowGroup  # ... and their flows, one ring after another
    cp_size: np.ndarray  # int64[distinct]: flows of each distinct piece's CP ring (cp > 1)
    cp_rings: FlowGroup  # every distinct piece's CP ring, one after another (cp > 1)


def _piece_keys(keys: KeyTable, p: _Pieces, order: np.ndarray, streams: list,
                tp: np.ndarray, ep: int = 1, moe_from: int = 0, cp: int = 1) -> _PieceKeys:
    """Per distinct piece, in the order pieces first appear, its TP ring's keys, its
    all-to-alls' keys (EP above 1, layers from ``moe_from``), its CP ring's, then its
    duration's key (as the task-by-task build numbers them)."""
    span = int(p.end.max(initial=0)) + 1
    piece_code = ((p.stream * 2 + p.backward) * span + p.first) * span + p.end
    codes, first_at, piece_kind = np.unique(piece_code[order], return_index=True,
                                            return_inverse=True)
    kind_of = np.empty(len(p.stream), np.int64)
    kind_of[order] = piece_kind.reshape(-1)
    duration, nbytes, hops, launches, cp_bytes, cp_steps = (np.zeros(len(codes), np.int64)
                                                             for _ in range(6))
    a2a = np.zeros((3, len(codes)), np.int64)  # the all-to-alls' keys (EP above 1)...
    moe = np.zeros(len(codes), bool)  # ... of the pieces with MoE layers
    for k in np.argsort(first_at).tolist():
        g = int(order[first_at[k]])
        s = int(p.stream[g])
        low = streams[s][1]
        span_of = ("B" if p.backward[g] else "F", int(p.first[g]) - low, int(p.end[g]) - low)
        if streams[s][0] > 1:
            nbytes[k], hops[k], launches[k] = (keys.index(key)
                                               for key in tp_ring_keys(s, *span_of))
        if ep > 1 and int(p.end[g]) > moe_from:
            a2a[:, k] = [keys.index(key) for key in ep_keys(s, *span_of)]
            moe[k] = True
        if cp > 1:
            cp_bytes[k], cp_steps[k] = (keys.index(key) for key in cp_ring_keys(s, *span_of))
        duration[k] = keys.index(PassTime(s, *span_of))
    # every piece's TP ring at once (Tasks.tp_ring's flows): rank i sends to rank i + 1; a
    # piece at TP 1 has no ring, but its all-to-alls where it has MoE layers
    ring_of = np.flatnonzero((tp > 1)[p.stream[order[first_at]]] | moe)
    ring_stream = p.stream[order[first_at[ring_of]]]
    size = tp[ring_stream]
    ringed = size > 1
    rings = tp_rings(ring_stream[ringed], size[ringed], nbytes[ring_of][ringed],
                     hops[ring_of][ringed], launches[ring_of][ringed], cp)
    ring_size = np.where(ringed, size * cp, 0)
    if ep > 1:  # the EP group: over replicas (or under CP over CP ranks) if EP > TP
        width = size * np.maximum(ep // size, 1)
        ring_size = np.where(moe[ring_of], ring_size + cp * size * (width - 1), ring_size)
        rings = with_all_to_alls(rings, ring_stream, size, moe[ring_of], *a2a[:, ring_of],
                                 width, cp)
    distinct_stream = p.stream[order[first_at]] if cp > 1 else np.zeros(0, np.int64)
    keep = slice(None) if cp > 1 else slice(0)
    return _PieceKeys(kind_of, duration, ring_of, ring_size, rings, tp[distinct_stream] * cp,
                      cp_rings(distinct_stream, tp[distinct_stream], cp, cp_bytes[keep],
                               cp_steps[keep]))


def _task_columns(p: _Pieces, lay: _Layout, duration: np.ndarray, tp: np.ndarray) -> TaskColumns:
    """Every task's record: a piece's compute (its duration's key ``duration``) and TP task
    on its stream, its transfer's phases beside it (PP between equal TP degrees, else
    RESHARD); all of them labelled with the piece's stage, micro-batch and stream."""
    owner, place = owners_and_places(np.diff(np.append(lay.first[lay.order], lay.num_tasks)))
    piece = lay.order[owner]  # each task's piece
    tp_tasks = lay.tp_tasks[piece]
    compute, is_tp = place == 0, (place >= 1) & (place <= tp_tasks)
    # a TP task beside the compute (the first of two) runs off the stream; its join on it
    beside = is_tp & lay.beside[piece] & (place == 1)
    on_stream = compute | (is_tp & ~beside)
    transfer = np.where(tp[p.stream] == tp[np.where(p.sends, p.dst, p.stream)], _PP, _RESHARD)
    category = np.where(compute, np.where(p.backward, _B, _F)[piece],
                        np.where(beside, _TP_BESIDE, np.where(is_tp, _TP, transfer[piece])))
    stream = p.stream[piece]
    return TaskColumns(
        kind=np.where(compute, COMPUTE, COMM), category=category,
        stream=np.where(on_stream, stream, -1), stage=p.stage[piece],
        micro_batch=p.micro_batch[piece], device_group=stream, replica=stream.copy(),
        phase=np.where(compute | is_tp, -1, place - 1 - tp_tasks),
        value=np.where(compute, duration[piece], 0))


def _flows(lay: _Layout, keys: _PieceKeys, phases: dict) -> tuple[np.ndarray, FlowGroup]:
    """The task of every flow and the flows, in task order: each TP task its piece's ring
    (under context parallelism the TP rings, then the CP ring), each phase its pair's
    group."""
    ring_slot = np.full(len(keys.duration), -1, np.int64)
    ring_slot[keys.ring_of] = np.arange(len(keys.ring_of))
    # pieces with a TP ring, and the task that runs it: the first after the compute,
    # unless a CP ring is beside the compute and the TP rings block (then the join)
    tp_piece = np.flatnonzero(ring_slot[keys.kind_of] >= 0)
    tp_task = lay.first[tp_piece] + (2 if lay.cp > 1 and not lay.overlap else 1)
    cp_piece = np.flatnonzero(lay.has_tp) if lay.cp > 1 else np.zeros(0, np.int64)
    num_cp = len(keys.cp_size)
    # groups of flows: the TP rings (one per distinct piece with one), the CP rings (one
    # per distinct piece), then every phase
    pool = [keys.rings, keys.cp_rings, *(g for pair in lay.pairs for g in phases[pair])]
    pair_first = (np.concatenate([[0], np.cumsum(lay.pair_phases[:-1])]) + len(keys.ring_of)
                  + num_cp)
    flow_tasks = np.concatenate([tp_task, lay.first[cp_piece] + 1, lay.phase_task])
    flow_groups = np.concatenate([ring_slot[keys.kind_of[tp_piece]],
                                  len(keys.ring_of) + keys.kind_of[cp_piece],
                                  pair_first[lay.pair_of[lay.phase_piece]] + lay.phase
                                  ]).astype(np.int64)
    by_task = np.argsort(flow_tasks, kind="stable")
    flow_tasks, flow_groups = flow_tasks[by_task], flow_groups[by_task]
    sizes = np.concatenate([keys.ring_size, keys.cp_size,
                            [len(g.p2p) for g in pool[2:]]]).astype(np.int64)
    pool_first = np.concatenate([[0], np.cumsum(sizes)])
    which, place = owners_and_places(sizes[flow_groups])
    return (np.repeat(flow_tasks, sizes[flow_groups]),
            FlowGroup.concat(pool).take(pool_first[flow_groups][which] + place))


def _names(p: _Pieces, lay: _Layout, v: int, cp: int = 1) -> tuple[str, ...]:
    """Every task's name, as the task-by-task build gives it."""
    out = [""] * lay.num_tasks
    f = p.fields
    num_phases = np.bincount(lay.phase_piece, minlength=len(p.stream))
    for g in lay.order.tolist():
        s, kind, mb, c = int(p.stream[g]), f.kind[g], f.micro_batch[g], f.chunk[g]
        name = piece_name(kind, f"{{dg{s}}}", mb, c, f.first[g], f.end[g], v, f.role[g])
        t = int(lay.first[g])
        out[t] = name
        comm = "cp" if cp > 1 else "tp"
        if lay.has_tp[g]:
            t += 1
            out[t] = f"{comm} {name}"
        if lay.beside[g]:
            t += 1
            out[t] = f"{comm} join {name}"
        direction = "grad" if kind == "B" else "act"
        suffix = f" c{c}" if v > 1 else ""
        for phase in range(int(num_phases[g])):
            out[t + 1 + phase] = (f"{direction} {{dg{s}}}->{{dg{int(p.dst[g])}}} mb{mb}{suffix}"
                                  f" p{phase}")
    return tuple(out)
