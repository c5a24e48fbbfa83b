"""Ragged-array helpers against their plain definitions."""

import numpy as np
import pytest

from xsweep.ragged import owners_and_places, run_starts


@pytest.mark.parametrize("values", [[], [3], [1, 1, 1], [0, 1, 1, 2, 2, 2, 5, 1, 1],
                                    list(np.random.default_rng(0).integers(0, 3, 200))])
def test_run_starts_marks_where_each_run_of_equal_values_begins(values):
    x = np.asarray(values, np.int64)
    expected = np.array([i == 0 or x[i] != x[i - 1] for i in range(len(x))], bool)
    assert np.array_equal(run_starts(x), expected)


def test_owners_and_places_number_every_item_of_every_group():
    owner, place = owners_and_places(np.array([2, 0, 3], np.int64))
    assert owner.tolist() == [0, 0, 2, 2, 2]
    assert place.tolist() == [0, 1, 0, 1, 2]
