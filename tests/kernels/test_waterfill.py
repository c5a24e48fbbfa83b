"""Parallel water-filling against textbook progressive filling and closed forms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xsweep.kernels import packed_waterfill, waterfill

from tests.kernels.reference import progressive_fill
from tests.support.programs import GB, parking_lot_program, parking_lot_rates
from xsweep.evaluator.encode import encode

NUM_LINKS, NUM_FLOWS, HOPS = 8, 16, 4

_waterfill = jax.jit(waterfill, static_argnames="max_rounds")
_waterfill_batch = jax.jit(jax.vmap(waterfill, in_axes=(0, 0, 0)))


def _instance(rng: np.random.Generator):
    """Random capacities and paths of 1..HOPS distinct links; some flows inactive."""
    capacity = rng.choice([1.0, 2.0, 3.0, 4.0], NUM_LINKS) * GB * rng.uniform(0.5, 1.5, NUM_LINKS)
    paths = np.full((NUM_FLOWS, HOPS), -1, np.int32)
    for f in range(NUM_FLOWS):
        hops = rng.integers(1, HOPS + 1)
        paths[f, :hops] = rng.choice(NUM_LINKS, hops, replace=False)
    active = rng.random(NUM_FLOWS) < 0.8
    return capacity, paths, active


def _reference(capacity, paths, active) -> np.ndarray:
    on = np.flatnonzero(active)
    rates = np.zeros(len(active))
    rates[on] = progressive_fill(capacity, [[x for x in paths[f] if x >= 0] for f in on])
    return rates


@pytest.fixture(scope="module")
def instances():
    rng = np.random.default_rng(7)
    return [_instance(rng) for _ in range(200)]


def test_random_instances_match_progressive_filling_float32(instances):
    capacity, paths, active = (np.stack(x) for x in zip(*instances, strict=True))
    rates, converged, rounds = _waterfill_batch(capacity.astype(np.float32), paths, active)
    assert bool(np.all(converged))
    expected = np.stack([_reference(*inst) for inst in instances])
    np.testing.assert_allclose(np.asarray(rates), expected, rtol=2e-6, atol=0)
    assert int(np.max(rounds)) < NUM_LINKS  # every round freezes at least one link


def test_random_instances_match_progressive_filling_float64(instances):
    with jax.enable_x64(True):
        for capacity, paths, active in instances[:20]:
            rates, converged, _ = _waterfill(jnp.asarray(capacity, jnp.float64), paths, active)
            assert bool(converged)
            np.testing.assert_allclose(np.asarray(rates), _reference(capacity, paths, active),
                                       rtol=1e-12, atol=0)


def test_packed_equals_full(instances):
    """Filling only a packed prefix of the slots gives the same rates."""
    packed = jax.jit(packed_waterfill)
    for capacity, paths, active in instances[:10]:
        full = _waterfill(capacity.astype(np.float32), paths, active)
        # the paths as a table, the slots holding its rows in reverse order
        rows = np.arange(len(active))[::-1]
        fast = packed(capacity.astype(np.float32), paths[rows], rows, active)
        np.testing.assert_allclose(np.asarray(fast[0]), np.asarray(full[0]), rtol=1e-6)
        assert bool(fast[1]) and int(fast[2]) == int(full[2])


@pytest.mark.parametrize("moving", [3, 8, 20, 32, 90, 128, 150, 200])
def test_packed_fill_at_every_prefix_size_matches_progressive_filling(moving):
    """200 slots fill at a prefix of 8, 32, 128 or all 200, by how many move: each size
    gives the textbook rates."""
    rng = np.random.default_rng(moving)
    slots, links = 200, 24
    capacity = rng.uniform(0.5, 4.0, links) * GB
    paths = np.full((slots, HOPS), -1, np.int32)
    for f in range(slots):
        hops = rng.integers(1, HOPS + 1)
        paths[f, :hops] = rng.choice(links, hops, replace=False)
    active = np.zeros(slots, bool)
    active[rng.choice(slots, moving, replace=False)] = True
    rows = rng.permutation(slots)  # the slots hold the table's rows in a shuffled order
    table = np.empty_like(paths)
    table[rows] = paths
    rates, converged, _ = jax.jit(packed_waterfill)(capacity.astype(np.float32), table, rows,
                                                    active)
    assert bool(converged)
    np.testing.assert_allclose(np.asarray(rates), _reference(capacity, paths, active),
                               rtol=2e-6, atol=0)


def test_batched_equals_single_calls(instances):
    capacity, paths, active = (np.stack(x) for x in zip(*instances[:8], strict=True))
    capacity = capacity.astype(np.float32)
    batched = _waterfill_batch(capacity, paths, active)
    for i in range(8):
        single = _waterfill(capacity[i], paths[i], active[i])
        for b, s in zip(batched, single, strict=True):
            np.testing.assert_array_equal(np.asarray(b)[i], np.asarray(s))


@pytest.mark.parametrize(("capacities", "short_flows"), [
    ((1 * GB, 1 * GB), (2, 1)),  # link 0 is the first bottleneck
    ((1 * GB, 1 * GB), (1, 3)),  # link 1 is
    ((4 * GB, 1 * GB), (1, 1)),  # the long flow is pinned by the slower link
])
def test_parking_lot(capacities, short_flows):
    program = parking_lot_program(capacities, short_flows)
    arrays = encode([program], dtype=np.float64)
    with jax.enable_x64(True):
        rates, converged, _ = _waterfill(arrays.link_capacity[0], arrays.flow_path[0],
                                         arrays.flow_task[0] >= 0)
    a, c = short_flows
    long_rate, short0, short1 = parking_lot_rates(capacities, short_flows)
    expected = [long_rate] + [short0] * a + [short1] * c
    assert bool(converged)
    np.testing.assert_allclose(np.asarray(rates)[: 1 + a + c], expected, rtol=1e-12)


def test_n_flows_on_one_bottleneck_get_equal_shares():
    capacity = jnp.asarray([8.0 * GB, 4 * GB, 4 * GB], jnp.float32)
    paths = jnp.asarray([[0, -1], [0, 1], [2, 0], [0, -1]], jnp.int32)
    rates, converged, rounds = _waterfill(capacity, paths, jnp.ones(4, bool))
    np.testing.assert_allclose(np.asarray(rates), [2 * GB] * 4, rtol=1e-6)
    assert bool(converged) and int(rounds) == 1


def test_round_cap_reports_not_converged_and_stays_feasible():
    # a cascade: each link is a bottleneck only once the flow it shares with the
    # previous link is frozen, so filling needs one round per link
    capacity = jnp.asarray([1.0, 3.0, 6.0, 12.0], jnp.float32) * GB
    paths = jnp.asarray([[0, -1], [0, 1], [1, -1], [1, 2], [2, -1], [2, 3], [3, -1]])
    expected = np.array([0.5, 0.5, 1.25, 1.25, 2.375, 2.375, 9.625]) * GB
    full, converged, rounds = _waterfill(capacity, paths, jnp.ones(7, bool))
    assert bool(converged) and int(rounds) == 4
    np.testing.assert_allclose(np.asarray(full), expected, rtol=1e-6)
    capped, converged, rounds = _waterfill(capacity, paths, jnp.ones(7, bool), max_rounds=2)
    assert not bool(converged) and int(rounds) == 2
    np.testing.assert_allclose(np.asarray(capped[:4]), expected[:4], rtol=1e-6)
    load = np.zeros(4)
    for f in range(7):
        load[np.asarray(paths[f])[np.asarray(paths[f]) >= 0]] += float(capped[f])
    assert np.all(load <= np.asarray(capacity) * (1 + 1e-6))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_max_min_invariants(seed):
    """No link over capacity; every active flow has a full link where its rate is largest."""
    capacity, paths, active = _instance(np.random.default_rng(seed))
    with jax.enable_x64(True):
        rates, converged, _ = _waterfill(jnp.asarray(capacity, jnp.float64), paths, active)
    rates = np.asarray(rates)
    assert bool(converged)
    assert np.all(rates[~active] == 0) and np.all(rates[active] > 0)
    load = np.zeros(NUM_LINKS)
    for f in np.flatnonzero(active):
        load[paths[f][paths[f] >= 0]] += rates[f]
    assert np.all(load <= capacity * (1 + 1e-12))
    for f in np.flatnonzero(active):
        on_path = paths[f][paths[f] >= 0]
        full = load[on_path] >= capacity[on_path] * (1 - 1e-12)
        largest = [max(rates[g] for g in np.flatnonzero(active) if link in paths[g])
                   for link in on_path]
        assert np.any(full & (rates[f] >= np.array(largest) * (1 - 1e-12)))
