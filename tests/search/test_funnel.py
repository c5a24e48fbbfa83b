"""The exact funnel gives the answer of evaluating everything exactly, with less work."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xsweep.search.funnel import Funnel
from xsweep.search.pareto import non_dominated, top_points


def run(bounds, exact, feasible, candidates, top, max_round):
    """Drive a funnel with ``exact`` as the evaluator; return it and the rounds' picks."""
    funnel = Funnel(bounds, candidates, top, max_round)
    picked = []
    while len(picks := funnel.next_round()):
        assert not funnel.evaluated[picks].any() and candidates[picks].all()
        assert len(picks) <= max_round
        picked.append(picks)
        funnel.record(picks, exact[picks], feasible[picks])
    return funnel, picked


def answer(values, top):
    return (set(np.flatnonzero(non_dominated(values)).tolist()),
            [top_points(values[:, j], top).tolist() for j in range(values.shape[1])])


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 400), st.integers(1, 3), st.integers(0, 4), st.integers(1, 64),
       st.integers(0, 2**31 - 1))
def test_same_front_and_top_points_as_all_exact(n, d, top, max_round, seed):
    rng = np.random.default_rng(seed)
    exact = rng.integers(1, 30, size=(n, d)).astype(float)  # ties on purpose
    bounds = exact * rng.choice([1.0, 0.9, 0.6, 0.3], size=(n, d))  # never above exact
    if d > 1:
        bounds[:, 1] = exact[:, 1]  # an objective the bound knows exactly (cost rate, memory)
    feasible = rng.random(n) > 0.1  # exact evaluation can still fail (not converged)
    candidates = rng.random(n) > 0.2
    funnel, _ = run(bounds, exact, feasible, candidates, top, max_round)
    assert not (funnel.remaining).any()
    assert (funnel.evaluated | funnel.pruned)[candidates].all()
    assert not (funnel.evaluated & funnel.pruned).any()
    reference = np.where((candidates & feasible)[:, None], exact, np.nan)
    found = np.where((funnel.evaluated & feasible)[:, None], exact, np.nan)
    assert answer(found, top) == answer(reference, top)


def test_pruning_saves_work_when_bounds_are_tight():
    rng = np.random.default_rng(0)
    exact = rng.random((2000, 2)) + 1.0
    bounds = exact * 0.97
    funnel, picked = run(bounds, exact, np.ones(2000, bool), np.ones(2000, bool), 3, 256)
    assert funnel.evaluated.sum() < 200  # most points are pruned
    assert funnel.rounds == len(picked) >= 1


def test_a_point_without_bounds_is_evaluated():
    bounds = np.array([[1.0], [np.nan], [5.0]])
    exact = np.array([[1.0], [9.0], [6.0]])
    funnel, _ = run(bounds, exact, np.ones(3, bool), np.ones(3, bool), 1, 8)
    assert funnel.evaluated.tolist() == [True, True, False]
    assert funnel.pruned.tolist() == [False, False, True]


def test_exhaustive_evaluates_every_candidate_in_rounds():
    bounds = np.arange(10.0)[:, None]
    funnel = Funnel(bounds, np.arange(10) % 2 == 0, 1, 2, exhaustive=True)
    rounds = []
    while len(picks := funnel.next_round()):
        rounds.append(picks.tolist())
        funnel.record(picks, bounds[picks], np.ones(len(picks), bool))
    assert rounds == [[0, 2], [4, 6], [8]]
    assert not funnel.pruned.any()
