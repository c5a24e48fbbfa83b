"""Collective lowerings: step counts, ring neighbours and the textbook bytes per rank."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xsweep.plan.collectives import (
    pipelined_allreduce,
    ring_allgather,
    ring_allreduce,
    ring_reduce_scatter,
)

groups = st.lists(st.integers(0, 1000), min_size=1, max_size=24, unique=True)
sizes = st.floats(0.0, 1e12, allow_nan=False, allow_infinity=False)


def bytes_sent_per_rank(steps) -> dict[int, float]:
    """Total bytes each sending rank puts on the network over all ``steps``."""
    sent: dict[int, float] = {}
    for step in steps:
        for src, _, nbytes in step:
            sent[src] = sent.get(src, 0.0) + nbytes
    return sent


def assert_ring_steps(steps, ranks, chunk_bytes):
    """Every step: each rank sends ``chunk_bytes`` once, to its successor in ``ranks``."""
    k = len(ranks)
    successor = {ranks[i]: ranks[(i + 1) % k] for i in range(k)}
    for step in steps:
        assert sorted(src for src, _, _ in step) == sorted(ranks)
        assert all(dst == successor[src] for src, dst, _ in step)
        assert all(nbytes == pytest.approx(chunk_bytes) for _, _, nbytes in step)


@given(groups, sizes)
def test_ring_allreduce_sends_2_k_minus_1_over_k_of_the_tensor_per_rank(ranks, size):
    k = len(ranks)
    steps = ring_allreduce(ranks, size)
    assert len(steps) == 2 * (k - 1)
    assert_ring_steps(steps, ranks, size / k)
    sent = bytes_sent_per_rank(steps)
    assert sorted(sent) == (sorted(ranks) if k > 1 else [])
    for nbytes in sent.values():
        assert nbytes == pytest.approx(2 * (k - 1) / k * size)


@pytest.mark.parametrize("collective", [ring_allgather, ring_reduce_scatter])
@given(ranks=groups, size=sizes)
def test_allgather_and_reduce_scatter_take_k_minus_1_steps_of_a_kth(collective, ranks, size):
    steps = collective(ranks, size)
    assert len(steps) == len(ranks) - 1
    assert_ring_steps(steps, ranks, size / len(ranks))


def test_a_single_rank_needs_no_steps():
    assert ring_allreduce([5], 1e9) == []
    assert ring_allgather([5], 1e9) == []
    assert pipelined_allreduce([5], 1e9, 4) == []


@given(groups, sizes, st.integers(1, 8))
def test_pipelined_allreduce_moves_what_count_ring_allreduces_move(ranks, size, count):
    flows = pipelined_allreduce(ranks, size, count)
    if len(ranks) == 1:
        assert flows == []
        return
    k = len(ranks)
    rings = bytes_sent_per_rank(ring_allreduce(ranks, size))
    assert [(src, dst) for src, dst, _, _ in flows] == [
        (ranks[i], ranks[(i + 1) % k]) for i in range(k)]
    for src, _, nbytes, hops in flows:
        assert nbytes == pytest.approx(count * rings[src])  # the same volume, in one flow
        assert hops == 2 * (k - 1) * count  # the latency of every step it stands for


@pytest.mark.parametrize("call", [
    lambda: ring_allreduce([], 1.0),
    lambda: ring_allreduce([1, 2, 1], 1.0),
    lambda: ring_allgather([1, 2], -1.0),
    lambda: pipelined_allreduce([1, 2, 1], 1.0, 2),
])
def test_malformed_collectives_are_errors(call):
    with pytest.raises(ValueError):
        call()
