"""Ring collectives as NCCL pipelines them: one flow per rank to its ring successor.

A ring all-reduce of ``S`` bytes over ``k`` ranks is a reduce-scatter then an
all-gather; in each of its ``2(k-1)`` steps every rank sends ``S/k`` to its
successor. NCCL does not wait for every rank between steps: it streams slices of
the buffer round the ring, so each rank's link to its successor carries one
continuous transfer. The lowering writes a collective that way, as one flow per
rank of everything that rank sends, after the hop latencies of all its steps:

=================  ==========  ============================  ===============
collective         passes      bytes per flow                hop latencies
=================  ==========  ============================  ===============
all-reduce         2           ``2(k-1)/k x S``              ``2(k-1)``
reduce-scatter     1           ``(k-1)/k x S``               ``k-1``
all-gather         1           ``(k-1)/k x S``               ``k-1``
=================  ==========  ============================  ===============

With nothing else on the links this takes exactly the time of the steps one after
another, ``passes (k-1)(alpha + S/(kB))``. ``count`` back-to-back collectives of
the same group and size (the tensor-parallel all-reduces of one pass) are one
flow of ``count`` times the bytes and hops.

An all-to-all (the dispatch and combine of a mixture-of-experts layer) is a pairwise
exchange, as NCCL runs it (a send and a receive posted to every peer at once): one flow
from every rank to every other rank, each of the bytes that rank has for that peer, after
one hop latency per operation. ``count`` back-to-back all-to-alls of one group and size
are one flow per ordered pair of ``count`` times the bytes and hops.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Trips round the ring: an all-reduce makes two (reduce-scatter, then all-gather).
ALLREDUCE, REDUCE_SCATTER, ALLGATHER = 2, 1, 1


def pipelined_ring(ranks: Sequence[int], size_bytes: float, count: float = 1.0,
                   passes: int = ALLREDUCE) -> list[tuple[int, int, float, float]]:
    """The flows of ``count`` ring collectives of ``size_bytes`` over ``ranks``.

    Returns:
      ``(src, dst, bytes, hops)`` per rank; none for one rank or no collective.
    """
    k = len(ranks)
    if not ranks:
        raise ValueError("a collective needs at least one rank")
    if len(set(ranks)) != k:
        raise ValueError(f"ranks repeat in collective group {list(ranks)}")
    if size_bytes < 0:
        raise ValueError(f"collective size must not be negative, got {size_bytes}")
    if k == 1 or count <= 0:
        return []
    nbytes, hops = pipelined_ring_flow(k, size_bytes, count, passes)
    return [(int(ranks[i]), int(ranks[(i + 1) % k]), nbytes, hops) for i in range(k)]


def pipelined_ring_flow(k: int, size_bytes: float, count: float = 1.0,
                        passes: int = ALLREDUCE) -> tuple[float, float]:
    """``(bytes, hops)`` of each flow of :func:`pipelined_ring` over ``k`` ranks."""
    return passes * (k - 1) / k * (count * size_bytes), passes * (k - 1) * count


def all_to_all_pairs(k: int) -> list[tuple[int, int]]:
    """``(i, j)`` indices of the flows of an all-to-all over ``k`` ranks: every ordered pair
    of distinct ranks, source by source."""
    return [(i, j) for i in range(k) for j in range(k) if i != j]


def expert_pairs(tp: int, width: int) -> list[tuple[int, int]]:
    """``(i, j)`` indices of the flows one group's ranks send in an all-to-all over its EP
    group of ``width`` ranks (its own ``tp`` first, indices ``0..tp-1``, then its peers'):
    from each of its ranks to every other rank of the group, source by source. At
    ``width == tp``, :func:`all_to_all_pairs`."""
    return [(i, j) for i in range(tp) for j in range(width) if i != j]


def all_to_all(ranks: Sequence[int], pair_bytes: float,
               count: float = 1.0) -> list[tuple[int, int, float, float]]:
    """The flows of ``count`` all-to-alls over ``ranks`` in which every rank sends
    ``pair_bytes`` to every other rank (pairwise exchange).

    Returns:
      ``(src, dst, bytes, hops)`` per ordered pair; none for one rank or no all-to-all.
    """
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks repeat in all-to-all group {list(ranks)}")
    if pair_bytes < 0:
        raise ValueError(f"all-to-all size must not be negative, got {pair_bytes}")
    if len(ranks) < 2 or count <= 0:
        return []
    nbytes, hops = all_to_all_flow(pair_bytes, count)
    return [(int(ranks[i]), int(ranks[j]), nbytes, hops)
            for i, j in all_to_all_pairs(len(ranks))]


def all_to_all_flow(pair_bytes: float, count: float = 1.0) -> tuple[float, float]:
    """``(bytes, hops)`` of each flow of :func:`all_to_all`."""
    return count * pair_bytes, count
