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

from xsweep.plan.program import Category, TaskKind
from xsweep.ragged import owners_and_places, run_starts

COMPUTE, COMM = int(TaskKind.COMPUTE), int(TaskKind.COMM)
_F, _B = int(Category.FORWARD), int(Category.BACKWARD)


class FlowGroup(NamedTuple):
    """The flows of one COMM task as arrays, shared by every task that moves the same flows
    (a stream's TP ring for one span, a transfer phase, a DP group's collective)."""

    src: np.ndarray  # int64[n, 2]: (stream, TP index)
    dst: np.ndarray  # int64[n, 2]
    keys: np.ndarray  # int64[n, 3]: the payload, hops and launches keys (indices)
    p2p: np.ndarray  # bool[n]: point-to-point sends


def tp_rings(stream: np.ndarray, tp: np.ndarray, keys: np.ndarray) -> FlowGroup:
    """The flows of TP rings, one after another: ring ``r`` on stream ``stream[r]`` of
    ``tp[r]`` ranks, rank ``i`` sending to rank ``i + 1``, every flow with the ring's
    payload, hops and launches keys ``keys[r]``."""
    ring, rank = owners_and_places(np.asarray(tp, np.int64))
    on = np.asarray(stream, np.int64)[ring]
    return FlowGroup(np.stack([on, rank], axis=1),
                     np.stack([on, (rank + 1) % np.asarray(tp, np.int64)[ring]], axis=1),
                     np.asarray(keys, np.int64).reshape(-1, 3)[ring], np.zeros(len(ring), bool))


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


def plain_block(tasks, streams: list, where: list[tuple[int, int]], first_stream: list[int],
                plans: list[list[tuple]], phases: dict, v: int, names: bool) -> dict:
    """The fields of a :class:`~xsweep.plan.passes.Block` without FSDP.

    Args:
      tasks: the block's :class:`~xsweep.plan.passes.Tasks`, holding the keys so far.
      streams, where, first_stream: the block's stages, their (replica, stage), and each
        replica's first stream.
      plans: per stream its pieces (:func:`xsweep.plan.passes.pieces`).
      phases: (source stream, destination stream) -> the FlowGroup of each phase.
      names: give every task its readable name (else ``names`` is None).
    """
    num_streams = len(streams)
    counts = np.array([len(p) for p in plans], np.int64)
    total = int(counts.sum())
    cols = list(zip(*itertools.chain.from_iterable(plans), strict=True)) or [()] * 8
    is_b = np.array([k == "B" for k in cols[0]], bool)
    mb, chunk, lo, hi, j, n = (np.array(c, np.int64) for c in cols[1:7])
    roles = cols[7]
    st = np.repeat(np.arange(num_streams), counts)
    stage = np.array([s for _, s in where], np.int64)[st]
    num_stages = np.array([first_stream[r + 1] - first_stream[r] for r, _ in where],
                          np.int64)[st]
    rep_first = np.array([first_stream[r] for r, _ in where], np.int64)[st]
    tp = np.array([spec[0] for spec in streams], np.int64)
    # the piece waits for a transfer unless it starts the model's forward or backward
    starts_model = np.where(is_b, (stage == num_stages - 1) & (chunk == v - 1),
                            (stage == 0) & (chunk == 0))
    needs = (j == 0) & ~starts_model
    # where the last piece of a pass sends its output (xsweep.plan.passes.next_stage)
    to_stage = np.where(is_b, np.where(stage > 0, stage - 1, num_stages - 1),
                        np.where(stage + 1 < num_stages, stage + 1, 0))
    to_chunk = np.where(is_b, np.where(stage > 0, chunk, chunk - 1),
                        np.where(stage + 1 < num_stages, chunk, chunk + 1))
    sends = (j == n - 1) & (to_chunk >= 0) & (to_chunk < v)
    dst = rep_first + to_stage
    # an arrival as one integer: (stream, micro-batch, chunk, backward)
    width_mb, width_c = int(mb.max(initial=0)) + 1, max(v, 1)

    def arrival(stream, micro, c):
        return ((stream * width_mb + micro) * width_c + c) * 2 + is_b

    need = np.where(needs, arrival(st, mb, chunk), -1)
    send = np.where(sends, arrival(dst, mb, to_chunk), -1)
    begins = np.concatenate([[0], np.cumsum(counts)])
    order = emission_order(need.tolist(), send.tolist(),
                           list(zip(begins[:-1].tolist(), begins[1:].tolist(), strict=True)))

    # tasks per piece in emission order: its compute, its TP task, its transfer's phases
    pairs = sorted(phases)
    pair_phases = np.array([len(phases[pair]) for pair in pairs] + [0], np.int64)
    pair_of = np.full(total, len(pairs), np.int64)
    pair_at = np.full(num_streams * num_streams, -1, np.int64)  # (src, dst) -> pair index
    pair_at[[a * num_streams + b for a, b in pairs]] = np.arange(len(pairs))
    pair_of[sends] = pair_at[st[sends] * num_streams + dst[sends]]
    assert (pair_of[sends] >= 0).all(), "a transfer between stages without phases"
    has_tp = (tp > 1)[st]
    num_phases = np.where(sends, pair_phases[pair_of], 0)
    size = 1 + has_tp + num_phases
    first = np.empty(total, np.int64)
    first[order] = np.cumsum(size[order]) - size[order]
    num_tasks = int(size.sum())
    compute = first
    end = first + has_tp  # the piece's last task on its stream
    delivered = first + has_tp + num_phases  # its transfer's last phase
    sender = np.full(total, -1, np.int64)
    if needs.any():
        by_key = np.argsort(send)
        at = np.searchsorted(send[by_key], need[needs])
        sender[needs] = by_key[at]
        assert np.array_equal(send[sender[needs]], need[needs]), "an input nobody sends"

    # dependencies: the stream's previous piece, the arrival; TP on its compute; phases
    # in a chain from the piece's last task
    follows = np.ones(total, bool)
    follows[begins[:-1][counts > 0]] = False
    owners = [compute[follows], compute[needs], (compute + 1)[has_tp]]
    preds = [end[np.flatnonzero(follows) - 1], delivered[sender[needs]], compute[has_tp]]
    phase_piece, phase = owners_and_places(num_phases)
    phase_task = (first + has_tp + 1)[phase_piece] + phase
    owners.append(phase_task)
    preds.append(np.where(phase == 0, end[phase_piece], phase_task - 1))
    owner = np.concatenate(owners)
    pred = np.concatenate(preds)
    # by task, then predecessor, each once (a stable sort merges the sorted runs)
    pairs_sorted = np.sort(owner * max(num_tasks, 1) + pred, kind="stable")
    pairs_sorted = pairs_sorted[run_starts(pairs_sorted)]
    dep_owner, dep_idx = np.divmod(pairs_sorted, max(num_tasks, 1))
    dep_ptr = np.concatenate([[0], np.cumsum(np.bincount(dep_owner, minlength=num_tasks))])

    # value keys: per distinct piece (stream, kind, layers), in the order pieces first
    # appear, its TP ring's keys then its duration's key (as the task-by-task build does)
    span = int(hi.max(initial=0)) + 1
    piece_code = ((st * 2 + is_b) * span + lo) * span + hi
    codes, first_at, piece_kind = np.unique(piece_code[order], return_index=True,
                                            return_inverse=True)
    kind_of = np.empty(total, np.int64)
    kind_of[order] = piece_kind.reshape(-1)
    pass_key = np.zeros(len(codes), np.int64)
    ring_keys = np.zeros((len(codes), 3), np.int64)
    for k in np.argsort(first_at).tolist():
        g = int(order[first_at[k]])
        s, kind, a, b = int(st[g]), "B" if is_b[g] else "F", int(lo[g]), int(hi[g])
        low = streams[s][1]
        piece_span = (kind, a - low, b - low)
        if streams[s][0] > 1:
            ring_keys[k] = tasks.tp_keys(s, piece_span)
        pass_key[k] = tasks.key(("pass_s", s, *piece_span))
    # every piece's TP ring at once (Tasks.tp_ring's flows): rank i sends to rank i + 1
    ring_of = np.flatnonzero((tp > 1)[st[order[first_at]]])  # distinct pieces with a ring
    ring_stream = st[order[first_at[ring_of]]]
    ring_tp = tp[ring_stream]
    ring_flows = tp_rings(ring_stream, ring_tp, ring_keys[ring_of])

    out_cols = np.zeros((num_tasks, 8), np.int64)
    value = np.zeros(num_tasks, np.int64)
    labels = np.stack([st, stage, mb, st, st], axis=1)
    out_cols[compute] = np.column_stack([np.full(total, COMPUTE), np.where(is_b, _B, _F),
                                         labels, np.full(total, -1)])
    value[compute] = pass_key[kind_of]
    tp_piece = np.flatnonzero(has_tp)
    out_cols[compute[tp_piece] + 1] = np.column_stack([
        np.full(len(tp_piece), COMM), np.full(len(tp_piece), int(Category.TP)),
        labels[tp_piece], np.full(len(tp_piece), -1)])
    category = np.where(tp[st] == tp[np.where(sends, dst, st)], int(Category.PP),
                        int(Category.RESHARD))[phase_piece]
    src = st[phase_piece]
    out_cols[phase_task] = np.column_stack([
        np.full(len(phase_task), COMM), category, np.full(len(phase_task), -1),
        stage[phase_piece], mb[phase_piece], src, src, phase])

    # flows, in task order: each TP task its piece's ring, each phase its pair's group
    # groups of flows: the rings (one per distinct piece with one), then every phase
    pool = [ring_flows, *(g for pair in pairs for g in phases[pair])]
    ring_slot = np.full(len(codes), -1, np.int64)
    ring_slot[ring_of] = np.arange(len(ring_of))
    pair_first = np.concatenate([[0], np.cumsum(pair_phases[:-1])]) + len(ring_of)
    flow_tasks = np.concatenate([compute[tp_piece] + 1, phase_task])
    flow_groups = np.concatenate([ring_slot[kind_of[tp_piece]],
                                  pair_first[pair_of[phase_piece]] + phase]).astype(np.int64)
    by_task = np.argsort(flow_tasks, kind="stable")
    flow_tasks, flow_groups = flow_tasks[by_task], flow_groups[by_task]
    sizes = np.concatenate([ring_tp, [len(g.p2p) for g in pool[1:]]]).astype(np.int64)
    pool_first = np.concatenate([[0], np.cumsum(sizes)])
    which, place = owners_and_places(sizes[flow_groups])
    flow = pool_first[flow_groups][which] + place

    def joined(field, shape):
        return np.concatenate([getattr(g, field).reshape(-1, *shape[1:]) for g in pool])[flow]

    keys = joined("keys", (0, 3)).reshape(-1, 3)
    piece_end = {(int(st[g]), int(lo[g])): int(end[g])
                 for g in np.flatnonzero([r == "last_b" for r in roles]).tolist()}
    gathered = np.flatnonzero([r == "first_f" for r in roles])
    gathered = gathered[np.argsort(compute[gathered])]
    last = np.full(num_streams, -1, np.int64)
    has = counts > 0
    last[has] = end[begins[1:][has] - 1]
    return dict(
        cols=out_cols, dep_ptr=dep_ptr, dep_idx=dep_idx, keys=tuple(tasks.keys), value=value,
        names=_names(order, first, has_tp, num_phases, plans, cols, st, dst, to_chunk, v)
        if names else None,
        flow_task=np.repeat(flow_tasks, sizes[flow_groups]),
        flow_src=joined("src", (0, 2)).reshape(-1, 2), flow_dst=joined("dst", (0, 2)).reshape(-1, 2),
        flow_bytes=keys[:, 0], flow_hops=keys[:, 1], flow_launches=keys[:, 2],
        flow_p2p=np.concatenate([g.p2p for g in pool] or [np.zeros(0, bool)])[flow],
        last=tuple(last.tolist()), piece_end=piece_end,
        waits=tuple((int(compute[g]), int(st[g]), int(lo[g])) for g in gathered.tolist()),
        finals={})


def _names(order, first, has_tp, num_phases, plans, cols, st, dst, to_chunk,
           v: int) -> tuple[str, ...]:
    """Every task's name, as the task-by-task build gives it."""
    from xsweep.plan.passes import piece_name  # here: passes imports this module

    out = [""] * int((1 + has_tp + num_phases).sum())
    kinds, mbs, chunks, los, his, roles = cols[0], cols[1], cols[2], cols[3], cols[4], cols[7]
    for g in order.tolist():
        s, kind, mb, c = int(st[g]), kinds[g], mbs[g], chunks[g]
        name = piece_name(kind, f"{{dg{s}}}", mb, c, los[g], his[g], v, roles[g])
        t = int(first[g])
        out[t] = name
        if has_tp[g]:
            t += 1
            out[t] = f"tp {name}"
        direction = "grad" if kind == "B" else "act"
        suffix = f" c{c}" if v > 1 else ""
        for phase in range(int(num_phases[g])):
            out[t + 1 + phase] = (f"{direction} {{dg{s}}}->{{dg{int(dst[g])}}} mb{mb}{suffix}"
                                  f" p{phase}")
    return tuple(out)
