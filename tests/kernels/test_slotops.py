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


@pytest.mark.parametrize("length", [12, 4 * slotops.DENSE_MAX])  # dense, then scatter
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_owners_finds_the_range_holding_each_position(length, data):
    counts = data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=length))
    first = np.cumsum(counts) - np.asarray(counts)
    # entries with empty ranges may hold anything past the end
    first = np.where(np.asarray(counts) > 0, first, length + 3)
    got = np.asarray(slotops.owners(jnp.asarray(first, jnp.int32), length))
    np.testing.assert_array_equal(got, _owners_reference(first, length))


def test_integer_sums_keep_their_dtype():
    flags = jnp.asarray([True, False, True])
    assert slotops.reduce(flags, "sum").dtype == jnp.int32
    assert int(slotops.total(flags, "sum")) == 2
    assert bool(slotops.total(jnp.stack([flags, ~flags]), "all")) is False
