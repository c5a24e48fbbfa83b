"""Ring collectives: ring neighbours, the textbook bytes per rank and the hop latencies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xsweep.plan.collectives import ALLGATHER, ALLREDUCE, REDUCE_SCATTER, pipelined_ring

groups = st.lists(st.integers(0, 1000), min_size=1, max_size=24, unique=True)
sizes = st.floats(0.0, 1e12, allow_nan=False, allow_infinity=False)


def ring_steps(ranks, size_bytes, passes):
    """The textbook ring, step by step: ``passes (k-1)`` steps, each rank sending ``S/k`` to
    its successor in each."""
    k = len(ranks)
    return [[(ranks[i], ranks[(i + 1) % k], size_bytes / k) for i in range(k)]
            for _ in range(passes * (k - 1))]


@pytest.mark.parametrize("passes", [ALLREDUCE, REDUCE_SCATTER, ALLGATHER])
@given(ranks=groups, size=sizes, count=st.integers(1, 8))
def test_one_flow_per_rank_carries_what_the_ring_steps_carry(passes, ranks, size, count):
    flows = pipelined_ring(ranks, size, count, passes)
    k = len(ranks)
    if k == 1:
        assert flows == []
        return
    steps = ring_steps(ranks, size, passes)
    assert [(src, dst) for src, dst, _, _ in flows] == [
        (ranks[i], ranks[(i + 1) % k]) for i in range(k)]
    for src, _, nbytes, hops in flows:
        sent = sum(b for step in steps for s, _, b in step if s == src)
        assert nbytes == pytest.approx(count * sent)  # the same volume, in one flow
        assert hops == count * len(steps)  # the latency of every step it stands for
    assert sum(f[2] for f in flows) == pytest.approx(count * passes * (k - 1) * size)


def test_a_single_rank_or_no_collective_needs_no_flows():
    assert pipelined_ring([5], 1e9, 4) == []
    assert pipelined_ring([1, 2], 1e9, 0) == []


@pytest.mark.parametrize("call", [
    lambda: pipelined_ring([], 1.0),
    lambda: pipelined_ring([1, 2, 1], 1.0, 2),
    lambda: pipelined_ring([1, 2], -1.0),
])
def test_malformed_collectives_are_errors(call):
    with pytest.raises(ValueError):
        call()
