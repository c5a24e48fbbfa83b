"""Pareto fronts and top points against brute force."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.search.pareto import dominated_by, kth_best, non_dominated, objective_matrix, top_points


def brute_front(values: np.ndarray) -> np.ndarray:
    keep = []
    for v in values:
        if np.isnan(v).any():
            keep.append(False)
            continue
        beaten = any((w <= v).all() and (w < v).any() for w in values if not np.isnan(w).any())
        keep.append(not beaten)
    return np.array(keep, bool)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 1200), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_front_equals_brute_force(n, d, seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 6, size=(n, d)).astype(float)  # small range: many ties and duplicates
    values[rng.random(n) < 0.05] = np.nan
    if n <= 150:
        np.testing.assert_array_equal(non_dominated(values), brute_front(values))
    front = values[non_dominated(values)]
    # every point off the front (and not NaN) is dominated by a front point; none on it is
    off = ~non_dominated(values) & ~np.isnan(values).any(axis=1)
    assert dominated_by(front, values[off]).all()
    assert not dominated_by(front, front).any()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 3000), st.integers(1, 2), st.integers(0, 2**31 - 1), st.booleans())
def test_one_or_two_objectives_agree_with_the_general_front(n, d, seed, ties):
    """The sorted sweep of one or two objectives against the blockwise comparison the
    general case uses (a constant third objective changes no dominance), on large sets
    with ties, infinities and signed zeros."""
    rng = np.random.default_rng(seed)
    values = (rng.integers(-3, 4, size=(n, d)).astype(float) if ties
              else rng.standard_normal((n, d)))
    values[rng.random((n, d)) < 0.02] = np.inf
    values[rng.random((n, d)) < 0.02] = -0.0
    values[rng.random(n) < 0.03] = np.nan
    general = non_dominated(np.column_stack([values, np.zeros(n)]))
    np.testing.assert_array_equal(non_dominated(values), general)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 400), st.integers(0, 60), st.integers(1, 2), st.integers(0, 2**31 - 1),
       st.booleans())
def test_dominated_by_one_or_two_objectives_agrees_with_the_general_comparison(
        n, m, d, seed, ties):
    """The sorted lookup of one or two objectives against the blockwise comparison (a
    constant third objective changes no dominance), with ties, infinities of both signs,
    signed zeros and NaN in the front and in the rows."""
    rng = np.random.default_rng(seed)

    def draw(k: int) -> np.ndarray:
        values = (rng.integers(-3, 4, size=(k, d)).astype(float) if ties
                  else rng.standard_normal((k, d)))
        values[rng.random((k, d)) < 0.04] = np.inf
        values[rng.random((k, d)) < 0.04] = -np.inf
        values[rng.random((k, d)) < 0.03] = -0.0
        values[rng.random((k, d)) < 0.03] = np.nan
        return values

    front, values = draw(m), draw(n)
    general = dominated_by(np.column_stack([front, np.zeros(m)]),
                           np.column_stack([values, np.zeros(n)]))
    np.testing.assert_array_equal(dominated_by(front, values), general)


def test_an_infinite_objective_is_dominated_only_by_a_row_that_is():
    inf = np.inf
    assert non_dominated(np.array([[-1.0, inf]])).tolist() == [True]
    assert non_dominated(np.array([[0.0, inf], [1.0, inf], [2.0, 5.0]])).tolist() == [
        True, False, True]


def test_duplicates_of_a_front_point_are_all_on_it():
    values = np.array([[1.0, 2.0], [1.0, 2.0], [2.0, 1.0], [2.0, 2.0]])
    assert non_dominated(values).tolist() == [True, True, True, False]


def test_maximised_objectives_are_negated():
    m = objective_matrix({"iteration_time_s": np.array([1.0, 2.0]), "mfu": np.array([0.5, 0.4])},
                         ["iteration_time_s", "mfu"])
    assert m.tolist() == [[1.0, -0.5], [2.0, -0.4]]


def test_top_points_break_ties_by_index():
    values = np.array([3.0, 1.0, np.nan, 1.0, 2.0])
    assert top_points(values, 3).tolist() == [1, 3, 4]
    assert kth_best(values, 2) == 1.0 and kth_best(values, 4) == 3.0
    assert kth_best(values, 5) == np.inf and kth_best(values, 0) == -np.inf


def test_top_points_of_distinct_plans_take_each_plans_first_point():
    values = np.array([1.0, 1.0, 2.0, 0.5, 3.0])
    plans = np.array([4, 4, 5, 6, 5])  # point 3 is plan 6's; points 0 and 1 plan 4's
    assert top_points(values, 3, plans).tolist() == [3, 0, 2]
    assert kth_best(values, 2, plans) == 1.0 and kth_best(values, 3, plans) == 2.0
    assert kth_best(values, 4, plans) == np.inf
