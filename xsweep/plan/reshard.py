"""Resharding one tensor between consecutive pipeline stages of different TP degree.

Three schemes (paper section 2.4 and Figure 2), each a list of point-to-point
:class:`Transfer` s in global ranks, grouped into phases that run one after
the other (phase ``k`` starts when every transfer of phase ``k - 1`` is done):

* ``LCM`` — the tensor is cut into ``L = lcm(t_s, t_d)`` equal chunks owned
  round-robin (chunk ``c`` by local rank ``c mod t``) on both sides, and every
  chunk goes straight from its owner to its new owner in one phase. By the
  Chinese remainder theorem the ``L`` chunks map to ``L`` distinct
  (source, destination) pairs, so there is nothing to merge: one transfer per
  chunk, ``L / t_s`` balanced sends per source rank.
* ``HETAUTO`` — ``g = gcd(t_s, t_d)`` virtual groups of contiguous ranks on
  each side; gather each source group's shards to its leader, send ``d / g``
  bytes leader to leader, scatter from the destination leader.
* ``ALPACOMM`` — cut the tensor at the union of both sides' contiguous shard
  boundaries and send each resulting (irregular) unit straight to its owner.

Every transfer names the byte intervals of the global tensor it carries, so
conservation can be checked by replaying the phases. Positions are computed
as exact fractions of the tensor and turned into bytes once, which makes equal
boundaries compare equal as floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from xsweep.memo import cached

Interval = tuple[Fraction, Fraction]  # a part of the tensor, as fractions of its size


class Scheme(StrEnum):
    """Resharding scheme; values are the lower-case names of the plan's ``Resharding`` enum."""

    LCM = "lcm"
    HETAUTO = "hetauto"
    ALPACOMM = "alpacomm"


@dataclass(frozen=True)
class Transfer:
    """One point-to-point send: global ranks, size, phase, and the byte intervals it carries."""

    src: int
    dst: int
    bytes: float
    phase: int
    pieces: tuple[tuple[float, float], ...]


def hetauto_virtual_groups(t_s: int, t_d: int) -> int:
    """Number of HetAuto virtual groups (and leader pairs): ``gcd(t_s, t_d)``."""
    return math.gcd(t_s, t_d)


def alpacomm_units(t_s: int, t_d: int, total: float) -> list[float]:
    """Sizes of AlpaComm's communication units, in tensor order.

    Example: 12 elements from TP 6 to TP 4 give ``[2, 1, 1, 2, 2, 1, 1, 2]``.
    """
    cuts = _union_cuts(t_s, t_d)
    return [_scale(total, hi - lo) for lo, hi in zip(cuts, cuts[1:], strict=False)]


def layout(scheme: Scheme | str, t: int, total_bytes: float,
           peer_tp: int | None = None) -> list[list[tuple[float, float]]]:
    """Byte intervals each local rank of a TP-``t`` group holds under ``scheme``.

    Only ``LCM`` depends on the other side: its chunks are ``1 / lcm(t, peer_tp)``
    of the tensor (``peer_tp`` defaults to ``t``, i.e. contiguous shards).
    Adjacent intervals of one rank are merged.
    """
    shards = _shards(Scheme(scheme), t, t if peer_tp is None else peer_tp)
    return [[(_scale(total_bytes, lo), _scale(total_bytes, hi)) for lo, hi in rank]
            for rank in shards]


def reshard(scheme: Scheme | str, src_ranks: Sequence[int], dst_ranks: Sequence[int],
            total_bytes: float) -> list[Transfer]:
    """Transfers that move a tensor of ``total_bytes`` from ``src_ranks`` to ``dst_ranks``.

    Args:
        scheme: ``LCM``, ``HETAUTO`` or ``ALPACOMM`` (or their lower-case names).
        src_ranks: global ranks of the sending stage, in TP order (``t_s`` of them).
        dst_ranks: global ranks of the receiving stage, in TP order; disjoint from
            ``src_ranks``, as two stages never share a GPU.
        total_bytes: size of the whole (unsharded) tensor.

    Returns:
        Transfers ordered by phase, phases numbered densely from 0. Empty for a
        zero-byte tensor.
    """
    src, dst = tuple(src_ranks), tuple(dst_ranks)
    if not src or not dst or len(set(src)) < len(src) or len(set(dst)) < len(dst):
        raise ValueError(f"need non-empty lists of distinct ranks, got {src} -> {dst}")
    if set(src) & set(dst):
        raise ValueError(f"source and destination ranks overlap: {src} -> {dst}")
    if total_bytes < 0:
        raise ValueError(f"negative tensor size {total_bytes}")
    if total_bytes == 0:
        return []
    ranks = src + dst
    return [Transfer(src=ranks[s], dst=ranks[d], phase=phase, bytes=_scale(total_bytes, size),
                     pieces=tuple((_scale(total_bytes, lo), _scale(total_bytes, hi))
                                  for lo, hi in pieces))
            for s, d, phase, size, pieces in _moves(Scheme(scheme), len(src), len(dst))]


@cached(1024)
def _moves(scheme: Scheme, t_s: int, t_d: int) -> tuple:
    """The moves of ``scheme`` between TP degrees ``t_s`` and ``t_d``, by position: sources
    ``0..t_s-1``, destinations ``t_s..t_s+t_d-1``; ordered by phase, phases numbered from 0.

    Each is ``(source, destination, phase, size, pieces)`` in fractions of the tensor.
    They depend on the degrees alone, so they are worked out (in exact fractions) once.
    """
    moves = _PLANNERS[scheme](tuple(range(t_s)), tuple(range(t_s, t_s + t_d)))
    renumber = {p: i for i, p in enumerate(sorted({m[2] for m in moves}))}
    return tuple((s, d, renumber[p], sum(hi - lo for lo, hi in pieces), pieces)
                 for s, d, p, pieces in sorted(moves, key=lambda m: m[2]))


# A planned move: (source rank, destination rank, phase, intervals as fractions).
_Move = tuple[int, int, int, tuple[Interval, ...]]


def _lcm_moves(src: tuple[int, ...], dst: tuple[int, ...]) -> list[_Move]:
    chunks = math.lcm(len(src), len(dst))
    return [(src[c % len(src)], dst[c % len(dst)], 0, ((Fraction(c, chunks),
                                                        Fraction(c + 1, chunks)),))
            for c in range(chunks)]


def _hetauto_moves(src: tuple[int, ...], dst: tuple[int, ...]) -> list[_Move]:
    t_s, t_d = len(src), len(dst)
    groups = hetauto_virtual_groups(t_s, t_d)
    per_src, per_dst = t_s // groups, t_d // groups
    moves: list[_Move] = []
    for k in range(groups):
        src_leader, dst_leader = k * per_src, k * per_dst
        moves += [(src[j], src[src_leader], 0, (_contiguous(j, t_s),))
                  for j in range(src_leader + 1, src_leader + per_src)]
        # Contiguous members make the group's shards one contiguous block.
        moves.append((src[src_leader], dst[dst_leader], 1, (_contiguous(k, groups),)))
        moves += [(dst[dst_leader], dst[j], 2, (_contiguous(j, t_d),))
                  for j in range(dst_leader + 1, dst_leader + per_dst)]
    return moves


def _alpacomm_moves(src: tuple[int, ...], dst: tuple[int, ...]) -> list[_Move]:
    cuts = _union_cuts(len(src), len(dst))
    # A unit lies inside one shard of each side: its owners are found from its start.
    return [(src[math.floor(lo * len(src))], dst[math.floor(lo * len(dst))], 0, ((lo, hi),))
            for lo, hi in zip(cuts, cuts[1:], strict=False)]


_PLANNERS = {Scheme.LCM: _lcm_moves, Scheme.HETAUTO: _hetauto_moves,
             Scheme.ALPACOMM: _alpacomm_moves}


def _shards(scheme: Scheme, t: int, peer_tp: int) -> list[list[Interval]]:
    if scheme is not Scheme.LCM:
        return [[_contiguous(j, t)] for j in range(t)]
    chunks = math.lcm(t, peer_tp)
    return [_merge([(Fraction(c, chunks), Fraction(c + 1, chunks))
                    for c in range(j, chunks, t)]) for j in range(t)]


def _contiguous(j: int, t: int) -> Interval:
    return Fraction(j, t), Fraction(j + 1, t)


def _union_cuts(t_s: int, t_d: int) -> list[Fraction]:
    return sorted({Fraction(j, t_s) for j in range(t_s + 1)}
                  | {Fraction(k, t_d) for k in range(t_d + 1)})


def _merge(intervals: list[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for lo, hi in sorted(intervals):
        if merged and merged[-1][1] == lo:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


def _scale(total: float, part: Fraction) -> float:
    # One formula for every position: equal fractions give bit-identical floats.
    return total * part.numerator / part.denominator
