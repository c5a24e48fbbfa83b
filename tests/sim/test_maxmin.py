"""Exact max-min fair rates: hand examples, the bottleneck characterisation, locality."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.sim.maxmin import LinkIncidence


def _incidence(paths, capacity):
    ptr = np.concatenate([[0], np.cumsum([len(p) for p in paths])])
    return LinkIncidence(ptr, np.array([x for p in paths for x in p]), np.array(capacity, float))


def test_three_levels_of_filling():
    # link 0 (cap 3) carries flows 0, 1, 2; link 1 (cap 1) carries 0 and 3; link 2 (cap 10): 2, 4
    inc = _incidence([[0, 1], [0], [0, 2], [1], [2]], [3.0, 1.0, 10.0])
    rates = inc.rates(np.arange(5))
    # link 1 freezes first at 1/2; link 0 then shares 2.5 between flows 1, 2; link 2 gives 8.75
    assert rates == pytest.approx([0.5, 1.25, 1.25, 0.5, 8.75], rel=1e-15)


def test_a_subset_of_flows_shares_only_among_itself():
    inc = _incidence([[0], [0], [0], [0]], [8.0])
    assert inc.rates(np.array([1, 3])).tolist() == [4.0, 4.0]
    assert inc.rates(np.zeros(0, np.int64)).shape == (0,)


def _random_instance(seed):
    rng = np.random.default_rng(seed)
    num_links = int(rng.integers(1, 8))
    capacity = rng.choice([1.0, 2.0, 3.0, 10.0], num_links) * rng.choice([1.0, 1.37], num_links)
    paths = [sorted(rng.choice(num_links, int(rng.integers(1, min(4, num_links) + 1)),
                               replace=False).tolist())
             for _ in range(int(rng.integers(1, 25)))]
    return paths, capacity


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_every_flow_has_a_bottleneck_and_no_link_is_over_capacity(seed):
    """A feasible allocation is max-min fair iff every flow has a bottleneck link."""
    paths, capacity = _random_instance(seed)
    rates = _incidence(paths, capacity).rates(np.arange(len(paths)))
    assert np.all(rates > 0)
    load = np.zeros(capacity.shape[0])
    for path, rate in zip(paths, rates, strict=True):
        load[path] += rate
    assert np.all(load <= capacity * (1 + 1e-12))
    for path, rate in zip(paths, rates, strict=True):
        assert any(load[x] >= capacity[x] * (1 - 1e-12)
                   and all(rate >= r * (1 - 1e-12) for p, r in zip(paths, rates, strict=True)
                           if x in p)
                   for x in path)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_components_do_not_interact_to_the_last_bit(seed):
    """Two link-disjoint flow sets get the same rates together as apart."""
    paths_a, cap_a = _random_instance(seed)
    paths_b, cap_b = _random_instance(seed + 1)
    shift = cap_a.shape[0]
    rng = np.random.default_rng(seed)
    merged = [(p, 0) for p in paths_a] + [([x + shift for x in p], 1) for p in paths_b]
    order = rng.permutation(len(merged))  # interleave the two sets' flow ids
    inc = _incidence([merged[i][0] for i in order], np.concatenate([cap_a, cap_b]))
    together = inc.rates(np.arange(len(merged)))
    side = np.array([merged[i][1] for i in order])
    for which in (0, 1):
        alone = inc.rates(np.flatnonzero(side == which))
        assert together[side == which].tolist() == alone.tolist()
