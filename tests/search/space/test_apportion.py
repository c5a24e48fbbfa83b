"""Whole parts in proportion to weights: sums kept, each within 1 of its share."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from xsweep.search.space.apportion import apportion


def test_worked_examples():
    assert apportion(32, [3.0, 1.0]) == [24, 8]
    assert apportion(10, [1.0, 1.0, 1.0]) == [4, 3, 3]  # ties go to the lower index
    assert apportion(80, [1.0] * 8) == [10] * 8
    # a share below the minimum is raised to it; the others share the rest
    assert apportion(10, [100.0, 1.0]) == [9, 1]


def _raised(total: int, weights: list[float], raised: frozenset = frozenset()) -> frozenset:
    """The parts raised to the minimum of 1: those whose share of what the raised ones
    leave falls below 1, until none does (raising one lowers the others' shares)."""
    free = [i for i in range(len(weights)) if i not in raised]
    rest, weight = total - len(raised), sum(weights[i] for i in free)
    below = {i for i in free if rest * weights[i] / weight < 1}
    return raised if not below else _raised(total, weights, raised | below)


@given(st.lists(st.floats(0.01, 100.0), min_size=1, max_size=12), st.integers(0, 200))
@example([1.0, 1.0, 1.0, 1.0, 9.0, 9.0, 37.0], 0)  # the 9s fall below 1 once the 1s are raised
def test_sum_minimum_and_proportion(weights, extra):
    total = len(weights) + extra
    parts = apportion(total, weights)
    assert sum(parts) == total
    assert min(parts) >= 1
    raised = _raised(total, weights)
    free = [i for i in range(len(weights)) if i not in raised]
    rest = total - len(raised)
    weight = sum(weights[i] for i in free)
    for i in free:  # every part not raised to the minimum is within 1 of its exact share
        assert abs(parts[i] - rest * weights[i] / weight) < 1 + 1e-9


def test_impossible_splits_raise():
    with pytest.raises(ValueError):
        apportion(2, [1.0, 1.0, 1.0])
    with pytest.raises(ValueError):
        apportion(4, [1.0, 0.0])
