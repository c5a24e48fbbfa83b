"""Collectives lowered to steps of concurrent point-to-point flows.

A lowering is a list of steps; the flows of one step run at the same time, and
a step starts when the previous one has finished. A flow is
``(src_rank, dst_rank, bytes)``. Sizes are those of the whole tensor each rank
holds; ring algorithms move it in ``k`` equal chunks.
"""

from __future__ import annotations

from collections.abc import Sequence

Flow = tuple[int, int, float]
Step = list[Flow]


def ring_allreduce(ranks: Sequence[int], size_bytes: float) -> list[Step]:
    """Ring all-reduce: reduce-scatter then all-gather, 2(k-1) steps of ``size/k`` per rank."""
    return _ring(ranks, size_bytes, passes=2)


def ring_reduce_scatter(ranks: Sequence[int], size_bytes: float) -> list[Step]:
    """Ring reduce-scatter of a ``size_bytes`` tensor: k-1 steps of ``size/k`` per rank."""
    return _ring(ranks, size_bytes, passes=1)


def ring_allgather(ranks: Sequence[int], size_bytes: float) -> list[Step]:
    """Ring all-gather into a ``size_bytes`` tensor: k-1 steps of ``size/k`` per rank."""
    return _ring(ranks, size_bytes, passes=1)


def pipelined_allreduce(ranks: Sequence[int], size_bytes: float,
                        count: float) -> list[tuple[int, int, float, float]]:
    """``count`` back-to-back ring all-reduces of ``size_bytes`` each, as NCCL pipelines them.

    Each rank sends one flow of ``2(k-1)/k * count * size`` bytes to its ring successor,
    after ``2(k-1) * count`` hop latencies: with nothing else on the links this takes
    exactly the time of ``count`` ring all-reduces, ``count * 2(k-1)(alpha + S/(kB))``,
    in one transfer per rank instead of ``2(k-1) * count`` steps. Tensor-parallel
    traffic (Megatron: two all-reduces per block and direction) is lowered this way.

    Returns:
      ``(src, dst, bytes, hops)`` per rank; none for one rank or no collective.
    """
    k = len(ranks)
    if k == 1 or count <= 0:
        return []
    _checked_group(ranks, size_bytes)
    nbytes, hops = pipelined_allreduce_flow(k, size_bytes, count)
    return [(int(ranks[i]), int(ranks[(i + 1) % k]), nbytes, hops) for i in range(k)]


def pipelined_allreduce_flow(k: int, size_bytes: float, count: float) -> tuple[float, float]:
    """``(bytes, hops)`` of each flow of :func:`pipelined_allreduce` over ``k`` ranks."""
    return 2 * (k - 1) / k * (count * size_bytes), 2 * (k - 1) * count


def _ring(ranks: Sequence[int], size_bytes: float, passes: int) -> list[Step]:
    """``passes`` trips round the ring: k-1 steps each, every rank sending ``size/k``."""
    k = _checked_group(ranks, size_bytes)
    step = [(int(ranks[i]), int(ranks[(i + 1) % k]), size_bytes / k) for i in range(k)]
    return [list(step) for _ in range(passes * (k - 1))]


def _checked_group(ranks: Sequence[int], size_bytes: float) -> int:
    """Number of ranks in a collective group, after checking the group and size."""
    if not ranks:
        raise ValueError("a collective needs at least one rank")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks repeat in collective group {list(ranks)}")
    if size_bytes < 0:
        raise ValueError(f"collective size must not be negative, got {size_bytes}")
    return len(ranks)
