"""Collectives lowered to steps of concurrent point-to-point flows.

A lowering is a list of steps; the flows of one step run at the same time, and
a step starts when the previous one has finished. A flow is
``(src_rank, dst_rank, bytes)``. Sizes are those of the whole tensor each rank
holds; ring algorithms move it in ``k`` equal chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

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


def hierarchical_allreduce(ranks: Sequence[int], size_bytes: float,
                           node_of: Callable[[int], int]) -> list[Step]:
    """Intra-node reduce-scatter, inter-node ring all-reduce per local position, intra all-gather.

    With ``n`` ranks on each of ``m`` nodes every rank sends ``2(n-1)/n * S`` bytes
    inside its node and ``2(m-1)/m * S/n`` across nodes. Nodes are taken in the
    order they first appear in ``ranks``, and ranks inside a node in their order
    there; the rank at position ``j`` of every node forms inter-node ring ``j``.
    When nodes hold different numbers of the ranks the positions do not line up,
    so the plain ring all-reduce over ``ranks`` is returned instead.
    """
    _checked_group(ranks, size_bytes)
    by_node: dict[int, list[int]] = {}
    for rank in ranks:
        by_node.setdefault(node_of(rank), []).append(rank)
    local_groups = list(by_node.values())
    n = len(local_groups[0])
    if any(len(group) != n for group in local_groups):
        return ring_allreduce(ranks, size_bytes)
    position_groups = [list(column) for column in zip(*local_groups, strict=True)]
    shard_bytes = size_bytes / n
    return [
        *_concurrent([ring_reduce_scatter(g, size_bytes) for g in local_groups]),
        *_concurrent([ring_allreduce(g, shard_bytes) for g in position_groups]),
        *_concurrent([ring_allgather(g, size_bytes) for g in local_groups]),
    ]


def p2p(pairs: Iterable[Flow]) -> list[Step]:
    """Independent transfers ``(src, dst, bytes)`` as one step (no step when there are none)."""
    step = [(int(src), int(dst), float(nbytes)) for src, dst, nbytes in pairs]
    for src, dst, nbytes in step:
        if src == dst or nbytes < 0:
            raise ValueError(f"bad transfer {src} -> {dst} of {nbytes} bytes")
    return [step] if step else []


def bytes_sent_per_rank(steps: Iterable[Step]) -> dict[int, float]:
    """Total bytes each sending rank puts on the network over all ``steps``."""
    sent: dict[int, float] = {}
    for step in steps:
        for src, _, nbytes in step:
            sent[src] = sent.get(src, 0.0) + nbytes
    return sent


def _ring(ranks: Sequence[int], size_bytes: float, passes: int) -> list[Step]:
    """``passes`` trips round the ring: k-1 steps each, every rank sending ``size/k``."""
    k = _checked_group(ranks, size_bytes)
    step = [(int(ranks[i]), int(ranks[(i + 1) % k]), size_bytes / k) for i in range(k)]
    return [list(step) for _ in range(passes * (k - 1))]


def _concurrent(lowerings: list[list[Step]]) -> list[Step]:
    """Run independent lowerings side by side: step ``i`` joins the ``i``-th step of each."""
    num_steps = max((len(steps) for steps in lowerings), default=0)
    return [[flow for steps in lowerings if i < len(steps) for flow in steps[i]]
            for i in range(num_steps)]


def _checked_group(ranks: Sequence[int], size_bytes: float) -> int:
    """Number of ranks in a collective group, after checking the group and size."""
    if not ranks:
        raise ValueError("a collective needs at least one rank")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks repeat in collective group {list(ranks)}")
    if size_bytes < 0:
        raise ValueError(f"collective size must not be negative, got {size_bytes}")
    return len(ranks)
