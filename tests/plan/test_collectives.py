"""Collective lowerings: step counts, ring neighbours and the textbook bytes per rank."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.plan.collectives import (
    bytes_sent_per_rank,
    hierarchical_allreduce,
    p2p,
    ring_allgather,
    ring_allreduce,
    ring_reduce_scatter,
)

groups = st.lists(st.integers(0, 1000), min_size=1, max_size=24, unique=True)
sizes = st.floats(0.0, 1e12, allow_nan=False, allow_infinity=False)


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
    assert hierarchical_allreduce([5], 1e9, lambda r: 0) == []


@settings(max_examples=60)
@given(st.integers(1, 6), st.integers(1, 6), sizes, st.randoms(use_true_random=False))
def test_hierarchical_allreduce_sends_the_textbook_volume(n, m, size, rng):
    ranks = list(range(n * m))
    rng.shuffle(ranks)  # the group's order decides the rings, never the volume

    def node_of(rank):
        return rank // n

    steps = hierarchical_allreduce(ranks, size, node_of)
    assert len(steps) == 2 * (n - 1) + 2 * (m - 1)
    intra = bytes_sent_per_rank([[f for f in s if node_of(f[0]) == node_of(f[1])] for s in steps])
    inter = bytes_sent_per_rank([[f for f in s if node_of(f[0]) != node_of(f[1])] for s in steps])
    for rank in ranks:
        assert intra.get(rank, 0.0) == pytest.approx(2 * (n - 1) / n * size)
        assert inter.get(rank, 0.0) == pytest.approx(2 * (m - 1) / m * size / n)
    # phases run in order: intra-node steps, then inter-node steps, then intra-node again
    crossing = [any(node_of(s) != node_of(d) for s, d, _ in step) for step in steps]
    assert crossing == [False] * (n - 1) + [True] * (2 * (m - 1)) + [False] * (n - 1)


def test_hierarchical_inter_node_rings_join_ranks_of_the_same_local_position():
    ranks = [0, 1, 2, 3, 4, 5]  # three nodes of two
    steps = hierarchical_allreduce(ranks, 6.0, lambda r: r // 2)
    inter = steps[1:5]
    assert inter[0] == [(0, 2, 1.0), (2, 4, 1.0), (4, 0, 1.0), (1, 3, 1.0), (3, 5, 1.0),
                        (5, 1, 1.0)]
    assert all(step == inter[0] for step in inter)


def test_hierarchical_allreduce_falls_back_to_the_ring_on_uneven_nodes():
    ranks = [0, 1, 2, 3, 4]  # two ranks on node 0, three on node 1

    def node_of(rank):
        return 0 if rank < 2 else 1

    assert hierarchical_allreduce(ranks, 10.0, node_of) == ring_allreduce(ranks, 10.0)


def test_p2p_is_one_step_and_bytes_sent_add_up():
    steps = p2p([(0, 1, 3.0), (0, 2, 4.0), (2, 0, 1.0)])
    assert steps == [[(0, 1, 3.0), (0, 2, 4.0), (2, 0, 1.0)]]
    assert bytes_sent_per_rank(steps + steps) == {0: 14.0, 2: 2.0}
    assert p2p([]) == []


@pytest.mark.parametrize("call", [
    lambda: ring_allreduce([], 1.0),
    lambda: ring_allreduce([1, 2, 1], 1.0),
    lambda: ring_allgather([1, 2], -1.0),
    lambda: p2p([(3, 3, 1.0)]),
])
def test_malformed_collectives_are_errors(call):
    with pytest.raises(ValueError):
        call()
