"""The pieces of a stream's passes, and where their outputs go.

A pass of chunk ``c`` runs the chunk's layers (the ``c``-th ``v``-th of the stage's
layers; without interleaving, all of them). It is one piece, except:

* the last backward pass of each chunk is cut at ``cuts`` (DP segment boundaries and
  gradient-bucket starts), so that a bucket's reduction can start when its layers are
  done;
* with ``gather`` (ZeRO-1 with overlap), the first forward pass of each chunk is cut
  at the same points, and each piece waits for its bucket's parameter all-gather;
* under FSDP every pass is cut into its layers.

A piece is a plain tuple of the fields of :class:`Piece`: the distinct plans of
``benchmarks/bench_prepare.py`` make 175,000 pieces, and a ``NamedTuple`` takes seven
times a tuple's time to make (0.31 us against 0.04 here). Both ways of building a block
(:mod:`xsweep.plan.passes`, :mod:`xsweep.plan.replica_block`) read pieces from here.
"""

from __future__ import annotations

from typing import NamedTuple

from xsweep.plan.schedule import stage_order

#: A stage as a block sees it: (TP degree, first layer, last layer, micro-batches).
Stage = tuple[int, int, int, int]


class Piece(NamedTuple):
    """The fields of a piece, in the order :func:`pieces` gives them (the type of a piece's
    columns, too: each field a sequence over pieces)."""

    kind: str  # "F" or "B"
    micro_batch: int
    chunk: int
    first: int  # first layer
    end: int  # end layer (exclusive)
    index: int  # in its pass
    count: int  # pieces in its pass
    role: str  # "last_b": of a chunk's last backward; "first_f": of a gathered first
    # forward; "layer": FSDP; "": a whole pass


def pieces(schedule: str, stage: int, num_stages: int, spec: Stage, v: int, cuts: tuple,
           gather: bool, fsdp: bool) -> list[tuple]:
    """The pieces of one stream in execution order (see the module's description), each a
    tuple of :class:`Piece`'s fields."""
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
