"""The slot helpers give the integers of their plain forms, on both sides of their size
thresholds (a dense form for short arrays, the library's scan or scatter above)."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xsweep.kernels import slotops


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=3 * slotops.DENSE_MAX))
def test_prefix_sum_is_cumsum(values):
    got = np.asarray(slotops.prefix_sum(jnp.asarray(values, jnp.int32)))
    np.testing.assert_array_equal(got, np.cumsum(values))
    assert got.dtype == np.int32


def _owners_reference(first, length):
    out = np.zeros(length, np.int32)
    for position in range(length):
        at_or_before = [i for i, f in enumerate(first) if f <= position]
        out[position] = max(at_or_before, default=0)
    return out


@pytest.mark.parametrize("sequential", [False, True])
@pytest.mark.parametrize("length", [12, 4 * slotops.DENSE_MAX])  # dense, then scatter
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_owners_finds_the_range_holding_each_position(length, sequential, data):
    counts = data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=length))
    first = np.cumsum(counts) - np.asarray(counts)
    # entries with empty ranges may hold anything past the end
    first = np.where(np.asarray(counts) > 0, first, length + 3)
    got = np.asarray(slotops.owners(jnp.asarray(first, jnp.int32), length, sequential))
    np.testing.assert_array_equal(got, _owners_reference(first, length))


@pytest.mark.parametrize("sequential", [False, True])
@pytest.mark.parametrize("length", [12, 4 * slotops.DENSE_MAX])  # dense, then scatter
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_inverse_finds_the_entry_holding_each_rank(length, sequential, data):
    # ranks repeat, fall outside 0..length-1 on both sides, or are missing
    rank = data.draw(st.lists(st.integers(-2, length + 2), min_size=1, max_size=length))
    got = np.asarray(slotops.inverse(jnp.asarray(rank, jnp.int32), length, sequential))
    want = [max([i for i, r in enumerate(rank) if r == at], default=-1)
            for at in range(length)]
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32


def _scatter_reference(target, index, values, how):
    out = np.array(target)
    for i, at in enumerate(index):  # one update after another: set keeps the last
        if at < len(out):
            old = out[at]
            out[at] = {"add": old + values[i], "max": np.maximum(old, values[i]),
                       "min": np.minimum(old, values[i]), "set": values[i]}[how]
    return out


@pytest.mark.parametrize("how", ["add", "max", "min", "set"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_sequential_scatter_is_xlas_with_repeats_and_drops(how, data):
    size = data.draw(st.integers(1, 12))
    index = np.array(data.draw(st.lists(st.integers(0, size + 2), min_size=1, max_size=20)),
                     np.int32)
    values = np.array(data.draw(st.lists(st.integers(-9, 9), min_size=len(index),
                                         max_size=len(index))), np.int32)
    target = np.arange(size, dtype=np.int32) * 3 - 5
    want = _scatter_reference(target, index, values, how)
    got = slotops.scatter(jnp.asarray(target), jnp.asarray(index), jnp.asarray(values), how,
                          sequential=True)
    np.testing.assert_array_equal(np.asarray(got), want)
    if how != "set" or len(set(index.tolist())) == len(index):  # XLA's order of repeats
        xla = slotops.scatter(jnp.asarray(target), jnp.asarray(index), jnp.asarray(values),
                              how)  # is unspecified for set
        np.testing.assert_array_equal(np.asarray(xla), want)


@pytest.mark.parametrize("how", ["add", "min"])
def test_sequential_segments_are_xlas(how):
    rng = np.random.default_rng(3)
    values = rng.normal(size=(40, 2)).astype(np.float32)
    segments = rng.integers(0, 9, size=40).astype(np.int32)  # segment 9 stays empty
    args = (jnp.asarray(values), jnp.asarray(segments), 10, how)
    want = np.asarray(slotops.segment(*args))
    got = np.asarray(slotops.segment(*args, sequential=True))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.isinf(got[9]).all() if how == "min" else (got[9] == 0).all()


def test_integer_sums_keep_their_dtype():
    flags = jnp.asarray([True, False, True])
    assert slotops.reduce(flags, "sum").dtype == jnp.int32
    assert int(slotops.total(flags, "sum")) == 2
    assert bool(slotops.total(jnp.stack([flags, ~flags]), "all")) is False
